"""Turning what the scenario's processes reported into the seed's timeline.

Pure: events in, timeline entries out. An event is one JSON line a worker process
wrote (``sluice_dev.chaos.probe``) or one the controller observed itself (the lease
expiring in Redis, a process dying); ``Narrator.feed`` turns each into zero or more
entries, with story time = wall seconds since A took the lease, divided by the
time scale, so a run at ``--time-scale 0.1`` reads like the full-length story.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Entry:
    t: float  # story seconds since A took the lease
    actor: str  # "A", "B", "lock", "storage"
    event: str
    text: str
    facts: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"t": round(self.t, 3), "actor": self.actor, "event": self.event, "text": self.text,
                **self.facts}

    def line(self) -> str:
        who = {"lock": "Lock", "storage": "Storage"}.get(self.actor, f"Worker {self.actor}")
        return f"{self.t:7.2f} s  {who:<9} {self.text}"


@dataclass
class Narrator:
    """Keeps the facts the wording needs (who holds which token) while events arrive."""

    time_scale: float
    freeze_for_s: float = 0.0
    t0: float | None = None
    tokens: dict[str, int] = field(default_factory=dict)  # worker -> fencing token it was granted
    grants: list[tuple[float, int, str]] = field(default_factory=list)  # (wall time, token, worker)
    leased_at: dict[str, float] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=lambda: {"A": 0, "B": 0})
    expired: set[str] = field(default_factory=set)
    resumed: set[str] = field(default_factory=set)
    accepted_writes: list[dict[str, Any]] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)

    def story(self, wall: float) -> float:
        return 0.0 if self.t0 is None else (wall - self.t0) / self.time_scale

    def newest_token(self, before: float | None = None) -> int:
        return max((tok for t, tok, _ in self.grants if before is None or t <= before), default=0)

    def _add(self, wall: float, actor: str, event: str, text: str, **facts: Any) -> Entry:
        entry = Entry(self.story(wall), actor, event, text, facts)
        self.entries.append(entry)
        return entry

    def feed(self, e: dict[str, Any]) -> list[Entry]:
        start = len(self.entries)
        kind, who, wall = e["event"], str(e.get("who", "")), float(e["t"])
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(who, wall, e)
        return self.entries[start:]

    # -- one method per event kind ----------------------------------------------------------------

    def _on_leased(self, who: str, wall: float, e: dict[str, Any]) -> None:
        if self.t0 is None:
            self.t0 = wall
        self.leased_at[who] = wall

    def _on_granted(self, who: str, wall: float, e: dict[str, Any]) -> None:
        token = int(e["token"])
        self.tokens[who] = token
        self.grants.append((wall, token, who))
        self._add(self.leased_at.get(who, wall), who, "lease",
                  f"takes the lease with fencing token {token}", token=token)

    def _on_renewed(self, who: str, wall: float, e: dict[str, Any]) -> None:
        until = self.story(int(e["deadline_ms"]) / 1000)
        self._add(wall, who, "renew", f"renews its lease (now until {until:.1f} s)", until=round(until, 3))

    def _on_renew_failed(self, who: str, wall: float, e: dict[str, Any]) -> None:
        self._add(wall, who, "renew_failed", "renews its lease: refused, the lease is gone",
                  why=e.get("why"))

    def _on_handler_start(self, who: str, wall: float, e: dict[str, Any]) -> None:
        self.runs[who] = self.runs.get(who, 0) + 1
        self._add(wall, who, "run", f"starts the job (attempt {e.get('attempt')})", token=e.get("token"))

    def _on_stall(self, who: str, wall: float, e: dict[str, Any]) -> None:
        self._add(wall, who, "stall",
                  f"stalls (SIGSTOP, a GC pause) for {self.freeze_for_s:g} s, just before writing",
                  token=e.get("token"))

    def _on_lease_expired(self, who: str, wall: float, e: dict[str, Any]) -> None:
        holder = str(e["holder"])
        self.expired.add(holder)
        self._add(wall, "lock", "expire", f"{holder}'s lease expires", holder=holder)

    def _on_resumed(self, who: str, wall: float, e: dict[str, Any]) -> None:
        self.resumed.add(who)
        if who in self.expired:
            text = "resumes, still believes it holds the lease, and writes"
        else:
            text = "resumes; its lease has not expired, and it writes"
        self._add(wall, who, "resume", text, token=e.get("token"))

    def _on_write(self, who: str, wall: float, e: dict[str, Any]) -> None:
        token, outcome = int(e["token"]), str(e["outcome"])
        newest = self.newest_token(before=wall)
        if who not in self.resumed:  # a resumed worker's entry already says it writes
            self._add(wall, who, "write", "writes the job's result", token=token)
        if outcome in ("written", "already_written"):
            stale = newest > token
            self.accepted_writes.append({"who": who, "token": token, "stale": stale, "t": wall})
            if stale:
                victim = next((w for _, tok, w in self.grants if tok == newest), "?")
                text = (f"accepts {who}'s write (token {token}) although token {newest} exists, "
                        f"and overwrites {victim}'s result: THE BUG, fencing is off")
            else:
                text = f"accepts {who}'s write (token {token})"
            self._add(wall, "storage", "accept", text, writer=who, token=token, stale=stale)
        elif outcome == "rejected":
            self._add(wall, "storage", "reject",
                      f"rejects {who}'s write: token {token} is stale, the current token is "
                      f"{e.get('current')}", writer=who, token=token, current=e.get("current"))
        else:
            self._add(wall, "storage", "error", f"fails {who}'s write ({e.get('error')})", writer=who)

    def _on_ack(self, who: str, wall: float, e: dict[str, Any]) -> None:
        if e.get("outcome") == "ok":
            self._add(wall, who, "ack", "acknowledges the job; it leaves the queue")
        else:
            self._add(wall, who, "ack_refused", "tries to acknowledge: refused, the lease is no longer its")

    def _on_dying(self, who: str, wall: float, e: dict[str, Any]) -> None:
        self._add(wall, who, "crash", "is SIGKILLed after writing its result, before its ack")

    @property
    def stale_write_accepted(self) -> bool:
        return any(w["stale"] for w in self.accepted_writes)

    def writer_of(self, token: int | None) -> str | None:
        return next((w for _, tok, w in self.grants if tok == token), None)
