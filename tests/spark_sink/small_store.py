"""A small audit log and snapshot table written without Kafka, in the
layout ``compact`` writes, its sensitive fields sealed by the given
sealers (row by row: a rotation's old and new data side by side)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import orjson

from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.audit import coordinates
from seqkeeper.spark_sink.crypto import Sealer

TOPIC = "acct"
CATEGORY = "acct"
SNAPSHOT_TOPIC = "app-state-changelog"


def doc(i: int) -> dict[str, Any]:
    """The clear ``data`` of row ``i``."""
    return {"i": i, "email": f"user{i}@example.com", "card": {"number": f"4000-{i}"}}


def value(i: int) -> bytes:
    """The clear raw value of row ``i`` (what replay publishes)."""
    return orjson.dumps({"messageId": f"m{i}", "type": "Opened", "data": doc(i)})


def audit_rows(sealers: Sequence[Sealer], per_run: int) -> list[list[dict[str, Any]]]:
    """Rows of one run per sealer (run n sealed by ``sealers[n-1]``)."""
    runs = []
    for n, sealer in enumerate(sealers):
        rows = []
        for j in range(per_run):
            i = n * per_run + j
            ctx = coordinates(TOPIC, 0, i)
            rows.append(
                {
                    "id": f"m{i}",
                    "stream_name": f"{CATEGORY}-{i % 3}",
                    "type": "Opened",
                    "position": i // 3,
                    "global_position": i + 1,
                    "data": orjson.dumps(sealer.seal_fields(doc(i), ctx)).decode(),
                    "metadata": None,
                    "time": datetime(2024, 1, 1, 12, i % 60, tzinfo=UTC),
                    "key": str(i % 3).encode(),
                    "value": sealer.seal_bytes(value(i), ctx),
                    "topic": TOPIC,
                    "partition": 0,
                    "offset": i,
                    "dead_letter_reason": None,
                }
            )
        runs.append(rows)
    return runs


def snapshot_rows(sealer: Sealer, n: int) -> list[dict[str, Any]]:
    """A snapshot table: one ``entity`` row (sealed whole), one ``buffer``
    row (its message's fields sealed), one not sealed, per key."""
    rows = []
    for i in range(n):
        ctx = coordinates(SNAPSHOT_TOPIC, 0, i)
        family = ("entity", "buffer", "seq")[i % 3]
        text = orjson.dumps({"messageId": f"m{i}", "data": doc(i)}).decode()
        if family == "entity":
            decoded = sealer.seal(text.encode(), f"decoded:{ctx}".encode())
        elif family == "buffer":
            decoded = sealer.seal_message(text, ctx)
        else:
            decoded = str(i)
        rows.append(
            {
                "key": f"k{i}".encode(),
                "value": sealer.seal_bytes(value(i), ctx),
                "topic": SNAPSHOT_TOPIC,
                "partition": 0,
                "offset": i,
                "family": family,
                "subject": f"k{i}",
                "item": None,
                "decoded": decoded,
            }
        )
    return rows


AUDIT_SCHEMA = (
    "id string, stream_name string, type string, position long, global_position long, "
    "data string, metadata string, time timestamp, key binary, value binary, topic string, "
    "partition int, offset long, dead_letter_reason string"
)
SNAPSHOT_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, family string, "
    "subject string, item string, decoded string"
)

#: Writes rows as Parquet files under a directory (partitioned by the
#: given columns, kept in the files) and returns the files.
Writer = Callable[[list[dict[str, Any]], Path, list[str]], list[str]]


def write_with_pyarrow(
    rows: list[dict[str, Any]], path: Path, partition_by: list[str]
) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if "category" in partition_by:
        for row in rows:
            row.setdefault("category", CATEGORY)
            row.setdefault("day", date(2024, 1, 1))
    types = {
        "position": pa.int64(),
        "global_position": pa.int64(),
        "offset": pa.int64(),
        "partition": pa.int32(),
        "time": pa.timestamp("us", tz="UTC"),
        "key": pa.binary(),
        "value": pa.binary(),
        "day": pa.date32(),
    }
    schema = pa.schema([(name, types.get(name, pa.string())) for name in rows[0]])
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema), path / "part-0.parquet")
    return [str(path / "part-0.parquet")]


def spark_writer(spark: Any) -> Writer:
    def write(rows: list[dict[str, Any]], path: Path, partition_by: list[str]) -> list[str]:
        from pyspark.sql import functions as F

        schema = SNAPSHOT_SCHEMA if "decoded" in rows[0] else AUDIT_SCHEMA
        names = [part.split()[0] for part in schema.split(", ")]
        df = spark.createDataFrame([tuple(r[n] for n in names) for r in rows], schema)
        if "category" in partition_by:
            df = df.withColumn("category", F.lit(CATEGORY)).withColumn("day", F.to_date("time"))
        return tables.write_files(df.coalesce(1), str(path), partition_by)

    return write


def _commit(
    warehouse: Path,
    name: str,
    rows: list[dict[str, Any]],
    write: Writer,
    partition_by: list[str],
    properties: dict[str, str],
) -> None:
    import pyarrow.parquet as pq

    directory = (
        warehouse / "seqkeeper" / name / "data" / f"run-{len(list(warehouse.rglob('run-*')))}"
    )
    files = write(rows, directory, partition_by)
    table, base = tables.table_for(warehouse, name, pq.read_schema(files[0]), partition_by)
    tables.commit(table, base, files, {}, str(directory), properties)


def build(
    warehouse: Path,
    audit_sealers: Sequence[Sealer],
    snapshot_sealer: Sealer | None = None,
    per_run: int = 6,
    write: Writer = write_with_pyarrow,
) -> None:
    """An audit log of a run per sealer (``per_run`` rows each) and, with
    ``snapshot_sealer``, a snapshot table, all committed."""
    for n, rows in enumerate(audit_rows(audit_sealers, per_run), 1):
        props = {"seqkeeper.global_position": str(n * per_run)}
        _commit(warehouse, "audit", rows, write, ["category", "day"], props)
    if snapshot_sealer is not None:
        _commit(warehouse, "snapshots", snapshot_rows(snapshot_sealer, 6), write, ["topic"], {})
