"""Local state whose changelog offset lies outside its changelog is reset
and rebuilt from the changelog, never used: the topic was
deleted and recreated (its offset is past the end; Faust would stop with a
``ConsistencyError``), or records after it were deleted (before the log
start: its tail cannot be replayed). Counted in offsets and records."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from seqkeeper.bench.restarts import local_offsets
from seqkeeper.broker import free_port
from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.settings import Settings
from seqkeeper.state.formats import MARKER
from seqkeeper.topics import create_topics, end_offsets_of, read_topic
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker
from tests.integration.replays import replayed

pytestmark = pytest.mark.integration


def run(settings: Settings, log: Path, verify: bool = False) -> str:
    """A worker started, restored (and, ``verify``: done with the input),
    stopped cleanly; its log."""
    worker = WorkerProcess(settings, log).start()
    try:
        if verify:
            report = asyncio.run(wait_until_verified(settings, timeout=180, worker=worker))
            assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        else:
            worker.wait_ready(timeout=180)
    finally:
        code = worker.stop()
    assert code == 0, worker.log()[-3000:]
    return worker.log()


def standby_applied(worker: WorkerProcess) -> float:
    """``seqkeeper_changelog_replayed_total{role="standby"}`` of ``worker``."""
    url = f"http://127.0.0.1:{worker.settings.runtime.web_port}/metrics"
    metrics = urllib.request.urlopen(url, timeout=10).read().decode()
    found = re.search(r'seqkeeper_changelog_replayed_total\{role="standby"\} (\S+)', metrics)
    return float(found.group(1)) if found else 0.0


def reset_line(
    changelog: str, partition: int, local: int, why: str, role: str = "active"
) -> str:
    return (
        f"changelog {changelog}/{partition} ({role}): the local state's offset {local:,} "
        f"is {why}: "
        "local state reset, rebuilt from the changelog"
    )


async def delete_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
        deadline = time.monotonic() + timeout
        while topic in set(await admin.list_topics()):
            assert time.monotonic() < deadline, f"{topic} still listed"
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


def test_a_recreated_changelog_resets_the_local_state(make_settings, tmp_path: Path) -> None:
    settings: Settings = make_settings(processing_guarantee="at_least_once")
    bootstrap = settings.broker.bootstrap
    asyncio.run(create_topics(bootstrap, settings.topics(), settings.broker.partitions))
    changelog = f"{settings.group_id}-state-changelog"
    w = generate(messages=1_000, keys=100, malformed=0, seed=364)
    asyncio.run(publish(bootstrap, settings.ordered.input_topic, w.records))
    run(settings, tmp_path / "w1.log", verify=True)
    local = local_offsets(settings.runtime.data_dir)
    assert local and all(offset >= 0 for offset in local.values()), local

    asyncio.run(delete_topic(bootstrap, changelog))  # (the worker declares it again)
    log = run(settings, tmp_path / "w2.log")
    for partition, offset in local.items():
        assert reset_line(changelog, partition, offset, "past the changelog's end 0") in log
    assert "ConsistencyError" not in log, log[-3000:]
    assert all(r.count == 0 for r in replayed(log).values()), replayed(log)
    # the new changelog holds nothing but each partition's state format
    # marker, written at the assignment (offset 0, if the worker got to it)
    fresh = asyncio.run(read_topic(bootstrap, changelog))
    assert all(r.key == MARKER and r.offset == 0 for r in fresh), fresh
    assert all(o <= 0 for o in local_offsets(settings.runtime.data_dir).values())


def test_deleted_records_after_the_local_offset_reset_the_local_state(
    make_settings, tmp_path: Path, broker: Broker
) -> None:
    settings: Settings = make_settings(processing_guarantee="at_least_once")
    bootstrap = settings.broker.bootstrap
    asyncio.run(create_topics(bootstrap, settings.topics(), settings.broker.partitions))
    changelog = f"{settings.group_id}-state-changelog"
    w = generate(messages=2_000, keys=100, malformed=0, seed=365)
    half = len(w.records) // 2
    asyncio.run(publish(bootstrap, settings.ordered.input_topic, w.records[:half]))
    run(settings, tmp_path / "w1.log", verify=False)
    a_dir = settings.runtime.data_dir
    # The first worker's state stays aside; another (its own data
    # directory) processes the rest, so the changelog grows past it.
    other = settings.with_overrides(data_dir=tmp_path / "other")
    asyncio.run(publish(bootstrap, settings.ordered.input_topic, w.records[half:]))
    run(other, tmp_path / "other.log", verify=True)
    local = local_offsets(a_dir)
    ends = asyncio.run(end_offsets_of(bootstrap, [changelog]))
    cut = {tp: end - 1 for tp, end in ends.items()}  # all but each last record
    assert all(cut[TopicPartition(changelog, p)] > o + 1 for p, o in local.items()), (cut, local)

    async def delete_records() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            # (a compacted topic refuses DeleteRecords; with retention too,
            # records go as they would by retention)
            policy = {"cleanup.policy": "compact,delete"}
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, changelog, policy)])
            await admin.delete_records({tp: RecordsToDelete(at) for tp, at in cut.items()})
        finally:
            await admin.close()

    try:
        asyncio.run(delete_records())
    except Exception as error:  # (the embedded broker has no DeleteRecords)
        if broker.is_tansu:
            pytest.skip(f"the embedded broker cannot delete records: {error!r}")
        raise
    log = run(settings, tmp_path / "w3.log")
    replays = replayed(log)
    for partition, offset in local.items():
        start = cut[TopicPartition(changelog, partition)]
        why = f"before the changelog's start {start:,}"
        assert reset_line(changelog, partition, offset, why) in log, log[-3000:]
        r = replays[partition]
        assert (r.count, r.first, r.last) == (1, start, start), (partition, r)


def test_a_recreated_changelog_resets_standby_copies_too(make_settings, tmp_path: Path) -> None:
    """A standby's local offset past its changelog's end is reset as an
    active's is: Faust would stop the worker with a ``ConsistencyError``
    once it checked the standby's end (faust-streaming/faust#597)."""
    base: Settings = make_settings(standby_replicas=1, processing_guarantee="at_least_once")
    bootstrap = base.broker.bootstrap
    asyncio.run(create_topics(bootstrap, base.topics(), base.broker.partitions))
    changelog = f"{base.group_id}-state-changelog"
    w = generate(messages=1_000, keys=100, malformed=0, seed=367)
    a = WorkerProcess(
        base.with_overrides(data_dir=tmp_path / "a", web_port=free_port()), tmp_path / "a1.log"
    )
    b = WorkerProcess(
        base.with_overrides(data_dir=tmp_path / "b", web_port=free_port()), tmp_path / "b1.log"
    )
    try:
        # Both workers in the group before the input: each then applies,
        # as a standby, what the other's active writes (a worker alone would
        # process all of it and its later standby copy would apply nothing).
        a.start().wait_ready(timeout=180)
        b.start().wait_ready(timeout=180)
        asyncio.run(publish(bootstrap, base.ordered.input_topic, w.records))
        report = asyncio.run(wait_until_verified(base, timeout=180, worker=b))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        # (a standby's records go to RocksDB as they are applied)
        for worker in (a, b):
            deadline = time.monotonic() + 60
            while standby_applied(worker) == 0:
                worker.check_alive()
                assert time.monotonic() < deadline, worker.log()[-3000:]
                time.sleep(0.25)
    finally:
        assert a.stop() == 0 and b.stop() == 0, (a.log()[-3000:], b.log()[-3000:])
    # both workers hold a copy of every partition
    for d in (tmp_path / "a", tmp_path / "b"):
        held = local_offsets(d)
        assert all(held.get(p, -1) >= 0 for p in range(base.broker.partitions)), (d, held)

    asyncio.run(delete_topic(bootstrap, changelog))  # (the workers declare it again)
    a = WorkerProcess(base.with_overrides(data_dir=tmp_path / "a"), tmp_path / "a2.log")
    b = WorkerProcess(base.with_overrides(data_dir=tmp_path / "b"), tmp_path / "b2.log")
    workers = [a, b]
    try:
        a.start().wait_ready(timeout=180)
        b.start()
        deadline = time.monotonic() + 180
        while "(standby): the local state's offset" not in a.log() + b.log():
            for worker in workers:
                worker.check_alive()  # (a ConsistencyError ends the worker)
            assert time.monotonic() < deadline, (a.log()[-3000:], b.log()[-3000:])
            time.sleep(0.25)
        b.wait_ready(timeout=180)
    finally:
        codes = [worker.stop() for worker in workers]
    logs = a.log() + b.log()
    assert codes == [0, 0], logs[-3000:]
    assert "ConsistencyError" not in logs
    # (end 1: the active may have written its partition's state format
    # marker before the standby looked)
    assert re.search(
        rf"changelog {changelog}/\d \(standby\): the local state's offset [\d,]+ "
        r"is past the changelog's end [01]: local state reset",
        logs,
    ), logs[-3000:]
