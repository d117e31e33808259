"""Per-team IAM policies (docs/deploy.md, section 7) rest on the API's path shapes (issue 19, item 3).

IAM matches ``execute-api`` resources with ``*`` (any characters, ``/`` included) and ``?``.
These tests hold the API to the shapes the documented policy relies on, and evaluate that
policy, as IAM would, against every route for the team's queues and for others.
"""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from sluice.core import ids
from sluice.core.models import QUEUE_NAME_RE
from sluice.entry.gateway import Gateway
from sluice.gateway.schedules import Schedules
from sluice_dev.fakes import FakeScheduleStore
from tests.infra import cfn
from tests.unit.test_gateway_fakes import KEY, Rig

SHAPES = {"/v1/queues/{queue}/jobs": {"post"}, "/v1/queues/{queue}/jobs/batch": {"post"},
          "/v1/queues/{queue}": {"get"}, "/v1/jobs/{job_id}": {"get", "delete"}, "/v1/openapi.json": {"get"}}
# The operator API (issue 17): SigV4 only, for operator policies; no team policy may reach it.
ADMIN_SHAPES = {f"/v1/admin/queues/{{queue}}/{tail}": methods for tail, methods in (
    ("pause", {"post"}), ("resume", {"post"}), ("rate", {"put"}), ("max-in-flight", {"put"}),
    ("watermarks", {"put"}), ("dlq", {"get", "delete"}), ("dlq/redrive", {"post"}), ("caps", {"put"}),
    ("schedules", {"get", "post"}), ("schedules/{name}", {"get", "delete"}),
    ("schedules/{name}/pause", {"post"}), ("schedules/{name}/resume", {"post"}), ("jobs", {"get"}),
    ("jobs/{job_id}/timeline", {"get"}), ("depth", {"get"}), ("sensitive", {"put"}))} | {
    "/v1/admin/queues": {"get"}, "/v1/admin/queues/{queue}": {"get"}}
PREFIX = "arn:aws:execute-api:us-east-1:123456789012:a1b2c3d4e5/live/"
NOW = 1_700_000_000_000
queues = st.from_regex(QUEUE_NAME_RE, fullmatch=True)


def iam_match(pattern: str, resource: str) -> bool:
    """IAM's resource wildcards: ``*`` any run of characters, ``?`` exactly one."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, resource, re.S) is not None


def documented_policy() -> list[str]:
    text = (cfn.ROOT / "docs/deploy.md").read_text()
    block = re.search(r"<!-- team-policy -->\s*```json\n(.*?)```", text, re.S)
    assert block, "docs/deploy.md lost its team policy"
    (statement,) = json.loads(block.group(1))["Statement"]
    assert statement["Effect"] == "Allow" and statement["Action"] == "execute-api:Invoke"
    return statement["Resource"]  # type: ignore[no-any-return]


def allowed(method: str, path: str) -> bool:
    return any(iam_match(p, f"{PREFIX}{method}{path}") for p in documented_policy())


def test_the_api_has_exactly_the_routes_the_policies_name() -> None:
    body = cfn.template()["Resources"]["Api"]["Properties"]["DefinitionBody"]
    assert {path: set(item) for path, item in body["paths"].items()} == SHAPES | ADMIN_SHAPES
    rig = Rig()  # a gateway with a schedules table, as the template's
    rig.gateway = Gateway(rig.api, schedules=lambda api: Schedules(api, FakeScheduleStore()))
    served = json.loads(rig.gateway.openapi_json())["paths"]
    assert {p: set(item) for p, item in served.items()} == {p: m for p, m in (SHAPES | ADMIN_SHAPES).items()
                                                             if p != "/v1/openapi.json"}


def test_the_team_policy_reaches_no_operator_route() -> None:
    for path, methods in ADMIN_SHAPES.items():
        for method in methods:
            assert not allowed(method.upper(), path.replace("{queue}", "emails")), (method, path)


def test_queue_names_cannot_hold_what_would_make_a_pattern_ambiguous() -> None:
    for bad in ("a.b", "a/b", "a*", "a?", "A", ".a", ""):
        assert QUEUE_NAME_RE.fullmatch(bad) is None, bad


@given(queue=queues, other=queues, entropy=st.binary(min_size=10, max_size=10))
def test_a_job_id_matches_the_pattern_of_its_own_queue_only(queue: str, other: str, entropy: bytes) -> None:
    job_id = ids.mint(NOW, queue, KEY, entropy)
    assert job_id.count(".") == 2
    assert iam_match(f"GET/v1/jobs/*.{other}.*", f"GET/v1/jobs/{job_id}") is (other == queue)


def test_the_documented_policy_lets_the_team_use_its_queues_and_nothing_else() -> None:
    for q in ("emails", "thumbnails"):
        own = ids.mint(NOW, q, KEY)
        assert allowed("POST", f"/v1/queues/{q}/jobs") and allowed("POST", f"/v1/queues/{q}/jobs/batch")
        assert allowed("GET", f"/v1/queues/{q}")
        assert allowed("GET", f"/v1/jobs/{own}") and allowed("DELETE", f"/v1/jobs/{own}")
    for other in ("email", "emails2", "emails-eu", "thumbnail", "billing"):
        theirs = ids.mint(NOW, other, KEY)
        for method, path in (("POST", f"/v1/queues/{other}/jobs"), ("POST", f"/v1/queues/{other}/jobs/batch"),
                             ("GET", f"/v1/queues/{other}"), ("GET", f"/v1/jobs/{theirs}"),
                             ("DELETE", f"/v1/jobs/{theirs}")):
            assert not allowed(method, path), (method, path)
    assert allowed("GET", "/v1/openapi.json")
    assert not allowed("PUT", "/v1/queues/emails/jobs")


def test_an_id_spliced_to_pass_the_pattern_reaches_no_job() -> None:
    """``*.emails.*`` also matches ``<another queue's id>.emails.x``: the gateway answers 404."""
    rig = Rig()
    _, _, accepted = rig.call("POST", "/v1/queues/billing/jobs", {"payload": {"secret": 1}})
    theirs = accepted["job_id"]
    rig.store.mark_queued([(theirs, "billing", 0)])
    assert rig.call("GET", f"/v1/jobs/{theirs}")[0] == 200
    for spliced in (f"{theirs}.emails.x", f"x.emails.{theirs}", theirs.replace(".billing.", ".emails.")):
        assert allowed("GET", f"/v1/jobs/{spliced}"), spliced  # IAM lets it through ...
        code, _, doc = rig.call("GET", f"/v1/jobs/{spliced}")
        assert code in (400, 404), (spliced, code, doc)  # ... and the gateway finds nothing
        assert rig.call("DELETE", f"/v1/jobs/{spliced}")[0] in (400, 404), spliced
    assert rig.store.get_job(theirs).status.value != "cancelled"


def test_api_key_mode_is_documented_single_tenant_with_one_key() -> None:
    text = (cfn.ROOT / "docs/deploy.md").read_text()
    assert "**API-key modes are single-tenant.**" in text
    keys = cfn.resources(cfn.template(), "AWS::ApiGateway::ApiKey")
    assert len(keys) == 1, "one key for everyone: if this changes, so must the docs"
