"""The audit log: every message of the given topics in message-db's
``messages`` shape, as Parquet, incremental and committed atomically.

Columns: ``id`` (the messageId; ``<topic>:<partition>:<offset>`` when the
value has none), ``stream_name`` (``<category>-<key>``; the category is the
topic name with ``-`` replaced by ``_``, since ``-`` separates category and
id), ``type``, ``position`` (gapless per stream, counted across runs),
``global_position`` (unique and increasing across runs), ``data`` and
``metadata`` (JSON text), ``time``, the original ``key`` and ``value``
bytes (for replay), the Kafka coordinates, and ``dead_letter_reason`` (the
``seqkeeper.reason`` header). Partitioned by ``category`` and ``day``. With a
:class:`~spark_sink.crypto.Sealer`, marked ``data`` fields and the raw value
are encrypted; the commit record names the key's fingerprint and fields.

Storage: the Iceberg table ``seqkeeper.audit`` (:mod:`spark_sink.tables`),
partitioned by ``category`` and ``day``; each run appends its rows in one
commit whose summary holds the offsets reached, the last global position
and the snapshot of ``seqkeeper.audit_positions`` (every stream's next
position after the run, written just before). A run killed midway commits
nothing, and a rerun without new records appends nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from seqkeeper.security import current
from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.crypto import Sealer
from seqkeeper.spark_sink.kafka_source import read_kafka
from seqkeeper.spark_sink.snapshots import exact_ends

TABLE = "audit"
POSITIONS = "audit_positions"
GLOBAL_POSITION = "seqkeeper.global_position"  #: the last global position given
POSITIONS_SNAPSHOT = "seqkeeper.positions"  #: the audit_positions snapshot of the run
SEALED = "seqkeeper.sealed"  #: the key id and fields that sealed the run


def read_audit(spark: Any, warehouse: Path, snapshot_id: int | None = None) -> Any:
    """The audit table's rows at a snapshot (default: the current one),
    Spark reading its data files (``None`` before the first row)."""
    files = tables.data_files(tables.load(warehouse, TABLE), snapshot_id)
    if not files:
        return None
    return spark.read.option("mergeSchema", "true").parquet(*files)


def coordinates(topic: str, partition: int, offset: int) -> str:
    """A record's context for :class:`~spark_sink.crypto.Sealer`."""
    return f"{topic}:{partition}:{offset}"


def _sealed(out: Any, sealer: Sealer) -> Any:
    """``out`` with the marked ``data`` fields and the raw value sealed."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    def data(text: str | None, ctx: str) -> str | None:
        if text is None:
            return None
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
        return orjson.dumps(sealer.seal_fields(doc, ctx)).decode()

    ctx = F.concat_ws(":", "topic", "partition", "offset")
    return out.withColumn(
        "data", F.udf(data, StringType(), useArrow=False)("data", ctx)
    ).withColumn("value", F.udf(sealer.seal_bytes, BinaryType(), useArrow=False)("value", ctx))


def compact_audit(
    spark: Any,
    bootstrap: str,
    topics: list[str],
    warehouse: Path,
    sealer: Sealer | None = None,
) -> int:
    """Append the topics' new records to the audit log; the run's number.
    With a ``sealer``, marked ``data`` fields and raw values are encrypted
    (:mod:`spark_sink.crypto`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    table = tables.load(warehouse, TABLE)
    for done in (table, tables.load(warehouse, POSITIONS)):
        if done is not None:
            tables.remove_orphans(done)
    commit = tables.committed(table)
    ends = exact_ends(bootstrap, topics)
    starts = commit.offsets
    new = read_kafka(
        spark,
        {
            "kafka.bootstrap.servers": bootstrap,
            **current().spark_options(),  # TLS, SASL: as every client
            "subscribe": ",".join(topics),
            "includeHeaders": "true",
            "startingOffsets": json.dumps({t: starts.get(t, {}) for t in topics}),
            "endingOffsets": json.dumps(ends),
        },
    )
    doc = F.from_json(
        F.col("value").cast("string"),
        "messageId STRING, type STRING, data STRING, metadata STRING, commandType STRING, "
        "payload STRING, correlationId STRING, causationId STRING, tenantId STRING, "
        "replyTo STRING, schemaVersion STRING",
    )
    # Commands carry their metadata at the top level (schemas/command.schema.json).
    envelope = F.struct(
        *[
            F.col(f"doc.{f}").alias(f)
            for f in ("correlationId", "causationId", "tenantId", "replyTo", "schemaVersion")
        ]
    )
    metadata = F.coalesce(
        F.col("doc.metadata"),
        F.when(F.to_json(envelope) != "{}", F.to_json(envelope)),
    )
    reason = F.filter("headers", lambda h: h["key"] == "seqkeeper.reason")
    rows = new.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        F.regexp_replace("topic", "-", "_").alias("category"),
        F.coalesce(F.col("key").cast("string"), F.lit("")).alias("key_text"),
        doc.alias("doc"),
        F.when(F.size(reason) > 0, reason[0]["value"].cast("string")).alias("dead_letter_reason"),
    )
    order = ["topic", "partition", "offset"]
    stream = F.concat_ws("-", "category", "key_text")
    # Each stream's next position, kept per run (so purged rows do not
    # reset positions, and a run does not rescan the whole log).
    positions = tables.load(warehouse, POSITIONS)
    base = None
    if commit.prop(POSITIONS_SNAPSHOT):
        files = tables.data_files(positions, int(commit.prop(POSITIONS_SNAPSHOT)))
        base = spark.read.parquet(*files) if files else None
    last_global = int(commit.prop(GLOBAL_POSITION, "0"))
    out = rows.select(
        F.coalesce(F.col("doc.messageId"), F.concat_ws(":", "topic", "partition", "offset")).alias(
            "id"
        ),
        stream.alias("stream_name"),
        F.coalesce(F.col("doc.type"), F.col("doc.commandType"), F.lit("")).alias("type"),
        (F.row_number().over(Window.partitionBy(stream).orderBy(*order)) - 1).alias("rel"),
        (F.row_number().over(Window.orderBy(*order)) + F.lit(last_global).cast("long")).alias(
            "global_position"
        ),
        F.coalesce(F.col("doc.data"), F.col("doc.payload")).alias("data"),
        metadata.alias("metadata"),
        F.col("timestamp").alias("time"),
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "dead_letter_reason",
        "category",
        F.to_date("timestamp").alias("day"),
    )
    if base is not None:
        out = out.join(base, "stream_name", "left").withColumn(
            "position", F.col("rel") + F.coalesce(F.col("base"), F.lit(0))
        )
    else:
        out = out.withColumn("position", F.col("rel"))
    out = out.drop("rel", "base")
    if sealer is not None:
        out = _sealed(out, sealer)
    out = out.cache()
    count = out.count()
    try:
        if not count and tables.merged(starts, ends) == starts:
            return commit.run  # nothing new: no commit
        nexts = out.groupBy("stream_name").agg((F.max("position") + 1).alias("base"))
        if base is not None:
            nexts = nexts.unionByName(base).groupBy("stream_name").agg(F.max("base").alias("base"))
        # The positions first, then the audit naming their snapshot: a crash
        # between the two leaves a positions snapshot no audit commit names.
        pos_table, pos_commit = tables.table_for(warehouse, POSITIONS, nexts.schema)
        pos_dir = tables.run_directory(pos_table)
        tables.commit(
            pos_table,
            pos_commit,
            tables.write_files(nexts.coalesce(1), pos_dir),
            {},
            pos_dir,
            replaced=[t.file for t in pos_table.scan().plan_files()]
            if pos_table.current_snapshot()
            else (),
        )
        pos_snapshot = tables.committed(tables.load(warehouse, POSITIONS)).snapshot_id
        table, _ = tables.table_for(warehouse, TABLE, out.schema, ["category", "day"])
        directory = tables.run_directory(table)
        files = (
            tables.write_files(out.orderBy("global_position"), directory, ["category", "day"])
            if count
            else []
        )
        properties = {
            GLOBAL_POSITION: str(last_global + count),
            POSITIONS_SNAPSHOT: str(pos_snapshot),
        }
        if sealer is not None:
            properties[SEALED] = json.dumps(
                {"key_id": sealer.key_id, "fields": list(sealer.fields)}
            )
        return tables.commit(table, commit, files, ends, directory, properties)
    finally:
        out.unpersist()


def purge_audit(warehouse: Path, keep_days: int, today: date | None = None) -> int:
    """Delete the audit rows of days older than ``keep_days`` (whole
    ``day`` partitions, in one commit); how many partitions went. The
    offsets and positions reached are kept, so compaction goes on where it
    was. Earlier snapshots keep the files until they are expired."""
    cutoff = (today or datetime.now(UTC).date()) - timedelta(days=keep_days)
    table = tables.load(warehouse, TABLE)
    if table is None or table.current_snapshot() is None:
        return 0
    commit = tables.committed(table)
    names = [f.name for f in table.spec().fields]
    day, category = names.index("day"), names.index("category")
    epoch_days = (cutoff - date(1970, 1, 1)).days  # Iceberg's dates
    old = [t.file for t in table.scan().plan_files() if t.file.partition[day] < epoch_days]
    if not old:
        return 0
    tables.commit(table, commit, [], {}, None, replaced=old, next_run=False)
    return len({(f.partition[category], f.partition[day]) for f in old})
