"""Key retention through a real worker and broker (``SEQKEEPER_KEY_RETENTION``,
processors/key_retention.py), under exactly_once where the broker has
transactions and at_least_once on the embedded broker:

* keys idle past a short retention are forgotten: their key state's last
  changelog record is a tombstone, and a marker of their next sequence is
  written;
* a worker restoring from the changelog alone (a new data directory) does
  not resurrect them: a late copy of a released sequence of a forgotten key
  is dead-lettered ``late-arrival`` (were its state restored, it would be a
  ``sequence-conflict``; were the key gone without its marker, it would wait
  for seq 1 and be emitted again), and a new message past the marker
  continues the key at its next sequence;
* on Apache Kafka, the changelog topic the worker created is compacted and
  keeps tombstones at least a day (DescribeConfigs).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from seqkeeper.demo import publish
from seqkeeper.processors.dead_letter import REASON
from seqkeeper.settings import Settings
from seqkeeper.state import codecs
from seqkeeper.topics import Record, create_topics, kafka_options, read_topic
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

pytestmark = pytest.mark.integration

KEYS = [f"k{i}" for i in range(12)]


def event(key: str, seq: int, mid: str | None = None) -> tuple[bytes, bytes]:
    value = {"messageId": mid or f"{key}-{seq}", "seq": seq, "type": "t", "data": {"n": seq}}
    return key.encode(), orjson.dumps(value)


def test_idle_keys_are_forgotten_and_stay_forgotten_through_a_restore(
    broker: Broker, make_settings, tmp_path: Path
) -> None:
    exactly_once = not broker.is_tansu  # (the embedded broker has no transactions)
    isolation = "read_committed" if exactly_once else "read_uncommitted"
    s: Settings = make_settings(
        timer_interval=0.2,
        key_retention=2.0,
        forgotten_key_retention=3600.0,
        processing_guarantee="exactly_once" if exactly_once else "at_least_once",
    )
    bootstrap = s.broker.bootstrap
    changelog = f"{s.group_id}-state-changelog"
    asyncio.run(create_topics(bootstrap, s.topics(), s.broker.partitions))

    def read(topic: str) -> list[Record]:
        return asyncio.run(read_topic(bootstrap, topic, isolation=isolation))

    def wait(
        worker: WorkerProcess, what: str, done: Callable[[], bool], timeout: float = 90
    ) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            worker.check_alive()
            assert time.monotonic() < deadline, (what, worker.log()[-3000:])
            time.sleep(0.5)

    def compacted() -> dict[bytes, bytes | None]:
        last: dict[bytes, bytes | None] = {}
        for r in sorted(read(changelog), key=lambda r: (r.partition, r.offset)):
            last[r.key or b""] = r.value
        return last

    def forgotten(view: dict[bytes, bytes | None], key: str) -> bool:
        state = codecs.key_state_key(key)
        marker = view.get(codecs.forgotten_key(key))
        return state in view and view[state] is None and marker is not None

    asyncio.run(
        publish(bootstrap, s.ordered.input_topic, [event(k, n) for k in KEYS for n in (1, 2)])
    )
    worker = WorkerProcess(s, tmp_path / "first.log").start()
    try:
        wait(worker, "ordered", lambda: len(read(s.ordered.ordered_topic)) == 2 * len(KEYS))
        wait(worker, "tombstones", lambda: all(forgotten(compacted(), k) for k in KEYS))
    finally:
        assert worker.stop() == 0
    view = compacted()
    for k in KEYS:  # the seen ids went with the key
        assert view[codecs.seen_id_key(k, f"{k}-1")] is None
        assert codecs.decode_forgotten(view[codecs.forgotten_key(k)] or b"").next_expected == 3

    # a worker restoring from the changelog alone (a new data directory)
    later = [event("k0", 2, mid="k0-2-late"), event("k1", 3), event("k2", 1, mid="k2-1-late")]
    asyncio.run(publish(bootstrap, s.ordered.input_topic, later))
    restored = s.with_overrides(data_dir=tmp_path / "restored")
    worker = WorkerProcess(restored, tmp_path / "second.log").start()
    try:
        wait(worker, "k1 seq 3", lambda: len(read(s.ordered.ordered_topic)) > 2 * len(KEYS))
        wait(worker, "late copies", lambda: len(read(s.ordered.dlq_topic)) >= 2)
        time.sleep(1.0)  # (a wrong emission would show)
        ordered, dlq = read(s.ordered.ordered_topic), read(s.ordered.dlq_topic)
    finally:
        assert worker.stop() == 0
    emitted = sorted((r.key or b"", orjson.loads(r.value or b"")["seq"]) for r in ordered)
    expected = sorted([(k.encode(), n) for k in KEYS for n in (1, 2)] + [(b"k1", 3)])
    assert emitted == expected  # each once; k1 went on from its marker
    assert sorted((r.key, r.header(REASON)) for r in dlq) == [
        (b"k0", b"late-arrival"),
        (b"k2", b"late-arrival"),
    ]


def test_the_changelog_topic_keeps_tombstones_for_the_key_retention(
    broker: Broker, make_settings, tmp_path: Path
) -> None:
    if broker.is_tansu:
        pytest.skip("the embedded broker answers DescribeConfigs with no configs")
    s: Settings = make_settings(key_retention=3 * 24 * 3600.0)
    bootstrap = s.broker.bootstrap
    asyncio.run(create_topics(bootstrap, s.topics(), s.broker.partitions))
    worker = WorkerProcess(s, tmp_path / "worker.log").start()
    changelog = f"{s.group_id}-state-changelog"

    async def configs() -> dict[str, str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
        await admin.start()
        try:
            resource = ConfigResource(ConfigResourceType.TOPIC, changelog)
            (response,) = await admin.describe_configs([resource])
            ((_, _, _, _, entries),) = response.resources
            return {e[0]: e[1] for e in entries}
        finally:
            await admin.close()

    try:
        deadline = time.monotonic() + 60
        while changelog not in asyncio.run(_topics(bootstrap)):
            worker.check_alive()
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.5)
    finally:
        assert worker.stop() == 0
    got = asyncio.run(configs())
    assert got["cleanup.policy"] == "compact"
    assert got["delete.retention.ms"] == str(3 * 24 * 3600 * 1000)


async def _topics(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()
