"""Readers outside the worker see committed data only: on Apache
Kafka, records of aborted transactions (a transactional producer that
aborts; an exactly_once worker killed mid-transaction) reach no snapshot,
audit row, replay, ``inspect`` answer or client reply, and a transaction
still open holds a reader back (at the last stable offset) instead of being
read or waited for."""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import threading
import time
import uuid
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from typer.testing import CliRunner

from seqkeeper.adapter.offsets import high_watermarks
from seqkeeper.cli import app
from seqkeeper.client import CommandClient
from seqkeeper.demo import wait_until_verified
from seqkeeper.inspect import changelog_topic
from seqkeeper.processors.command import Receipt, receipt_id, scoped
from seqkeeper.settings import Settings
from seqkeeper.spark_sink.audit import read_audit
from seqkeeper.spark_sink.job import run_compact
from seqkeeper.spark_sink.replay import Selection, replay
from seqkeeper.spark_sink.snapshots import read_snapshot
from seqkeeper.state.command_records import encode_receipt, receipt_key
from seqkeeper.topics import create_topics, read_topic, topic_partitions
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

pytestmark = pytest.mark.integration

T = TypeVar("T")
#: (topic, key, value)
Write = tuple[str, bytes, bytes]


@pytest.fixture
def kafka(broker: Broker) -> Broker:
    if broker.is_tansu:
        pytest.skip("the embedded broker has no transactions")
    return broker


class Transactions:
    """A transactional producer on a loop of its own, so that a transaction
    can stay open while a reader runs."""

    def __init__(self, bootstrap: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start() -> AIOKafkaProducer:
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                acks="all",
                transactional_id=f"t-{uuid.uuid4().hex}",
                # the open transaction must outlive a Spark run and three CLI
                # reads on a loaded CI machine; the default (60 s) did not, and
                # the coordinator aborted it (ProducerFenced at the commit)
                transaction_timeout_ms=600_000,
            )
            await producer.start()
            return producer

        self.producer = self.call(start())

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def write(self, writes: Sequence[Write], end: str | None) -> None:
        """One transaction of ``writes``, ended by ``end`` (commit, abort;
        None: left open, its records in the log)."""

        async def run() -> None:
            await self.producer.begin_transaction()
            for topic, key, value in writes:
                await self.producer.send_and_wait(topic, value, key=key)
            if end == "commit":
                await self.producer.commit_transaction()
            elif end == "abort":
                await self.producer.abort_transaction()

        self.call(run())

    def close(self) -> None:
        self.call(self.producer.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def event(message_id: str) -> bytes:
    return orjson.dumps({"messageId": message_id, "type": "T", "data": {"id": message_id}})


def receipt(message_id: str, status: Any, error: str | None = None) -> Receipt:
    return Receipt(message_id, status, scoped("t1", "e1"), "Do", message_id, 1.0, 2.0, error=error)


def test_aborted_and_open_transactions_reach_no_snapshot_audit_replay_or_inspect(
    spark: Any, kafka: Broker, make_settings: Any, tmp_path: Path
) -> None:
    settings = make_settings(partitions=1)
    bootstrap = kafka.bootstrap
    state = f"{settings.runtime.app_id}-state-changelog"
    commands = changelog_topic(settings)
    ordered, target = settings.ordered.ordered_topic, f"replayed-{settings.runtime.app_id}"
    asyncio.run(create_topics(bootstrap, [state, commands, ordered, target], 1))
    kept = receipt_key(receipt_id("t1", "cmd-1"))
    gone = receipt_key(receipt_id("t1", "cmd-2"))
    txn = Transactions(bootstrap)
    try:
        txn.write(
            [
                (state, b"k1", b"good"),
                (ordered, b"k1", event("m1")),
                (commands, kept, encode_receipt(receipt("cmd-1", "COMPLETED"))),
            ],
            "commit",
        )
        txn.write(
            [
                (state, b"k1", b"aborted"),
                (state, b"k2", b"aborted"),
                (ordered, b"k1", event("m-aborted")),
                (commands, kept, encode_receipt(receipt("cmd-1", "FAILED", "aborted"))),
                (commands, gone, encode_receipt(receipt("cmd-2", "COMPLETED"))),
            ],
            "abort",
        )
        txn.write([(state, b"k3", b"open"), (ordered, b"k3", event("m-open"))], None)
        warehouse = tmp_path / "w"

        def snapshot() -> dict[bytes, bytes]:
            rows = read_snapshot(spark, warehouse, state).collect()
            return {bytes(r.key): bytes(r.value) for r in rows}

        def audited() -> list[str]:
            return sorted(
                r.id for r in read_audit(spark, warehouse).where(f"topic = '{ordered}'").collect()
            )

        # the open transaction: not read, not waited for (the last stable offset)
        started = time.monotonic()
        run_compact(spark, settings, warehouse)
        assert time.monotonic() - started < 120
        assert snapshot() == {b"k1": b"good"}
        assert audited() == ["m1"]
        inspect = ["inspect", "-b", bootstrap, "--app-id", settings.runtime.app_id]
        one = CliRunner().invoke(app, [*inspect, "--message-id", "cmd-1"])
        assert one.exit_code == 0, one.output
        assert '"status": "COMPLETED"' in one.output and "aborted" not in one.output
        two = CliRunner().invoke(app, [*inspect, "--message-id", "cmd-2"])
        assert two.exit_code == 1, two.output
        # read_uncommitted, asked for, sees the aborted writes (the override works)
        ru = CliRunner().invoke(
            app, [*inspect, "--message-id", "cmd-2", "--isolation", "read_uncommitted"]
        )
        assert ru.exit_code == 0, ru.output

        # committed now: the next run reads it from where the last one stopped
        txn.call(txn.producer.commit_transaction())
        run_compact(spark, settings, warehouse)
        assert snapshot() == {b"k1": b"good", b"k3": b"open"}
        assert audited() == ["m-open", "m1"]
        category = Selection(category=ordered.replace("-", "_"))
        assert replay(spark, warehouse, category, bootstrap, target) == 2
        replayed = asyncio.run(read_topic(bootstrap, target))
        assert [r.value for r in replayed] == [event("m1"), event("m-open")]
    finally:
        txn.close()


def test_a_client_never_returns_a_reply_of_an_aborted_transaction(
    kafka: Broker, names: dict[str, str]
) -> None:
    """The worker's reply written in a transaction that is then aborted, and
    the committed one: the client answers with the committed one."""
    commands, replies = names["command_topic"], f"{names['app_id']}.replies"
    asyncio.run(create_topics(kafka.bootstrap, [commands, replies], 1))

    def reply(message: str) -> bytes:
        doc = {"messageId": "q1:reply", "causationId": "q1", "correlationId": "q1"}
        return orjson.dumps({**doc, "success": True, "message": message})

    async def worker() -> None:
        while not await read_topic(kafka.bootstrap, commands):  # the request is sent
            await asyncio.sleep(0.05)
        for end in ("aborted", "committed"):
            producer = AIOKafkaProducer(
                bootstrap_servers=kafka.bootstrap, transactional_id=f"w-{uuid.uuid4().hex}"
            )
            await producer.start()
            try:
                await producer.begin_transaction()
                await producer.send_and_wait(replies, reply(end), key=b"q1")
                if end == "aborted":
                    await producer.abort_transaction()
                else:
                    await producer.commit_transaction()
            finally:
                await producer.stop()

    async def ask() -> str:
        async with CommandClient(
            kafka.bootstrap, command_topic=commands, reply_topic=replies
        ) as client:
            answering = asyncio.create_task(worker())
            got = await client.request("Do", "k", {}, message_id="q1", timeout=30)
            await answering
            return got.message

    assert asyncio.run(ask()) == "committed"


async def kill_mid_transaction(
    bootstrap: str, topics: Sequence[str], worker: WorkerProcess
) -> bool:
    """Kill ``worker`` (-9) while a transaction of its holds records of
    ``topics`` that it has not committed (a last stable offset below the high
    watermark); False if none was found within 30 s. The worker's
    transactions send their records as they commit, so the moments when one
    is open with records are short: the worker is frozen (SIGSTOP) at
    random moments, and killed if one is open then, else let go on."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [tp for topic in topics for tp in await topic_partitions(consumer, topic)]

        async def open_transaction() -> bool:
            ends = await high_watermarks(consumer, tps)
            stable = {tp: consumer.last_stable_offset(tp) for tp in tps}
            return any(0 <= (stable[tp] or -1) < ends[tp] for tp in tps)

        assert worker.proc is not None
        rng = random.Random(7)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            worker.check_alive()
            worker.proc.send_signal(signal.SIGSTOP)
            await asyncio.sleep(0.3)  # (requests on their way land)
            if await open_transaction():
                worker.kill()
                return True
            worker.proc.send_signal(signal.SIGCONT)
            await asyncio.sleep(rng.uniform(0.05, 0.3))
        return False
    finally:
        await consumer.stop()


def coordinates(bootstrap: str, topic: str, isolation: str) -> set[tuple[str, int, int]]:
    return {
        (r.topic, r.partition, r.offset)
        for r in asyncio.run(read_topic(bootstrap, topic, isolation=isolation))
    }


def test_a_worker_killed_mid_transaction_leaves_nothing_aborted_in_the_store(
    spark: Any, kafka: Broker, make_settings: Any, tmp_path: Path
) -> None:
    """An exactly_once worker killed -9 while it writes: its open
    transaction is aborted when the next worker starts; the records it had
    written are in the topics, and in no snapshot, audit row or replay."""
    settings: Settings = make_settings(partitions=2, gap_timeout=600.0)
    bootstrap = kafka.bootstrap
    asyncio.run(create_topics(bootstrap, settings.topics(), 2))
    # (more input than every attempt below can take while a worker runs, at
    # the feed's pace: with none left no transaction is ever open; in order
    # per key, so that the feed may stop anywhere and leave no gap)
    w = generate(messages=60000, keys=40, malformed=0, seed=3, jitter=0)
    chunks = [w.records[i : i + 50] for i in range(0, len(w.records), 50)]

    async def feed() -> None:
        """Input arriving while the worker runs, so that it is killed
        writing (with a backlog, its transactions send their records only
        as they commit: a kill rarely falls in between)."""
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        await producer.start()
        try:
            while chunks and not killed.is_set():
                # (only while a worker runs: input sent while the next one
                # starts would be a backlog, and it could run out before a
                # kill falls inside a transaction)
                await asyncio.to_thread(ready.wait, 120)
                for key, value in chunks.pop(0):
                    await producer.send(settings.ordered.input_topic, value, key=key)
                await producer.flush()
                await asyncio.sleep(0.2)
        finally:
            await producer.stop()

    o = settings.ordered
    changelog = f"{settings.group_id}-state-changelog"
    written = [o.ordered_topic, o.deduped_topic, o.dlq_topic, changelog]
    ready = threading.Event()  # (the feed runs while a worker runs)
    killed = threading.Event()  # (then no more)
    feeding = threading.Thread(target=asyncio.run, args=(feed(),))
    feeding.start()
    try:
        # (until a kill leaves a transaction open: each freeze finds one with
        # a small chance, and a loaded machine makes fewer freezes per attempt)
        budget = time.monotonic() + 300
        for attempt in itertools.count():
            if attempt and time.monotonic() > budget:
                break
            worker = WorkerProcess(settings, tmp_path / f"killed-{attempt}.log").start()
            try:
                worker.wait_ready()
                ready.set()
                # (not the dead-letter topic: no input goes there, and an
                # empty partition answers a fetch only after its wait)
                busy = [o.ordered_topic, o.deduped_topic, changelog]
                if asyncio.run(kill_mid_transaction(bootstrap, busy, worker)):
                    break
            finally:
                ready.clear()
                worker.kill()
    finally:
        ready.set()
        killed.set()
        feeding.join()
    final = WorkerProcess(settings, tmp_path / "final.log").start()
    try:
        final.wait_ready()  # (its producer's start aborted the open transaction)
        report = asyncio.run(wait_until_verified(settings, 180, final, isolation="read_committed"))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
    finally:
        assert final.stop() == 0
    committed: set[tuple[str, int, int]] = set()
    aborted: set[tuple[str, int, int]] = set()
    for topic in written:
        mine = coordinates(bootstrap, topic, "read_committed")
        committed |= mine
        aborted |= coordinates(bootstrap, topic, "read_uncommitted") - mine
    print(f"{len(aborted)} aborted records, {len(committed)} committed")
    assert aborted, "the kill left no aborted record: the test shows nothing"
    warehouse = tmp_path / "w"
    run_compact(spark, settings, warehouse)
    rows = {(r.topic, r.partition, r.offset) for r in read_audit(spark, warehouse).collect()}
    outputs = {c for c in committed if c[0] != changelog}
    assert rows & aborted == set()
    assert outputs <= rows
    snap = read_snapshot(spark, warehouse, changelog).collect()
    assert {(r.topic, r.partition, r.offset) for r in snap} <= committed
    # a replay of the deduplicated output publishes each committed record once
    target = f"replayed-{settings.runtime.app_id}"
    asyncio.run(create_topics(bootstrap, [target], 1))
    category = Selection(category=o.deduped_topic.replace("-", "_"))
    expected = len([c for c in committed if c[0] == o.deduped_topic])
    assert replay(spark, warehouse, category, bootstrap, target, dry_run=True) == expected
