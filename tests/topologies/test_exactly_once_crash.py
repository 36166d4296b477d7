"""Crash consistency of the ordered topology under exactly-once, with the
runtime's own cycle (:class:`~seqkeeper.runtime.task.Task`, E2-E4) over the
real store (:class:`~seqkeeper.state.rocksdb.LayeredPartitionStore`, ``atomic``,
real RocksDBs) and transactions the test commits or aborts: each holds one
cycle's changelog records, outputs and input position, all or nothing.

Hypothesis aborts transactions and kills the worker anywhere between
records and cycles: the next worker keeps the local RocksDB (it holds only
committed writes), replays the committed changelog after its offset, and
reads the input again from the committed position. The committed outputs
must pass the verifier with nothing emitted twice, and no committed
changelog ever holds the reorder-buffer entry of a message whose ordered
output is committed (one released in the cycle it came in is never
written)."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqkeeper.adapter.transactions import TransactionFailed
from seqkeeper.runtime.task import Task
from seqkeeper.settings import Settings
from seqkeeper.state import codecs
from seqkeeper.state.rocksdb import LayeredPartitionStore, apply_changelog
from seqkeeper.state.stores import Stores
from seqkeeper.topics import Record
from seqkeeper.topologies.ordered import OrderedTopology
from seqkeeper.verification.verify import verify
from seqkeeper.verification.workload import generate
from tests.state.test_rocksdb_store import RealDB

CHANGELOG = "state-changelog"
TOPICS = ("ordered", "deduped", "dlq", "late")


class Producer:
    async def group(self, records: list[Any], topic_of: Any) -> dict[tuple[str, int], list[Any]]:
        grouped: dict[tuple[str, int], list[Any]] = {}
        for record in records:
            grouped.setdefault((topic_of(record[0]), 0), []).append(record)
        return grouped

    async def send(self, grouped: Any) -> Any:
        raise AssertionError("exactly-once sends only in transactions")


class Broker:
    """What is committed: the changelog, the output topics, the input
    position; a transaction commits all of its records or none."""

    def __init__(self) -> None:
        self.changelog: list[tuple[bytes, bytes | None]] = []
        self.outputs: dict[str, list[Record]] = {t: [] for t in TOPICS}
        self.position = 0
        self.abort_next = False
        #: (key, messageId) of every committed ordered output
        self.released: set[tuple[str, str]] = set()
        self.buffer_puts = 0  # buffer entries written to the committed changelog

    async def commit(
        self, partition: int, records: Mapping[tuple[str, int], Iterable[Any]], position: int | None
    ) -> dict[tuple[str, int], int]:
        assert partition == 0
        if self.abort_next:
            raise TransactionFailed("aborted by the test")
        got = {tp: list(rs) for tp, rs in records.items()}
        last = {}
        written: list[tuple[bytes, bytes | None]] = []
        for (topic, _), rs in got.items():
            if topic == CHANGELOG:
                written = [(k, v) for k, v, _ in rs]
                self.changelog += written
                last[(topic, 0)] = len(self.changelog) - 1
                continue
            out = self.outputs[topic]
            for _, key, value, headers in rs:
                out.append(Record(topic, 0, len(out), key, value, tuple(headers or ()), 0))
                if topic == "ordered" and not any(h[0] == "seqkeeper.gap" for h in headers or ()):
                    try:
                        mid = json.loads(value)["messageId"]
                    except (ValueError, KeyError, TypeError):
                        continue
                    self.released.add((key.decode(), mid))
        if position is not None:
            self.position = position
        # no committed changelog holds a buffer entry of a message whose
        # ordered output is committed (in this transaction or before)
        for key, value in written:
            if key[:1] == codecs.BUFFER and value is not None:
                self.buffer_puts += 1
                name = codecs.key_of(key)
                message = codecs.decode_message(name, value)
                assert (name, message.message_id) not in self.released, (name, message.seq)
        return last


class Worker:
    """One worker run over the local RocksDB directory."""

    def __init__(self, directory: Path, broker: Broker, config: Settings) -> None:
        self.db = RealDB(directory)
        # the restore: the committed changelog after the DB's offset
        tail = [(0, i, k, v) for i, (k, v) in enumerate(broker.changelog) if i > self.db.offset]
        apply_changelog(lambda p: self.db, tail)
        dbs = {0: self.db}
        table = SimpleNamespace(
            name="state", changelog_topic=CHANGELOG, open_dbs=lambda: dbs, db_for=dbs.__getitem__
        )
        store = LayeredPartitionStore(table, None, deferred=codecs.BUFFER, atomic=True)  # type: ignore[arg-type]
        self.topology = OrderedTopology(config, Stores(store))
        self.task = Task(self.topology, store, Producer(), str, transactions=broker)  # type: ignore[arg-type]
        self.task.on_restored({0})
        self.position = broker.position

    def close(self) -> None:
        self.db.db.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.lists(
        st.one_of(
            st.just(("record",)),
            st.just(("record",)),
            st.just(("tick",)),
            st.just(("cycle",)),
            st.just(("crash",)),
            st.just(("abort",)),
        ),
        min_size=20,
        max_size=120,
    ),
)
def test_a_crash_or_abort_anywhere_loses_nothing_and_emits_nothing_twice(
    seed: int, script: list[tuple[str]]
) -> None:
    w = generate(messages=30, keys=3, duplicate_rate=0.2, malformed=2, seed=seed, lost=2)
    inputs = [
        Record("in", 0, i, k, v, (), 1_000_000 + 100 * i) for i, (k, v) in enumerate(w.records)
    ]
    config = Settings.of(bootstrap="unused", gap_timeout=2.0, max_buffered_per_key=6)
    broker = Broker()
    wall = 1000.0

    async def run(directory: Path) -> None:
        nonlocal wall
        worker = Worker(directory, broker, config)

        async def cycle() -> bool:
            try:
                await worker.task.cycle()
                return True
            except TransactionFailed:
                return False

        def restart() -> None:
            nonlocal worker
            worker.close()
            worker = Worker(directory, broker, config)

        def record() -> None:
            nonlocal wall
            if worker.position < len(inputs):
                rec = inputs[worker.position]
                wall += 0.01
                assert worker.topology.on_records(0, [rec], wall) is None
                worker.position += 1

        for (action,) in script:
            if action == "record":
                record()
            elif action == "tick":
                wall += 1.5
                worker.task.on_tick({0: (len(inputs), worker.position)}, wall)
            elif action == "cycle":
                if not await cycle():
                    restart()
            elif action == "crash":  # kill -9: what was not committed is gone
                restart()
            else:  # the next transaction aborts (the worker stops)
                broker.abort_next = True
                await cycle()
                broker.abort_next = False
                restart()
        while worker.position < len(inputs):
            record()
        assert await cycle()
        for _ in range(3):  # idle: stream time follows the wall clock, gaps time out
            wall += 10_000.0
            worker.task.on_tick({0: (len(inputs), worker.position)}, wall)
            assert await cycle()
        worker.close()

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(Path(tmp) / "0"))
    out = broker.outputs
    report = verify(inputs, out["ordered"], out["deduped"], out["dlq"] + out["late"], drained=True)
    assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
    assert sum(report.reemitted.values()) == 0  # nothing emitted twice
