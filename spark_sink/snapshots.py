"""State snapshots: the latest value per key of changelog topics, in the
Apache Iceberg table ``seqkeeper.snapshots`` (:mod:`spark_sink.tables`),
partitioned by ``topic``, incremental and committed atomically.

A run reads each topic from the offsets the table's current snapshot
reached to the exact ends it pins at the start, merges the new records into
that snapshot's rows (the highest offset of a key wins; a tombstone deletes
the key), has Spark write each topic's new rows, then replaces the topics'
files in one Iceberg commit whose summary holds the offsets reached. A run
killed midway commits nothing (the table stays on the previous snapshot);
a rerun with no new records produces the same rows.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seqkeeper.security import current
from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.crypto import FIELDS_ENV, KEY_ENV, AuditKeyError, Sealer
from seqkeeper.spark_sink.kafka_source import plan, read_kafka

TABLE = "snapshots"
SEALED = "seqkeeper.sealed"  #: the key id and fields that sealed the run


def exact_ends(
    bootstrap: str, topics: list[str], isolation: str = "read_committed"
) -> dict[str, dict[str, int]]:
    """Where a run stops: each partition's end, read as ``isolation`` reads
    (read_committed: the last stable offset; an open transaction's records
    are left to the next run, which starts there)."""
    slices = asyncio.run(
        plan(bootstrap, dict.fromkeys(topics), "earliest", "latest", 2**62, isolation=isolation)
    )
    ends: dict[str, dict[str, int]] = {t: {} for t in topics}
    for s in slices:
        ends[s.topic][str(s.partition)] = s.end
    return ends


#: Families whose decoded text holds users' data as a whole (sealed whole when an
#: audit key is set); the buffer's messages are sealed field by field instead.
MESSAGE_FAMILIES = {"entity", "receipt", "processed", "queued", "outputs"}


def decoder(topic: str) -> Callable[[bytes, bytes], tuple[str, str, str | None, str | None]] | None:
    """How to read a changelog topic's entries (``None``: not a seqkeeper table)."""
    from seqkeeper.state import codecs, command_records

    if topic.endswith("-commands-changelog"):
        return command_records.describe
    if topic.endswith("-state-changelog"):
        return codecs.describe
    return None


def _decoded(frame: Any, topic: str, sealer: Sealer | None) -> Any:
    """``frame`` with ``family, subject, item, decoded`` columns (and, with a
    ``sealer``, the raw value and the message-bearing decoded values sealed)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    describe = decoder(topic)
    fields = StructType(
        [StructField(n, StringType()) for n in ("family", "subject", "item", "decoded")]
    )

    def decode(key: bytes, value: bytes, ctx: str) -> tuple[str | None, ...]:
        if describe is None:
            return (None, None, None, None)
        try:
            family, subject, item, text = describe(bytes(key), bytes(value))
        except (ValueError, IndexError, TypeError, struct.error):  # not a seqkeeper entry
            return ("undecodable", None, None, None)
        if sealer is not None and text is not None:
            if family == "buffer":
                text = sealer.seal_message(text, ctx)
            elif family in MESSAGE_FAMILIES:
                text = sealer.seal(text.encode(), f"decoded:{ctx}".encode())
        return (family, subject, item, text)

    ctx = F.concat_ws(":", "topic", "partition", "offset")
    out = frame.withColumn("d", F.udf(decode, fields, useArrow=False)("key", "value", ctx)).select(
        "key", "value", "topic", "partition", "offset", "d.*"
    )
    if sealer is not None:
        out = out.withColumn(
            "value", F.udf(sealer.seal_bytes, BinaryType(), useArrow=False)("value", ctx)
        )
    return out


def compact_snapshots(
    spark: Any,
    bootstrap: str,
    topics: list[str],
    warehouse: Path,
    sealer: Sealer | None = None,
    on_topic: Callable[[str], None] = lambda topic: None,
    isolation: str = "read_committed",
    ends: dict[str, dict[str, int]] | None = None,
) -> int:
    """One run over ``topics``; returns its number (``on_topic`` is called
    as each topic starts; ``isolation``: how the changelogs are read, so
    that an aborted write never becomes a key's latest value; ``ends``:
    where the run stops, default the topics' ends now)."""
    from pyspark.sql import functions as F

    table = tables.load(warehouse, TABLE)
    if table is not None:
        tables.remove_orphans(table)
    commit = tables.committed(table)
    if commit.prop(SEALED) and sealer is None:
        raise AuditKeyError(
            f"the snapshots under {warehouse} are encrypted: set {KEY_ENV} "
            f"and {FIELDS_ENV} to continue them"
        )
    if ends is None:
        ends = exact_ends(bootstrap, topics, isolation)
    current_files = tables.data_files(table)
    directory: str | None = None
    written: list[str] = []
    replaced: list[Any] = []
    for topic in topics:
        on_topic(topic)
        start = commit.offsets.get(topic, {})
        new = (
            read_kafka(
                spark,
                {
                    "kafka.bootstrap.servers": bootstrap,
                    **current().spark_options(),  # TLS, SASL: as every client
                    "subscribe": topic,
                    "kafka.isolation.level": isolation,
                    "startingOffsets": json.dumps({topic: start or {}}),
                    "endingOffsets": json.dumps({topic: ends[topic]}),
                },
            )
            .where(F.col("key").isNotNull())
            .select("key", "value", "topic", "partition", "offset")
        )
        if current_files:
            old = (
                spark.read.option("mergeSchema", "true")
                .parquet(*current_files)
                .where(F.col("topic") == topic)
            )
            if sealer is not None:
                old = old.withColumn(
                    "value",
                    F.udf(sealer.open_bytes, "binary", useArrow=False)(
                        "value", F.concat_ws(":", "topic", "partition", "offset")
                    ),
                )
            new = old.select("key", "value", "topic", "partition", "offset").unionByName(new)
        latest = (
            new.groupBy("key")
            .agg(F.max_by(F.struct("value", "topic", "partition", "offset"), "offset").alias("r"))
            .select("key", "r.*")
            .where(F.col("value").isNotNull())
        )
        latest = _decoded(latest, topic, sealer)
        if table is None:
            table, _ = tables.table_for(warehouse, TABLE, latest.schema, ["topic"])
        if directory is None:
            directory = tables.run_directory(table)
        # one topic per write: every file holds one partition value
        written += tables.write_files(
            latest.orderBy("partition", "offset"), f"{directory}/topic={_safe(topic)}"
        )
    if table is None or directory is None:
        return commit.run
    table, _ = tables.table_for(warehouse, TABLE, latest.schema, ["topic"])
    topic_column = [f.name for f in table.spec().fields].index("topic")
    replaced = [
        t.file
        for t in (table.scan().plan_files() if table.current_snapshot() else [])
        if t.file.partition[topic_column] in topics
    ]
    properties = {}
    if sealer is not None:
        properties[SEALED] = json.dumps({"key_id": sealer.key_id, "fields": list(sealer.fields)})
    return tables.commit(table, commit, written, ends, directory, properties, replaced)


def _safe(topic: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in topic)


def read_snapshot(spark: Any, warehouse: Path, topic: str, snapshot_id: int | None = None) -> Any:
    """The latest complete snapshot of ``topic`` (at an Iceberg snapshot:
    default the current one), Spark reading the table's data files."""
    from pyspark.sql import functions as F

    files = tables.data_files(tables.load(warehouse, TABLE), snapshot_id)
    if not files:
        raise FileNotFoundError(f"no snapshots under {warehouse}: run seqkeeper compact first")
    return spark.read.option("mergeSchema", "true").parquet(*files).where(F.col("topic") == topic)


def latest_run(warehouse: Path) -> tuple[int, dict[str, Any]]:
    """The last snapshot run and what it committed (``offsets``, the
    sealing key): run 0 before the first."""
    c = tables.committed(tables.load(warehouse, TABLE))
    record: dict[str, Any] = {"offsets": c.offsets}
    if c.prop(SEALED):
        record["sealed"] = json.loads(c.prop(SEALED))
    return c.run, record
