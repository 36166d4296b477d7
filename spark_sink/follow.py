"""``seqkeeper compact --follow``: the store kept current by Spark
Structured Streaming.

The stream is :class:`OffsetsStreamReader`, a Spark 4 Python streaming
source (``DataSourceStreamReader``) whose offsets are the topics' end
offsets (``{topic: {partition: end}}``, read as the compaction reads them:
read_committed, the last stable offset). Each micro-batch's rows are its
``(topic, partition, start, end)`` ranges; ``foreachBatch`` turns them into
the batch's end offsets and runs one ordinary compaction run
(:func:`spark_sink.job.run_compact`) up to exactly those ends, which reads
the records with the batch data source and commits them to the Iceberg
tables with the offsets reached.

The Iceberg tables, not Spark's checkpoint, say what is done: a run reads
from the offsets the table committed (whatever the batch's start), a batch
whose range the table already holds commits nothing, and the stream starts
(``initialOffset``) where the tables are. Spark's checkpoint lives in a
temporary directory that goes with the process, so a restart after a crash
(``kill -9`` between a commit and Spark's own offset log, or mid-run)
resumes from the tables' offsets and neither doubles nor loses a record.
A run that loses to a concurrent ``compact`` (:class:`~spark_sink.tables.LostCommit`)
is logged and redone by the next batch from what the other run committed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from seqkeeper.settings import Settings
from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.audit import TABLE as AUDIT
from seqkeeper.spark_sink.snapshots import TABLE as SNAPSHOTS
from seqkeeper.spark_sink.snapshots import exact_ends

NAME = "seqkeeper-offsets"
log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]

RANGES = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("start", LongType()),
        StructField("end", LongType()),
    ]
)


def table_offsets(warehouse: Path) -> Offsets:
    """The offsets both tables committed (their topics are disjoint:
    changelogs in the snapshots, message topics in the audit)."""
    out: Offsets = {}
    for name in (SNAPSHOTS, AUDIT):
        out = tables.merged(out, tables.committed(tables.load(warehouse, name)).offsets)
    return out


def lag(ends: Offsets, done: Offsets) -> int:
    """Records the store is behind ``ends`` (a partition it never read
    counts from 0; its earliest offset may be later, so this is an upper
    bound on a topic whose start was deleted by retention)."""
    return sum(
        max(0, end - done.get(topic, {}).get(part, 0))
        for topic, parts in ends.items()
        for part, end in parts.items()
    )


def at_least(ends: Offsets, done: Offsets) -> Offsets:
    """``ends``, never below what the tables hold (a run's commit sets
    the offsets it was given: it must not move them back)."""
    return {
        t: {p: max(e, done.get(t, {}).get(p, 0)) for p, e in parts.items()}
        for t, parts in ends.items()
    }


async def oldest_pending(
    bootstrap: str, ends: Offsets, done: Offsets, isolation: str = "read_committed"
) -> float | None:
    """The timestamp (epoch seconds) of the oldest record the store lacks:
    the first record at or after each lagging partition's committed offset
    (``None``: none lags, or none came within the fetch)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from seqkeeper.security import kafka_options

    behind = {
        TopicPartition(t, int(p)): done.get(t, {}).get(p, 0)
        for t, parts in ends.items()
        for p, end in parts.items()
        if end > done.get(t, {}).get(p, 0)
    }
    if not behind:
        return None
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=isolation,
        max_poll_records=1,
        **kafka_options(),
    )
    try:
        await consumer.start()
        consumer.assign(list(behind))
        for tp, offset in behind.items():
            consumer.seek(tp, offset)
        got = await consumer.getmany(timeout_ms=1000)
    finally:
        await consumer.stop()
    stamps = [m.timestamp for records in got.values() for m in records[:1]]
    return min(stamps) / 1000 if stamps else None


@dataclass(frozen=True)
class Range(InputPartition):
    topic: str
    partition: int
    start: int
    end: int


class OffsetsStreamReader(DataSourceStreamReader):
    """Offsets: the topics' end offsets; a batch's rows: its ranges."""

    def __init__(self, options: dict[str, str]) -> None:
        self.bootstrap = options["bootstrap"]
        self.topics = [t for t in options["topics"].split(",") if t]
        self.isolation = options.get("isolation", "read_committed")
        self.warehouse = Path(options["warehouse"])

    def initialOffset(self) -> dict[str, Any]:
        # (the tables' offsets: the first batch is what they lack)
        done = table_offsets(self.warehouse)
        return {t: done.get(t, {}) for t in self.topics}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        ends = exact_ends(self.bootstrap, self.topics, self.isolation)
        return at_least(ends, start)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[Range]:
        return [
            Range(t, int(p), int(start.get(t, {}).get(p, 0)), int(e))
            for t, parts in end.items()
            for p, e in parts.items()
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, Range)
        yield (partition.topic, partition.partition, partition.start, partition.end)


class OffsetsSource(DataSource):
    """``spark.readStream.format("seqkeeper-offsets")``: options
    ``bootstrap``, ``topics`` (comma-separated), ``isolation``, ``warehouse``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return RANGES

    def streamReader(self, schema: StructType) -> OffsetsStreamReader:
        return OffsetsStreamReader(dict(self.options))


@dataclass(frozen=True)
class BatchReport:
    """One micro-batch: what it committed and how far the store lags."""

    batch: int
    runs: dict[str, int]
    rows: int
    lag_records: int
    seconds: float
    lag_seconds: float | None = None  #: age of the oldest record the store lacks

    def text(self) -> str:
        runs = ", ".join(f"{k} run {v}" for k, v in self.runs.items()) or "nothing new"
        text = (
            f"follow batch {self.batch}: {runs}, {self.rows} audit rows in {self.seconds:.1f} s; "
            f"store lag: {self.lag_records} records behind the topics"
        )
        if self.lag_seconds is not None:
            text += f", the oldest {self.lag_seconds:.1f} s old"
        return text


class FollowMetrics:
    """The follow mode's Prometheus metrics (its own registry: served by
    ``compact --follow --metrics-port``)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry()
        self.lag_records = Gauge(
            "seqkeeper_store_lag_records",
            "Records the store is behind the topics after the last micro-batch",
            registry=self.registry,
        )
        self.lag_seconds = Gauge(
            "seqkeeper_store_lag_seconds",
            "Age of the oldest record the store lacks after the last micro-batch (0: none)",
            registry=self.registry,
        )
        self.batches = Counter(
            "seqkeeper_store_batches",
            "Micro-batches run by compact --follow",
            registry=self.registry,
        )
        self.rows = Counter(
            "seqkeeper_store_rows",
            "Audit rows committed by compact --follow",
            registry=self.registry,
        )
        self.topics = Gauge(
            "seqkeeper_store_topics",
            "Topics compact --follow reads",
            registry=self.registry,
        )

    def observe(self, batch: BatchReport) -> None:
        self.batches.inc()
        self.rows.inc(batch.rows)
        self.lag_records.set(batch.lag_records)
        self.lag_seconds.set(batch.lag_seconds or 0.0)


Plan = Callable[[], tuple[list[str], list[str]]]


def follow(
    spark: Any,
    settings: Settings,
    warehouse: Path,
    topics: tuple[list[str], list[str]],
    trigger_seconds: float,
    stop: threading.Event,
    report: Callable[[BatchReport], None],
    sealer: Any = None,
    checkpoint: str | None = None,
    plan: Plan | None = None,
    on_topics: Callable[[list[str]], None] = lambda new: None,
    codec: Any = None,
) -> None:
    """Run the streaming query until ``stop`` is set (then after the
    current batch: a batch that starts after ``stop`` does nothing).

    ``plan``: the topics to follow now (changelogs, message topics), asked
    every few triggers; when it names topics the query does not read (a
    worker started after ``compact --follow``, a reply topic created
    later), the query is stopped after its batch and started again over
    them all, with ``on_topics(new)`` called first. A restart loses
    nothing: a query starts where the tables are. ``codec``: the ordered
    worker's value codec (:func:`~spark_sink.job.run_compact`)."""
    spark.dataSource.register(OffsetsSource)
    replan_every = max(trigger_seconds, 5.0)
    while not stop.is_set():
        _query(
            spark,
            settings,
            warehouse,
            topics,
            trigger_seconds,
            stop,
            report,
            sealer,
            checkpoint,
            plan,
            replan_every,
            codec,
        )
        if stop.is_set() or plan is None:
            return
        grown = _grown(topics, plan())
        on_topics(sorted({*grown[0], *grown[1]} - {*topics[0], *topics[1]}))
        topics = grown


def _grown(
    topics: tuple[list[str], list[str]], now: tuple[list[str], list[str]]
) -> tuple[list[str], list[str]]:
    """``topics`` with what ``now`` adds (a topic is never dropped: one
    deleted since is the compaction's to report, not a reason to stop)."""
    return (
        list(dict.fromkeys([*topics[0], *now[0]])),
        list(dict.fromkeys([*topics[1], *now[1]])),
    )


def _query(
    spark: Any,
    settings: Settings,
    warehouse: Path,
    topics: tuple[list[str], list[str]],
    trigger_seconds: float,
    stop: threading.Event,
    report: Callable[[BatchReport], None],
    sealer: Any,
    checkpoint: str | None,
    plan: Plan | None,
    replan_every: float,
    codec: Any = None,
) -> None:
    """One streaming query over ``topics``, until ``stop`` or until
    ``plan`` names a topic it does not read."""
    import tempfile

    from seqkeeper.spark_sink.job import run_compact

    changelogs, messages = topics
    every = [*changelogs, *messages]
    busy = threading.Lock()

    def batch(frame: Any, batch_id: int) -> None:
        # (non-blocking: the main thread holds it while it stops the query,
        # which waits for this batch)
        if stop.is_set() or not busy.acquire(blocking=False):
            return
        try:
            began = time.monotonic()
            ranges = frame.collect()
            if not ranges:
                return
            ends: Offsets = {}
            for r in ranges:
                ends.setdefault(r.topic, {})[str(r.partition)] = int(r.end)
            summaries: list[Any] = []
            try:
                runs = run_compact(
                    spark,
                    settings,
                    warehouse,
                    sealer=sealer,
                    topics=topics,
                    report=summaries.append,
                    ends=at_least(ends, table_offsets(warehouse)),
                    codec=codec,
                )
            except tables.LostCommit as e:
                log.warning("follow batch %d: %s", batch_id, e)
                runs = {}
            bootstrap, isolation = settings.broker.bootstrap, settings.broker.isolation
            now, done = exact_ends(bootstrap, every, isolation), table_offsets(warehouse)
            oldest = asyncio.run(oldest_pending(bootstrap, now, done, isolation))
            report(
                BatchReport(
                    batch_id,
                    runs,
                    sum(s.rows for s in summaries),
                    lag(now, done),
                    time.monotonic() - began,
                    None if oldest is None else max(0.0, time.time() - oldest),
                )
            )
        finally:
            busy.release()

    def more_topics() -> bool:
        if plan is None:
            return False
        try:
            now = plan()
        except Exception as e:  # (a broker away for a moment: asked again later)
            log.warning("follow: listing the topics failed: %s", e)
            return False
        return bool({*now[0], *now[1]} - set(every))

    with tempfile.TemporaryDirectory(prefix="seqkeeper-follow-") as scratch:
        query = (
            spark.readStream.format(NAME)
            .option("bootstrap", settings.broker.bootstrap)
            .option("topics", ",".join(every))
            .option("isolation", settings.broker.isolation)
            .option("warehouse", str(warehouse))
            .load()
            .writeStream.foreachBatch(batch)
            .trigger(processingTime=f"{trigger_seconds} seconds")
            .option("checkpointLocation", checkpoint or f"{scratch}/checkpoint")
            .start()
        )
        try:
            planned = time.monotonic()
            while query.isActive and not stop.wait(0.5):
                if time.monotonic() - planned >= replan_every:
                    planned = time.monotonic()
                    if more_topics():
                        break
            failure = query.exception()
        finally:
            with busy:  # after the batch under way, if any
                query.stop()
        if failure is not None:
            raise RuntimeError(f"the follow query failed: {failure}")
