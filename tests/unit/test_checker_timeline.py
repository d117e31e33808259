"""The scenario timeline from hand-made process events: wording, story time, the stale-write verdict."""

from __future__ import annotations

from typing import Any

from sluice_dev.chaos.timeline import Narrator


def ev(kind: str, who: str, t: float, **fields: Any) -> dict[str, Any]:
    return {"event": kind, "who": who, "t": 1000.0 + t, **fields}


def story(fencing: bool) -> list[dict[str, Any]]:
    """The seed's gc-pause at time scale 0.1 (so 1.0 s of wall time is 10 story seconds)."""
    a_write = ev("write", "A", 1.45, token=33, outcome="rejected", current=34) if fencing else \
        ev("write", "A", 1.45, token=33, outcome="written")
    return [ev("leased", "A", 0.0, lease=7, deadline_ms=1_001_000), ev("granted", "A", 0.01, token=33),
            ev("stall", "A", 0.2, token=33),
            ev("lease_expired", "lock", 1.0, holder="A"),
            ev("leased", "B", 1.0, lease=8, deadline_ms=1_002_000), ev("granted", "B", 1.01, token=34),
            ev("handler_start", "B", 1.02, token=34, attempt=2),
            ev("write", "B", 1.1, token=34, outcome="written"), ev("ack", "B", 1.11, outcome="ok"),
            ev("resumed", "A", 1.4, token=33), a_write]


def narrate(events: list[dict[str, Any]]) -> Narrator:
    n = Narrator(time_scale=0.1, freeze_for_s=12)
    for e in events:
        n.feed(e)
    return n


def test_with_fencing_the_timeline_reads_like_the_seed_and_no_stale_write_is_accepted() -> None:
    n = narrate(story(fencing=True))
    lines = [(round(e.t, 1), e.actor, e.text) for e in n.entries]
    assert lines[0] == (0.0, "A", "takes the lease with fencing token 33")
    assert (2.0, "A", "stalls (SIGSTOP, a GC pause) for 12 s, just before writing") in lines
    assert (10.0, "lock", "A's lease expires") in lines
    assert (10.0, "B", "takes the lease with fencing token 34") in lines
    assert (11.0, "storage", "accepts B's write (token 34)") in lines
    assert (14.0, "A", "resumes, still believes it holds the lease, and writes") in lines
    assert lines[-1] == (14.5, "storage", "rejects A's write: token 33 is stale, the current token is 34")
    assert not n.stale_write_accepted and n.runs == {"A": 0, "B": 1}
    assert n.writer_of(34) == "B"


def test_without_fencing_a_late_write_is_accepted_and_called_the_bug() -> None:
    n = narrate(story(fencing=False))
    last = n.entries[-1]
    assert last.actor == "storage" and last.facts["stale"] is True
    assert "overwrites B's result: THE BUG" in last.text
    assert n.stale_write_accepted


def test_a_worker_that_resumes_before_its_lease_expires_is_not_called_stale() -> None:
    events = [ev("leased", "A", 0.0, lease=7, deadline_ms=1_001_000), ev("granted", "A", 0.01, token=1),
              ev("stall", "A", 0.2, token=1), ev("resumed", "A", 0.7, token=1),
              ev("renewed", "A", 0.71, lease=7, deadline_ms=1_001_710),
              ev("write", "A", 0.72, token=1, outcome="written")]
    n = narrate(events)
    texts = [e.text for e in n.entries]
    assert "resumes; its lease has not expired, and it writes" in texts
    assert "renews its lease (now until 17.1 s)" in texts
    assert not n.stale_write_accepted
