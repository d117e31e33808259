"""The gateway refuses what a queue may not hold (gateway.admission, core.limits),
from a cached view."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.core.bus import EventBus
from sluice.core.errors import BackendUnavailable
from sluice.core.limits import Limits, take_within
from sluice.core.models import QueueConfig
from sluice.entry.gateway import Gateway
from sluice.gateway.admission import Admission
from sluice.gateway.api import Api, Backends, IdMinting, Intake
from sluice.relay.ownership import RELAY_QUEUE
from tests.unit.test_gateway_fakes import KEY, Rig

JOBS = "/v1/queues/emails/jobs"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def limited(limits: Limits, ttl_ms: int = 2_000, horizon_s: int = 0) -> tuple[Rig, Clock]:
    rig, clock = Rig(), Clock()
    admission = Admission(rig.queue, limits, ttl_ms=ttl_ms, clock=clock)  # type: ignore[arg-type]
    rig.api = Api(Backends(rig.log, rig.store, rig.queue, events=EventBus()), IdMinting(KEY),  # type: ignore[arg-type]
                  intake=Intake(admission=admission, limits=limits, delay_horizon_s=horizon_s),
                  idempotency=rig.idem,
                  clock=lambda: rig.now_ms)
    rig.gateway = Gateway(rig.api)
    rig.queue.registered = {"emails"}
    return rig, clock


def delayed(n: int) -> dict[str, Any]:
    return {"jobs": [{"payload": i, "delay_seconds": 7 * 24 * 3600} for i in range(n)]}


def test_delayed_jobs_over_the_cap_are_429_problem_json_with_retry_after() -> None:
    rig, _ = limited(Limits(max_delayed=150))
    rig.queue.seed("emails", "delayed", 100)
    assert rig.call("POST", f"{JOBS}/batch", delayed(50))[0] == 202
    code, headers, doc = rig.call("POST", f"{JOBS}/batch", delayed(1))  # the view counts the 50
    assert code == 429
    assert headers["content-type"] == "application/problem+json"
    assert (doc["code"], doc["type"], doc["status"]) == ("QUEUE_FULL", "urn:sluice:problem:queue-full", 429)
    assert "150" in doc["detail"]
    assert 1 <= int(headers["retry-after"]) <= 2
    assert len(rig.log.records) == 50  # nothing of the refused request reached Kafka
    assert rig.call("POST", JOBS, {"payload": "ready now"})[0] == 202  # ready jobs still go in


def test_jobs_delayed_beyond_the_relays_horizon_do_not_count_toward_the_delayed_cap() -> None:
    # They wait in the relay's delay lane (issue 28), not in Redis: the cap bounds what Redis holds.
    rig, _ = limited(Limits(max_delayed=150), horizon_s=900)
    rig.queue.seed("emails", "delayed", 150)  # Redis at its cap
    assert rig.call("POST", f"{JOBS}/batch", delayed(100))[0] == 202  # a week ahead: the delay lane
    assert rig.call("POST", f"{JOBS}/batch", delayed(100))[0] == 202
    soon = {"jobs": [{"payload": 1, "delay_seconds": 900}]}  # within the horizon: into Redis, refused
    assert rig.call("POST", f"{JOBS}/batch", soon)[0] == 429


def test_a_queue_at_its_dead_cap_takes_no_job_and_its_own_config_overrides_the_default() -> None:
    rig, clock = limited(Limits(max_dead=1_000))
    rig.queue.seed("emails", "dead", 10)
    rig.queue.configs["emails"] = QueueConfig(max_dead=10)
    code, _, doc = rig.call("POST", JOBS, {"payload": 1})
    assert (code, doc["code"]) == (429, "QUEUE_FULL")
    assert "dead" in doc["detail"]
    rig.queue.seed("emails", "dead", 0)  # an operator purged them: the next view lets jobs in
    clock.t += 2.0
    assert rig.call("POST", JOBS, {"payload": 1})[0] == 202
    _, _, view = rig.call("GET", "/v1/queues/emails")
    assert (view["max_dead"], view["max_delayed"]) == (10, 0)


def test_the_view_is_read_once_per_ttl_not_per_request() -> None:
    rig, clock = limited(Limits(max_delayed=10_000))
    for _ in range(20):
        assert rig.call("POST", JOBS, {"payload": 1})[0] == 202
    assert rig.queue.reads == 1
    clock.t += 2.0
    rig.call("POST", JOBS, {"payload": 1})
    assert rig.queue.reads == 2


def test_above_the_memory_guard_deep_queues_are_refused_and_near_full_every_queue() -> None:
    rig, clock = limited(Limits(push_memory_percent=80, memory_guard_depth=50))
    rig.queue.memory = 85.0
    assert rig.call("POST", JOBS, {"payload": 1})[0] == 202  # 4 waiting jobs: it is being drained
    rig.queue.seed("emails", "delayed", 60)
    clock.t += 2.0
    code, _, doc = rig.call("POST", JOBS, {"payload": 1})
    assert (code, doc["code"]) == (429, "QUEUE_FULL")
    assert "85% full" in doc["detail"]
    rig.queue.seed("emails", "delayed", 0)
    rig.queue.memory = 91.0  # halfway to 100%: nothing more goes in
    clock.t += 2.0
    assert rig.call("POST", JOBS, {"payload": 1})[0] == 429


def test_a_new_queue_beyond_the_registry_limit_is_refused_clearly() -> None:
    rig, _ = limited(Limits(max_queues=3))
    rig.queue.registered = {"a", "b", "emails"}
    assert rig.call("POST", JOBS, {"payload": 1})[0] == 202  # registered: fine
    code, _, doc = rig.call("POST", "/v1/queues/another/jobs", {"payload": 1})
    assert (code, doc["code"]) == (403, "QUEUE_NOT_ALLOWED")
    assert "SLUICE_MAX_QUEUES" in doc["detail"]
    assert rig.queue.reads == 1  # the registered queue's depths; a new name has none to read


def test_the_allow_list_refuses_other_queues_without_asking_redis() -> None:
    rig, _ = limited(Limits(allow=frozenset({"emails"})))
    code, _, doc = rig.call("POST", "/v1/queues/random-name/jobs/batch", delayed(2))
    assert (code, doc["code"]) == (403, "QUEUE_NOT_ALLOWED")
    assert rig.queue.reads == 0 and rig.log.records == []
    assert rig.call("POST", JOBS, {"payload": 1})[0] == 202


def test_an_unreadable_view_accepts_the_job() -> None:
    """Kafka is the source of truth and the relay enforces every cap: Redis down is no 429."""
    rig, _ = limited(Limits(max_delayed=1))

    def down(queue: str) -> Any:
        raise BackendUnavailable("redis unavailable")

    rig.queue.stats = down  # type: ignore[method-assign]
    assert rig.call("POST", f"{JOBS}/batch", delayed(5))[0] == 202


def test_sluices_own_queues_are_never_refused_by_the_registry_limits() -> None:
    limits = Limits(max_queues=1, allow=frozenset({"emails"}))
    limits.check_name(RELAY_QUEUE)
    assert limits.registry_limit(RELAY_QUEUE) == 0 and limits.registry_limit("emails") == 1


@pytest.mark.parametrize(("flags", "room", "n"), [
    ([False, True, False, True], None, 4), ([False, True, False, True], 0, 1),
    ([False, True, False, True], 1, 3), ([True, True], 5, 2), ([False, False], 0, 2)])
def test_take_within_stops_at_the_first_delayed_record_over_the_room(flags: list[bool], room: int | None,
                                                                     n: int) -> None:
    assert take_within(flags, room) == n
