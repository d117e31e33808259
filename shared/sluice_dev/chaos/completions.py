"""The chaos run's completion events: every final write of the run, through the real path.

After the drain, the jobs table's stream is read by ``local.streams.StreamPoller`` and
published by the events function's ``Publisher`` to moto's EventBridge bus, whose rule
delivers to an SQS queue; each event received there becomes a ``completion`` line of the
history (``job``, ``state``, ``event_id``, ``gen``). The first publisher "crashes" after
its first batch: its checkpoint is lost, and a fresh poller publishes everything from the
stream's start, so that batch's events arrive twice, with the same ids, as after a
crash between a PutEvents and the mapping's checkpoint. The checker then wants exactly
one distinct event per ending (``checker``, ``completion_violations``).
"""

from __future__ import annotations

import threading
from typing import Any

from sluice_dev.chaos.history import History

MAX_ROUNDS = 10_000


def collect(settings: Any, history: History, queue_name: str = "chaos-completions") -> int:
    """Publish and receive the run's completion events; returns how many were received."""
    from sluice.entry import root as wiring
    from sluice.streams.completion.publish import batch_failures
    from sluice_dev.local.streams import StreamPoller, ensure_bus, ensure_jobs_stream, follow

    url = ensure_bus(settings, queue_name)
    publisher = wiring.completion_publisher.__wrapped__(settings)  # not the cached one
    arn = ensure_jobs_stream(settings)
    streams = wiring.boto_client("dynamodbstreams", settings)

    def handle(event: dict[str, Any]) -> dict[str, Any]:
        return batch_failures(publisher.publish(event["Records"]))

    received = [0]

    def record(event: dict[str, Any]) -> None:
        d = event.get("detail", {})
        received[0] += 1
        history.emit("completion", job=d.get("job_id"), state=d.get("status"), event_id=d.get("event_id"),
                     gen=d.get("redrive_gen"), detail_type=event.get("detail-type"))

    # Received while they are published, as a consumer would: moto's SQS scans every message a
    # queue holds on each delivery, so 12,000 events left waiting cost minutes (86% of moto's
    # samples went to that scan in a 10,000-job run).
    published = threading.Event()
    reader = threading.Thread(target=follow, args=(settings, url, record),
                              kwargs={"stop": published, "wait_s": 1}, name="chaos-completions", daemon=True)
    reader.start()
    try:
        StreamPoller(streams, arn, handle).poll_once()  # ... and then it "crashes": no checkpoint kept
        poller = StreamPoller(streams, arn, handle, batch=1000)
        for _ in range(MAX_ROUNDS):
            if not poller.poll_once():
                break
    finally:
        published.set()
        reader.join()
    follow(settings, url, record, wait_s=1, until_empty=True)  # what arrived after the reader stopped
    return received[0]
