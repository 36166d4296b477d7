"""One record from a producer with a wrong clock cannot give up other keys'
gaps: the user's scenario through a real worker and broker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.broker import free_port
from seqkeeper.processors.dead_letter import REASON
from seqkeeper.security import kafka_options
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.integration.test_resequencer_policies import seqs, wait_for

pytestmark = pytest.mark.integration


async def send(bootstrap: str, topic: str, key: str, seq: int, at_ms: int, field: bool) -> None:
    """One event; its time ``at_ms`` in the field ``at`` (``field``) or as
    the record timestamp."""
    doc: dict[str, object] = {"messageId": f"{key}-{seq}", "seq": seq, "type": "t"}
    if field:
        doc["at"] = at_ms
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kafka_options(), acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            topic, orjson.dumps(doc), key=key.encode(), timestamp_ms=None if field else at_ms
        )
    finally:
        await producer.stop()


# Apache Kafka 4 refuses a record timestamp more than an hour ahead
# (log.message.timestamp.after.max.ms): 30 minutes reach the worker there.
@pytest.mark.parametrize(("field", "ahead"), [(True, 30 * 24 * 3600), (False, 30 * 60)])
def test_a_future_record_gives_up_no_other_gap(
    make_settings, tmp_path: Path, field: bool, ahead: int
) -> None:
    s = make_settings(
        partitions=1,  # the stranger on A's partition
        gap_timeout=60.0,
        timer_interval=0.2,
        web_port=free_port(),
        event_time_field="at" if field else "",
    )
    asyncio.run(create_topics(s.broker.bootstrap, s.topics(), s.broker.partitions))
    worker = WorkerProcess(s, tmp_path / "worker.log").start()
    topic, bootstrap = s.ordered.input_topic, s.broker.bootstrap
    try:
        now_ms = int(time.time() * 1000)
        asyncio.run(send(bootstrap, topic, "A", 1, now_ms, field))
        asyncio.run(send(bootstrap, topic, "A", 3, now_ms + 100, field))
        asyncio.run(send(bootstrap, topic, "stranger", 1, now_ms + ahead * 1000, field))

        def stranger_done(records) -> bool:  # dead-lettered (or, before the fix, emitted)
            return any(r.key == b"stranger" for r in records)

        deadline = time.monotonic() + 60
        while not (
            stranger_done(asyncio.run(read_topic(bootstrap, s.ordered.dlq_topic)))
            or stranger_done(asyncio.run(read_topic(bootstrap, s.ordered.ordered_topic)))
        ):
            worker.check_alive()
            assert time.monotonic() < deadline, worker.log()[-2000:]
            time.sleep(0.3)
        time.sleep(5)  # the user's 5 s: many timer ticks
        asyncio.run(send(bootstrap, topic, "A", 2, int(time.time() * 1000), field))
        ordered = wait_for(s, s.ordered.ordered_topic, lambda r: len(seqs(r, "A")) >= 3, worker)
        assert seqs(ordered, "A") == [1, 2, 3]
        assert seqs(ordered, "stranger") == []
        dlq = wait_for(s, s.ordered.dlq_topic, lambda r: len(r) >= 1, worker)
        assert [(r.key, r.header(REASON)) for r in dlq] == [(b"stranger", b"future-event-time")]
        assert (
            "SEQKEEPER_MAX_CLOCK_SKEW=300 s" in (dlq[0].header("seqkeeper.detail") or b"").decode()
        )
    finally:
        assert worker.stop() == 0
