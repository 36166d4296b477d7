"""State snapshots: the latest value per key of changelog topics, as Parquet,
incremental and committed atomically.

Layout under the warehouse directory::

    snapshots/<topic>/run=<n>/*.parquet   latest value per key after run n
    _commits/<n>.json                     offsets reached and tables of run n
    _LATEST                               the number of the last complete run

A run reads each topic from the offsets the last complete run reached to
the exact ends it pins at the start, merges the new records into that run's
snapshot (the highest offset of a key wins; a tombstone deletes the key),
writes ``run=<n+1>``, then its commit file, then replaces ``_LATEST``
(``os.replace``, atomic). A run killed midway leaves ``_LATEST`` on the
previous complete run, whose files are untouched; a rerun with no new
records produces the same rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seqkeeper.security import current
from seqkeeper.spark_sink.crypto import FIELDS_ENV, KEY_ENV, AuditKeyError, Sealer
from seqkeeper.spark_sink.kafka_source import plan, read_kafka


def last_commit(directory: Path, empty: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The last complete run under ``directory`` and its commit record
    (run 0 and ``empty`` before the first)."""
    pointer = directory / "_LATEST"
    if not pointer.exists():
        return 0, {"run": 0, **empty}
    run = int(pointer.read_text().strip())
    return run, json.loads((directory / "_commits" / f"{run}.json").read_text())


def commit_run(directory: Path, record: dict[str, Any]) -> None:
    """Write run ``record["run"]``'s commit record, then make it the last
    complete run by replacing ``_LATEST`` atomically (the commit point)."""
    (directory / "_commits").mkdir(exist_ok=True)
    run = record["run"]
    (directory / "_commits" / f"{run}.json").write_text(json.dumps(record, sort_keys=True))
    tmp = directory / "_LATEST.tmp"
    tmp.write_text(f"{run}\n")
    os.replace(tmp, directory / "_LATEST")


def latest_run(warehouse: Path) -> tuple[int, dict[str, Any]]:
    """The last complete snapshot run and its commit (run 0: nothing yet)."""
    return last_commit(warehouse, {"offsets": {}, "tables": {}})


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
    from seqkeeper.state import codecs, commands

    if topic.endswith("-commands-changelog"):
        return commands.describe
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
) -> int:
    """One run over ``topics``; returns its number (``on_topic`` is called
    as each topic starts; ``isolation``: how the changelogs are read, so
    that an aborted write never becomes a key's latest value)."""
    from pyspark.sql import functions as F

    warehouse.mkdir(parents=True, exist_ok=True)
    previous, commit = latest_run(warehouse)
    if commit.get("sealed") and sealer is None:
        raise AuditKeyError(
            f"the snapshots under {warehouse} are encrypted: set {KEY_ENV} "
            f"and {FIELDS_ENV} to continue them"
        )
    run = previous + 1
    ends = exact_ends(bootstrap, topics, isolation)
    tables: dict[str, str] = {}
    for topic in topics:
        on_topic(topic)
        start = commit["offsets"].get(topic, {})
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
        old_path = commit["tables"].get(topic)
        if old_path is not None:
            old = spark.read.parquet(str(warehouse / old_path))
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
        path = f"snapshots/{topic}/run={run}"
        latest.orderBy("partition", "offset").write.mode("overwrite").parquet(str(warehouse / path))
        tables[topic] = path
    record: dict[str, Any] = {"run": run, "offsets": ends, "tables": tables}
    if sealer is not None:
        record["sealed"] = {"key_id": sealer.key_id, "fields": list(sealer.fields)}
    commit_run(warehouse, record)
    return run


def read_snapshot(spark: Any, warehouse: Path, topic: str) -> Any:
    """The latest complete snapshot of ``topic``."""
    _, commit = latest_run(warehouse)
    return spark.read.parquet(str(warehouse / commit["tables"][topic]))
