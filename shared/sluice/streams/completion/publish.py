"""Publish the completion events of a batch of jobs-table stream records.

``Publisher.publish(records)`` returns the sequence numbers of the records whose event was
not published; the Lambda answers them as ``batchItemFailures``, so Lambda retries from the
first of them (a DynamoDB stream is checkpointed at the lowest failed sequence number) and
everything after it is sent again: at least once, and a duplicate carries the same
``event_id``. A record that is not a final transition is done at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from sluice.core.errors import BackendUnavailable, SluiceError
from sluice.core.ports import ResultSink
from sluice.streams.completion.model import DEFAULT_INLINE_RESULT_BYTES, Completion, entry, from_record

log = logging.getLogger("sluice.streams.completion")

PUT_EVENTS_MAX = 10  # entries per PutEvents call


class EventSink(Protocol):
    """Where completion events go: ``put`` returns, per entry, True if it was accepted."""

    def put(self, entries: Sequence[dict[str, Any]]) -> list[bool]: ...


class EventBridgeSink:
    """``EventSink`` on EventBridge's ``PutEvents``; botocore errors become ``BackendUnavailable``."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def put(self, entries: Sequence[dict[str, Any]]) -> list[bool]:
        from botocore.exceptions import BotoCoreError, ClientError

        out: list[bool] = []
        for start in range(0, len(entries), PUT_EVENTS_MAX):
            chunk = list(entries[start:start + PUT_EVENTS_MAX])
            try:
                response = self._client.put_events(Entries=chunk)
            except (BotoCoreError, ClientError) as exc:
                raise BackendUnavailable(f"events.put_events: {exc}") from exc
            results = response.get("Entries", [])
            out += [i < len(results) and not results[i].get("ErrorCode") for i in range(len(chunk))]
        return out


class Publisher:
    def __init__(self, sink: EventSink, bus_name: str, *, results: ResultSink | None = None,
                 inline_bytes: int = DEFAULT_INLINE_RESULT_BYTES,
                 on_published: Callable[[Completion], None] | None = None) -> None:
        self.sink, self.bus_name, self.results = sink, bus_name, results
        self.inline_bytes = inline_bytes
        self.on_published = on_published  # the local stack's history records each event

    def publish(self, records: Iterable[Mapping[str, Any]]) -> list[str]:
        """The sequence numbers of the records to retry (none: all published or not events)."""
        pending: list[tuple[str, Completion]] = []
        failed: list[str] = []
        for record in records:
            seq = str((record.get("dynamodb") or {}).get("SequenceNumber", ""))
            try:
                completion = from_record(record, inline_bytes=self.inline_bytes)
                if completion is not None:
                    pending.append((seq, self._stored(completion)))
            except SluiceError as exc:  # the S3 upload of a large result: retry the record
                log.warning("completion event of record %s not ready: %s", seq, exc)
                failed.append(seq)
            except (KeyError, ValueError, TypeError) as exc:
                # A record that cannot be an event (not our item shape) would block the shard
                # for good: logged, counted as done.
                log.error("stream record %s is not a job item: %s", seq, exc)
        if pending:
            try:
                accepted = self.sink.put([entry(c, self.bus_name) for _, c in pending])
            except SluiceError as exc:
                log.warning("PutEvents failed for %d events: %s", len(pending), exc)
                accepted = [False] * len(pending)
            for (seq, completion), ok in zip(pending, accepted, strict=True):
                if not ok:
                    failed.append(seq)
                elif self.on_published is not None:
                    self.on_published(completion)
        return failed

    def _stored(self, completion: Completion) -> Completion:
        """A result too large for the event, kept in the item: put it in S3 and point to it.
        The key carries the result's token and digest, so a repeat writes the same object."""
        if completion.result_text is None or completion.result_key is None:
            return completion
        if self.results is None:
            detail = {**completion.detail, "result_ref": None, "result_omitted": "no results bucket"}
            return Completion(completion.event_id, completion.state, detail)
        ref = self.results.put(completion.result_key, completion.result_text.encode("utf-8"))
        return Completion(completion.event_id, completion.state, {**completion.detail, "result_ref": ref})


def batch_failures(failed: Sequence[str]) -> dict[str, Any]:
    """The Lambda answer with ``ReportBatchItemFailures``."""
    return {"batchItemFailures": [{"itemIdentifier": seq} for seq in failed]}
