"""Issue 19, item 1, in the template: the safety net may not name a reserved queue.

A worker refuses a dispatch event that names one (``DispatchEvent``), so a safety net aimed at
``sluice-relay`` would fail on every run; the parameter refuses it at deploy time instead.
"""

from __future__ import annotations

import re

import pytest

from sluice.core.models import RESERVED_QUEUE_PREFIX, DispatchEvent
from tests.infra import cfn


@pytest.mark.parametrize(("queue", "allowed"), [("default", True), ("emails", True), ("sluice", True),
                                                ("sluice_relay", True), ("sluice-relay", False),
                                                (RESERVED_QUEUE_PREFIX + "x", False), ("Bad Name", False)])
def test_the_safety_net_queues_parameter_refuses_reserved_names(queue: str, allowed: bool) -> None:
    spec = cfn.template()["Parameters"]["SafetyNetQueues"]
    assert spec["Type"] == "CommaDelimitedList"  # CloudFormation checks the pattern on each value
    assert bool(re.fullmatch(spec["AllowedPattern"], queue)) is allowed
    if allowed and queue != "Bad Name":
        DispatchEvent(queues=[queue])  # what the pattern admits, the worker accepts
