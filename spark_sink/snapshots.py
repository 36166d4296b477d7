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
from pathlib import Path
from typing import Any

from spark_sink.kafka_source import plan, read_kafka


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


def exact_ends(bootstrap: str, topics: list[str]) -> dict[str, dict[str, int]]:
    slices = asyncio.run(plan(bootstrap, dict.fromkeys(topics), "earliest", "latest", 2**62))
    ends: dict[str, dict[str, int]] = {t: {} for t in topics}
    for s in slices:
        ends[s.topic][str(s.partition)] = s.end
    return ends


def compact_snapshots(spark: Any, bootstrap: str, topics: list[str], warehouse: Path) -> int:
    """One run over ``topics``; returns its number."""
    from pyspark.sql import functions as F

    warehouse.mkdir(parents=True, exist_ok=True)
    previous, commit = latest_run(warehouse)
    run = previous + 1
    ends = exact_ends(bootstrap, topics)
    tables: dict[str, str] = {}
    for topic in topics:
        start = commit["offsets"].get(topic, {})
        new = (
            read_kafka(
                spark,
                {
                    "kafka.bootstrap.servers": bootstrap,
                    "subscribe": topic,
                    "startingOffsets": json.dumps({topic: start or {}}),
                    "endingOffsets": json.dumps({topic: ends[topic]}),
                },
            )
            .where(F.col("key").isNotNull())
            .select("key", "value", "topic", "partition", "offset")
        )
        old_path = commit["tables"].get(topic)
        if old_path is not None:
            new = spark.read.parquet(str(warehouse / old_path)).unionByName(new)
        latest = (
            new.groupBy("key")
            .agg(F.max_by(F.struct("value", "topic", "partition", "offset"), "offset").alias("r"))
            .select("key", "r.*")
            .where(F.col("value").isNotNull())
        )
        path = f"snapshots/{topic}/run={run}"
        latest.orderBy("partition", "offset").write.mode("overwrite").parquet(str(warehouse / path))
        tables[topic] = path
    commit_run(warehouse, {"run": run, "offsets": ends, "tables": tables})
    return run


def read_snapshot(spark: Any, warehouse: Path, topic: str) -> Any:
    """The latest complete snapshot of ``topic``."""
    _, commit = latest_run(warehouse)
    return spark.read.parquet(str(warehouse / commit["tables"][topic]))
