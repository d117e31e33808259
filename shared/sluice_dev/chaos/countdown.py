"""The countdown function's part in a chaos run: the jobs table's stream counts each child again
(``streams.countdown.StreamCountdown.recount``), as the countdown function does in AWS and ``sluice dev``
does locally (``local.dev``).

A worker counts the children its round ended when the round ends (``worker.countdown``), after their
acks: a worker killed mid-round leaves children ended, acked and uncounted, and only the stream counts
them then (docs/flows.md, "The round countdown"). The chaos runs ran without it while every count was
made before its job's ack; they run the production path now, or a kill mid-round would leave a
continuation waiting for good that AWS would release. The Lambda runtime's ``sluice dev`` stack polls
the stream into its own countdown already (``Runtime.counts_down_stream``); this agent serves the
process runtime.
"""

from __future__ import annotations

import threading
from typing import Any


class StreamCountdownAgent:
    """Polls the jobs table's stream (``local.streams.StreamPoller``) into the stream's countdown, which
    releases continuations through a gateway use case of its own (its own Kafka producer)."""

    def __init__(self, settings: Any) -> None:
        from sluice.backends.dynamodb.jobs import DynamoJobStore
        from sluice.backends.kafka.producer import KafkaJobLog
        from sluice.backends.redis.queue import RedisJobQueue
        from sluice.core.bus import EventBus
        from sluice.core.families import Countdown
        from sluice.entry import root as wiring
        from sluice.gateway.api import Api, Backends
        from sluice.streams.completion.publish import batch_failures
        from sluice.streams.countdown import StreamCountdown
        from sluice_dev.chaos import keys
        from sluice_dev.local.streams import StreamPoller, ensure_jobs_stream, stream_consumers

        self.log = KafkaJobLog.from_settings(settings)
        store = DynamoJobStore.from_settings(settings)
        api = Api(Backends(self.log, store, RedisJobQueue.from_settings(settings), EventBus(),
                           families=store.families), keys.minting(settings))
        countdown = StreamCountdown(Countdown(store.families, api.release_continuation))
        stream = ensure_jobs_stream(settings)
        self.poller = StreamPoller(wiring.boto_client("dynamodbstreams", settings), stream,
                                   lambda event: batch_failures(stream_consumers(event["Records"],
                                                                                 countdown.recount)))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.poller.run, args=(self._stop,), name="chaos-countdown",
                                        daemon=True)

    def start(self) -> StreamCountdownAgent:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.log.close()
