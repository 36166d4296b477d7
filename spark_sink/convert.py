"""``seqkeeper compact --convert``: turn a warehouse of the pre-Iceberg
layout (``_LATEST`` files naming the last complete run) into the Iceberg
tables, once.

What the last complete runs hold is written again by Spark (the same rows,
the partition columns kept in the files, timestamps in microseconds) and
committed with the offsets, last global position, stream positions and
sealing key of those runs, so the next ``compact`` continues where the old
layout stopped: nothing read twice, nothing skipped. Sealed values are
copied as they are (same key, same bytes).

Each table is committed once; a table that already has a snapshot is not
converted again. Only when both are done are the ``_LATEST`` files renamed
``_LATEST.converted`` (which lifts the refusal); a crash before that is
finished by running the conversion again. The old files are left in place:
delete ``audit/run=*``, ``audit/_positions``, ``snapshots/<topic>/run=*``
and the ``_commits`` folders once the conversion is checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.audit import GLOBAL_POSITION, POSITIONS, POSITIONS_SNAPSHOT
from seqkeeper.spark_sink.audit import SEALED as AUDIT_SEALED
from seqkeeper.spark_sink.audit import TABLE as AUDIT
from seqkeeper.spark_sink.snapshots import SEALED, TABLE, _safe


def _last(directory: Path) -> dict[str, Any] | None:
    """The commit record of the last complete run under ``directory``."""
    pointer = directory / tables.LEGACY
    if not pointer.exists():
        return None
    run = int(pointer.read_text().strip())
    record: dict[str, Any] = json.loads((directory / "_commits" / f"{run}.json").read_text())
    return record


def convert_warehouse(spark: Any, warehouse: Path) -> dict[str, int]:
    """Convert ``warehouse``; the rows written per table (empty: nothing to
    convert)."""
    from pyspark.sql import functions as F

    done: dict[str, int] = {}
    audit_dir = warehouse / "audit"
    record = _last(audit_dir)
    if record is not None and _empty(warehouse, AUDIT):
        # category and day come from the folder names, as text (Spark would
        # read a numeric category as a number)
        spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        paths = [
            str(audit_dir / f"run={n}")
            for n in range(1, int(record["run"]) + 1)
            if any((audit_dir / f"run={n}").rglob("*.parquet"))
        ]
        positions_dir = audit_dir / "_positions" / f"run={record['run']}"
        properties = {GLOBAL_POSITION: str(record.get("global_position", 0))}
        if positions_dir.exists():
            positions = spark.read.parquet(str(positions_dir))
            table, base = tables.table_for(warehouse, POSITIONS, positions.schema, converting=True)
            directory = tables.run_directory(table)
            files = tables.write_files(positions.coalesce(1), directory)
            tables.commit(table, base, files, {}, directory)
            made = tables.committed(tables.load(warehouse, POSITIONS, converting=True))
            properties[POSITIONS_SNAPSHOT] = str(made.snapshot_id)
        if "sealed" in record:
            properties[AUDIT_SEALED] = json.dumps(record["sealed"])
        rows = 0
        if paths:
            frame = (
                spark.read.option("basePath", str(audit_dir))
                .parquet(*paths)
                .drop("run")
                .withColumn("day", F.col("day").cast("date"))
            )
            table, base = tables.table_for(
                warehouse, AUDIT, frame.schema, ["category", "day"], converting=True
            )
            directory = tables.run_directory(table)
            files = tables.write_files(
                frame.orderBy("global_position"), directory, ["category", "day"]
            )
            rows = frame.count()
            tables.commit(table, base, files, record["offsets"], directory, properties)
        done[AUDIT] = rows
    record = _last(warehouse)
    if record is not None and _empty(warehouse, TABLE) and record.get("tables"):
        snap_dir: str | None = None
        written: list[str] = []
        rows = 0
        for topic, path in sorted(record["tables"].items()):
            frame = spark.read.parquet(str(warehouse / path))
            rows += frame.count()
            if snap_dir is None:
                table, base = tables.table_for(
                    warehouse, TABLE, frame.schema, ["topic"], converting=True
                )
                snap_dir = tables.run_directory(table)
            written += tables.write_files(frame, f"{snap_dir}/topic={_safe(topic)}")
        properties = {SEALED: json.dumps(record["sealed"])} if "sealed" in record else {}
        tables.commit(table, base, written, record["offsets"], snap_dir, properties)
        done[TABLE] = rows
    for pointer in (audit_dir / tables.LEGACY, warehouse / tables.LEGACY):
        if pointer.exists():
            pointer.rename(pointer.with_name(f"{tables.LEGACY}.converted"))
    return done


def _empty(warehouse: Path, name: str) -> bool:
    table = tables.load(warehouse, name, converting=True)
    return table is None or table.current_snapshot() is None
