"""``KafkaSource.position`` on Tansu: where a taken partition's next poll starts (relay/parking.py
reads a lane back only below it, ``OwnedPartition.read_bound``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.backends.relay_proc import create_topic, produce, settings


@pytest.mark.timeout(60)
def test_position_is_where_the_next_poll_starts_after_a_rewind_a_seek_and_a_pause(tansu: Any,
                                                                                     unique: str) -> None:
    from sluice.backends.kafka.source import KafkaSource

    bootstrap = tansu.extra["bootstrap"]
    topic = f"position-{unique}"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [(b"k", b"v", 0)] * 5)
    source = KafkaSource.from_settings(settings(bootstrap, topic, f"g-{unique}"))
    try:
        assert source.position(0) is None  # not owned
        source.assign([0])
        source.rewind_to_committed([0])
        assert source.position(0) == 0  # nothing committed: the log start
        source.commit({0: 3})
        source.rewind_to_committed([0])
        assert source.position(0) == 3
        source.consumer.seek(source._tp(0), 1)  # a replay's seek (recovery's KafkaOffsets)
        assert source.position(0) == 1
        source.pause([0])
        assert source.position(0) == 1  # paused: where it resumes
        source.resume([0])
        records = []
        for _ in range(50):
            records += source.poll(200, 10)
            if len(records) >= 4:
                break
        assert [r.offset for r in records] == [1, 2, 3, 4] and source.position(0) == 5
    finally:
        source.close()
