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

Layout under ``<warehouse>/audit``: ``run=<n>/category=<c>/day=<d>/*.parquet``
holds the rows a run appended; ``_positions/run=<n>`` every stream's next
position after run n; ``_commits/<n>.json`` the offsets it reached and the
last global position; ``_LATEST`` the last complete run
(replaced atomically). Readers take the runs up to ``_LATEST`` only, so a
run killed midway is invisible, and a rerun without new records appends
nothing.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from seqkeeper.security import current
from seqkeeper.spark_sink.crypto import Sealer
from seqkeeper.spark_sink.kafka_source import read_kafka
from seqkeeper.spark_sink.snapshots import commit_run, exact_ends, last_commit


def _latest(audit: Path) -> tuple[int, dict[str, Any]]:
    return last_commit(audit, {"offsets": {}, "global_position": 0})


def read_audit(spark: Any, warehouse: Path) -> Any:
    """The audit table: every committed run (``None`` before the first)."""
    audit = warehouse / "audit"
    run, _ = _latest(audit)
    paths = [
        str(audit / f"run={n}")
        for n in range(1, run + 1)
        if any((audit / f"run={n}").rglob("*.parquet"))
    ]
    if not paths:
        return None
    return spark.read.option("basePath", str(audit)).parquet(*paths).drop("run")


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
    isolation: str = "read_committed",
) -> int:
    """Append the topics' new records to the audit log; the run's number
    (``isolation``: how the topics are read; read_committed, no aborted
    output becomes a row).
    With a ``sealer``, marked ``data`` fields and raw values are encrypted
    (:mod:`spark_sink.crypto`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    audit = warehouse / "audit"
    audit.mkdir(parents=True, exist_ok=True)
    previous, commit = _latest(audit)
    run = previous + 1
    ends = exact_ends(bootstrap, topics, isolation)
    starts = commit["offsets"]
    new = read_kafka(
        spark,
        {
            "kafka.bootstrap.servers": bootstrap,
            **current().spark_options(),  # TLS, SASL: as every client
            "subscribe": ",".join(topics),
            "includeHeaders": "true",
            "kafka.isolation.level": isolation,
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
    positions = audit / "_positions"
    base = (
        spark.read.parquet(str(positions / f"run={previous}"))
        if (positions / f"run={previous}").exists()
        else None
    )
    out = rows.select(
        F.coalesce(F.col("doc.messageId"), F.concat_ws(":", "topic", "partition", "offset")).alias(
            "id"
        ),
        stream.alias("stream_name"),
        F.coalesce(F.col("doc.type"), F.col("doc.commandType"), F.lit("")).alias("type"),
        (F.row_number().over(Window.partitionBy(stream).orderBy(*order)) - 1).alias("rel"),
        (F.row_number().over(Window.orderBy(*order)) + F.lit(int(commit["global_position"]))).alias(
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
    top = int(commit["global_position"]) + count
    if count:
        out.orderBy("global_position").write.mode("overwrite").partitionBy(
            "category", "day"
        ).parquet(str(audit / f"run={run}"))
    nexts = out.groupBy("stream_name").agg((F.max("position") + 1).alias("base"))
    if base is not None:
        nexts = nexts.unionByName(base).groupBy("stream_name").agg(F.max("base").alias("base"))
    nexts.write.mode("overwrite").parquet(str(positions / f"run={run}"))
    out.unpersist()
    record: dict[str, Any] = {"run": run, "offsets": ends, "global_position": top}
    if sealer is not None:
        record["sealed"] = {"key_id": sealer.key_id, "fields": list(sealer.fields)}
    commit_run(audit, record)
    return run


def purge_audit(warehouse: Path, keep_days: int, today: date | None = None) -> int:
    """Delete the audit rows of days older than ``keep_days`` (whole
    ``day=`` partitions, in every run); how many partitions went. Safe to
    run again after an interruption: it only ever deletes old days."""
    audit = warehouse / "audit"
    cutoff = (today or datetime.now(UTC).date()) - timedelta(days=keep_days)
    gone = 0
    for day_dir in sorted(audit.glob("run=*/category=*/day=*")):
        if date.fromisoformat(day_dir.name.removeprefix("day=")) < cutoff:
            shutil.rmtree(day_dir)
            gone += 1
    return gone
