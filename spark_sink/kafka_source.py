"""Kafka as a Spark 4 Python Data Source (``spark.read.format("seqkafka")``).

So that reading Kafka needs no Spark Kafka connector jar on the classpath,
this source mirrors the built-in one (``format("kafka")``, a name Spark
reserves) in pure Python: same output schema (``key, value, topic,
partition, offset, timestamp, timestampType`` and ``headers`` when
``includeHeaders`` is true), same options (``kafka.bootstrap.servers``,
``subscribe`` or ``assign``, ``startingOffsets`` / ``endingOffsets`` as
``earliest`` / ``latest`` or JSON per partition with -2 = earliest and -1 =
latest, and TLS / SASL as ``kafka.security.protocol``, ``kafka.sasl.*``
and ``kafka.ssl.*`` with PEM files: :data:`seqkeeper.security.SPARK_OPTIONS`),
one Spark partition per Kafka partition (split every
``maxRecordsPerPartition`` records), Arrow record batches. A user with
the connector jar switches with one option: :func:`read_kafka`
``(format="kafka")``.

End offsets are exact on both brokers: ``latest`` is the fetch high
watermark (:mod:`seqkeeper.adapter.offsets`), not ListOffsets, which the embedded
broker answers short on multi-record batches.

Unlike the built-in source, it reads ``read_committed`` unless the option
``kafka.isolation.level`` says ``read_uncommitted``: records of aborted
transactions (an exactly_once worker killed mid-transaction) are skipped,
and ``latest`` is the last stable offset, so a read never waits behind an
open transaction (its records are read by the next run, from there). On a
broker without transactions both levels read every record.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from seqkeeper.security import ClientSecurity, kafka_options

NAME = "seqkafka"
BATCH = 10_000

_BASE = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
_HEADERS = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)


def schema(include_headers: bool = False) -> StructType:
    return StructType(_BASE + ([_HEADERS] if include_headers else []))


@dataclass(frozen=True)
class Slice(InputPartition):
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    bootstrap: str
    topic: str
    partition: int
    start: int
    end: int
    isolation: str = "read_committed"


def _spec(raw: str | None, default: str) -> Any:
    value = (raw or default).strip()
    if value in ("earliest", "latest"):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise ValueError(
            f"offsets must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {value!r}'
        ) from None


def _pick(spec: Any, topic: str, partition: int, earliest: int, latest: int, missing: int) -> int:
    """An offset from ``earliest`` / ``latest`` / JSON (``missing``: -2 or -1
    for a partition the JSON does not name)."""
    if spec == "earliest":
        return earliest
    if spec == "latest":
        return latest
    chosen = int(spec.get(topic, {}).get(str(partition), missing))
    if chosen == -2:
        return earliest
    if chosen == -1:
        return latest
    return max(earliest, min(chosen, latest))


async def plan(
    bootstrap: str,
    topics: dict[str, list[int] | None],
    starting: Any,
    ending: Any,
    split: int,
    security: ClientSecurity | None = None,
    isolation: str = "read_committed",
) -> list[Slice]:
    """The slices to read: exact ends (the last stable offsets, read
    ``read_committed``), offsets resolved, large ones split."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from seqkeeper.adapter.offsets import partitions_of, read_ends

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=isolation,
        **kafka_options(security),
    )
    try:
        await consumer.start()
        tps: list[TopicPartition] = []
        for topic, parts in topics.items():
            known = await partitions_of(consumer, topic)
            if not known:
                raise ValueError(f"topic {topic!r} does not exist")
            tps += [TopicPartition(topic, p) for p in sorted(parts or known)]
        latest = await read_ends(consumer, tps, isolation)
        earliest = await consumer.beginning_offsets(tps)
    finally:
        await consumer.stop()
    slices = []
    for tp in tps:
        lo, hi = earliest[tp], latest[tp]
        start = _pick(starting, tp.topic, tp.partition, lo, hi, -2)
        end = _pick(ending, tp.topic, tp.partition, lo, hi, -1)
        for a in range(start, end, split):
            slices.append(
                Slice(bootstrap, tp.topic, tp.partition, a, min(a + split, end), isolation)
            )
    return slices


async def _fetch(
    part: Slice, include_headers: bool, security: ClientSecurity | None = None
) -> list[pa.RecordBatch]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=part.bootstrap,
        enable_auto_commit=False,
        max_poll_records=BATCH,
        fetch_max_wait_ms=20,
        # (read_committed: aiokafka skips control batches and the aborted
        # transactions the fetch response lists; the position moves past
        # them, which ends a slice whose last offsets are such)
        isolation_level=part.isolation,
        **kafka_options(security),
    )
    tp = TopicPartition(part.topic, part.partition)
    out: list[pa.RecordBatch] = []
    cols: dict[str, list[Any]] = {f.name: [] for f in schema(include_headers).fields}
    try:
        await consumer.start()
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        done = False
        while not done:
            # (short: a fetch of markers or aborted records only moves the
            # position, and getmany waits for records until its timeout)
            got = await consumer.getmany(tp, timeout_ms=200)
            for m in got.get(tp, []):
                if m.offset >= part.end:
                    done = True
                    break
                cols["key"].append(m.key)
                cols["value"].append(m.value)
                cols["topic"].append(m.topic)
                cols["partition"].append(m.partition)
                cols["offset"].append(m.offset)
                cols["timestamp"].append(m.timestamp * 1000)  # microseconds
                cols["timestampType"].append(m.timestamp_type)
                if include_headers:
                    cols["headers"].append([{"key": k, "value": v} for k, v in m.headers or ()])
                if m.offset == part.end - 1:
                    done = True
            if len(cols["offset"]) >= BATCH:
                out.append(_batch(cols, include_headers))
                cols = {k: [] for k in cols}
            if not done and await consumer.position(tp) >= part.end:
                # (read_committed: the slice ends with a marker or aborted
                # records, which move the position but are no record)
                done = True
        if cols["offset"]:
            out.append(_batch(cols, include_headers))
    finally:
        await consumer.stop()
    return out


_ARROW = {
    "key": pa.binary(),
    "value": pa.binary(),
    "topic": pa.string(),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestampType": pa.int32(),
    "headers": pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
}


def _batch(cols: dict[str, list[Any]], include_headers: bool) -> pa.RecordBatch:
    names = [f.name for f in schema(include_headers).fields]
    return pa.RecordBatch.from_arrays([pa.array(cols[n], _ARROW[n]) for n in names], names=names)


class KafkaReader(DataSourceReader):
    def __init__(self, given: dict[str, str]) -> None:
        # Spark hands options over with lower-cased names.
        options = {k.lower(): v for k, v in given.items()}
        self.include_headers = options.get("includeheaders", "false").lower() == "true"
        self.bootstrap = options.get("kafka.bootstrap.servers", "")
        if not self.bootstrap:
            raise ValueError("option kafka.bootstrap.servers is required")
        topics: dict[str, list[int] | None] = {}
        if options.get("subscribe"):
            topics = {t.strip(): None for t in options["subscribe"].split(",") if t.strip()}
        elif options.get("assign"):
            topics = {t: list(p) for t, p in json.loads(options["assign"]).items()}
        else:
            raise ValueError("give option 'subscribe' (topics) or 'assign' (JSON)")
        self.topics = topics
        self.starting = _spec(options.get("startingoffsets"), "earliest")
        self.ending = _spec(options.get("endingoffsets"), "latest")
        self.split = int(options.get("maxrecordsperpartition", "1000000"))
        self.isolation = options.get("kafka.isolation.level", "read_committed")
        if self.isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(
                "option kafka.isolation.level must be read_committed or read_uncommitted, "
                f"got {self.isolation!r}"
            )
        # TLS and SASL: the kafka.security.protocol, kafka.sasl.* and
        # kafka.ssl.* options (PEM files; no JAAS config, no keystore)
        self.security = ClientSecurity.from_options(options)

    def partitions(self) -> list[Slice]:
        slices = asyncio.run(
            plan(
                self.bootstrap,
                self.topics,
                self.starting,
                self.ending,
                self.split,
                self.security,
                self.isolation,
            )
        )
        # Nothing to read: one empty slice (Spark would invent a partition).
        return slices or [Slice(self.bootstrap, "", 0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, Slice) and partition.start < partition.end:
            yield from asyncio.run(_fetch(partition, self.include_headers, self.security))


class KafkaDataSource(DataSource):
    """``spark.read.format("seqkafka").option(...).load()``"""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return schema(self.options.get("includeHeaders", "false").lower() == "true")

    def reader(self, schema: StructType) -> KafkaReader:
        return KafkaReader(dict(self.options))


def register(spark: Any) -> None:
    spark.dataSource.register(KafkaDataSource)


def read_kafka(spark: Any, options: dict[str, str], format: str = NAME) -> Any:
    """A batch DataFrame of Kafka records; ``format="kafka"`` uses the Spark
    Kafka connector instead (its jar on the classpath), same options."""
    if format == NAME:
        register(spark)
    return spark.read.format(format).options(**options).load()
