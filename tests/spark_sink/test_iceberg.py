"""The warehouse as Apache Iceberg tables, as other engines and concurrent
runs see it: DuckDB (its own Iceberg reader, offline) reads what compact
committed, offsets in every snapshot; two real concurrent `compact` runs
commit once (the other fails with one line and leaves no file); a
pre-Iceberg warehouse is refused with one line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.spark_sink import tables
from seqkeeper.topics import create_topics
from tests.spark_sink.cli_env import changelog_and_ordered, compact_env
from tests.spark_sink.test_audit import send
from tests.spark_sink.test_snapshots import put

pytestmark = pytest.mark.integration


def duckdb_connection(tmp_path: Path) -> Any:
    """DuckDB with the iceberg and avro extensions of their wheels, loaded
    from disk (nothing downloaded)."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect(
        config={
            "extension_directory": str(tmp_path / "duckdb-extensions"),
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
    )
    for name in ("avro", "iceberg"):
        module = pytest.importorskip(f"duckdb_extension_{name}")
        assert module.__file__ is not None
        (path,) = Path(module.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension")
        con.execute(f"LOAD '{path}'")
    return con


def compact_cli(broker: Any, app_id: str, warehouse: Path, env: dict[str, str]) -> Any:
    cmd = [sys.executable, "-m", "seqkeeper", "compact", "-b", broker.bootstrap]
    cmd += ["--warehouse", str(warehouse), "--master", "local[1]", "--app-id", app_id]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_runs_commit_once_and_duckdb_reads_the_tables(
    broker, make_settings, tmp_path
) -> None:
    settings = make_settings()
    changelog, ordered = changelog_and_ordered(broker.bootstrap, settings)
    asyncio.run(
        put(broker.bootstrap, changelog, [(b"k%d" % (i % 6), b"%d" % i) for i in range(60)])
    )
    docs = [orjson.dumps({"messageId": f"m{i}", "type": "T", "data": {"i": i}}) for i in range(40)]
    asyncio.run(
        send(broker.bootstrap, [(ordered, b"k%d" % (i % 4), d, None) for i, d in enumerate(docs)])
    )
    env = compact_env(settings)
    warehouse = tmp_path / "w"
    # two runs at once on one warehouse: both read from the same committed
    # offsets; the catalog lets the first commit through and refuses the
    # second, which would otherwise add the same records again
    runs = [compact_cli(broker, settings.runtime.app_id, warehouse, env) for _ in range(2)]
    results = [(*p.communicate(timeout=300), p.returncode) for p in runs]
    results = [(code, out, err) for out, err, code in results]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], results
    (lost,) = [err for code, _, err in results if code == 1]
    lines = [x for x in lost.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, lost[-3000:]
    (line,) = lines
    assert "another run committed this table" in line and "run it again" in line, lost

    audit = tables.load(warehouse, "audit")
    snapshots = tables.load(warehouse, "snapshots")
    # every run directory left is one a snapshot names: the loser's are gone
    for table in (audit, snapshots):
        named = {s.summary.additional_properties[tables.RUN_DIR] for s in table.snapshots()}
        left = {p.name for p in Path(tables.location(table), "data").glob("run-*")}
        assert left == named and len(named) == 1
    # the committed offsets are the topics' ends, in the snapshot's summary
    offsets = json.loads(audit.current_snapshot().summary.additional_properties[tables.OFFSETS])
    assert sum(offsets[ordered].values()) == 40

    # a second engine, DuckDB's own Iceberg reader, sees each record once
    con = duckdb_connection(tmp_path)
    rows = con.execute(
        "SELECT id, global_position FROM iceberg_scan(?) ORDER BY global_position",
        [audit.metadata_location],
    ).fetchall()
    assert sorted(r[0] for r in rows) == sorted(f"m{i}" for i in range(40))
    assert [r[1] for r in rows] == list(range(1, 41))
    state = con.execute(
        "SELECT key, value FROM iceberg_scan(?) WHERE topic = ?",
        [snapshots.metadata_location, changelog],
    ).fetchall()
    assert {bytes(k): bytes(v) for k, v in state} == {
        b"k%d" % j: b"%d" % (54 + j) for j in range(6)
    }

    # a rerun after both: nothing appended, the loser's records not doubled
    rerun = compact_cli(broker, settings.runtime.app_id, warehouse, env)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    audit = tables.load(warehouse, "audit")
    count = con.execute("SELECT count(*) FROM iceberg_scan(?)", [audit.metadata_location])
    assert count.fetchone() == (40,)


def test_a_pre_iceberg_warehouse_is_refused_with_one_line(tmp_path) -> None:
    from seqkeeper.spark_sink.store import MessageStore

    warehouse = tmp_path / "old"
    (warehouse / "audit").mkdir(parents=True)
    (warehouse / "audit" / "_LATEST").write_text("3\n")
    with pytest.raises(tables.LegacyWarehouse, match="once with `seqkeeper compact --convert"):
        MessageStore(warehouse)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "seqkeeper",
            "store",
            "version",
            "x-1",
            "--warehouse",
            str(warehouse),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "pre-Iceberg" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "seqkeeper", "replay", "--topic", "x-replies", "-b", "127.0.0.1:1"]
        + ["--warehouse", str(warehouse), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "pre-Iceberg" in out.stderr, out.stderr


def legacy_warehouse(spark: Any, warehouse: Path, topic: str, changelog: str) -> None:
    """A warehouse as the pre-Iceberg layout left it: one run of each, the
    audit holding offsets 0-5 of ``topic`` (Spark's default INT96
    timestamps, partition columns in the folder names only)."""
    from datetime import UTC, datetime

    from pyspark.sql import functions as F

    from tests.spark_sink.small_store import AUDIT_SCHEMA, SNAPSHOT_SCHEMA

    category = topic.replace("-", "_")
    rows = [
        (
            f"m{i}",
            f"{category}-k{i % 4}",
            "T",
            i // 4,
            i + 1,
            orjson.dumps({"i": i}).decode(),
            None,
            datetime(2026, 1, 1, tzinfo=UTC),
            b"k%d" % (i % 4),
            orjson.dumps({"messageId": f"m{i}", "type": "T", "data": {"i": i}}),
            topic,
            0,
            i,
            None,
        )
        for i in range(6)
    ]
    spark.conf.set("spark.sql.parquet.outputTimestampType", "INT96")
    audit = warehouse / "audit"
    frame = spark.createDataFrame(rows, AUDIT_SCHEMA).withColumn("category", F.lit(category))
    frame = frame.withColumn("day", F.to_date("time"))
    frame.write.partitionBy("category", "day").parquet(str(audit / "run=1"))
    positions = spark.createDataFrame([(f"{category}-k{k}", 2 if k < 2 else 1) for k in range(4)])
    positions.toDF("stream_name", "base").write.parquet(str(audit / "_positions" / "run=1"))
    (audit / "_commits").mkdir()
    record = {"run": 1, "offsets": {topic: {"0": 6}}, "global_position": 6}
    (audit / "_commits" / "1.json").write_text(json.dumps(record))
    (audit / "_LATEST").write_text("1\n")
    state = [(b"k1", b"v1", changelog, 0, 0, "x", "k1", None, "v1")]
    path = f"snapshots/{changelog}/run=1"
    spark.createDataFrame(state, SNAPSHOT_SCHEMA).write.parquet(str(warehouse / path))
    (warehouse / "_commits").mkdir()
    record = {"run": 1, "offsets": {changelog: {"0": 1}}, "tables": {changelog: path}}
    (warehouse / "_commits" / "1.json").write_text(json.dumps(record))
    (warehouse / "_LATEST").write_text("1\n")


def test_a_pre_iceberg_warehouse_converts_once_and_compaction_goes_on(
    spark, broker, names, tmp_path
) -> None:
    from seqkeeper.spark_sink.audit import compact_audit, read_audit
    from seqkeeper.spark_sink.convert import convert_warehouse
    from seqkeeper.spark_sink.snapshots import read_snapshot
    from seqkeeper.spark_sink.store import MessageStore

    topic, changelog = f"acct-{names['app_id']}", f"{names['app_id']}-state-changelog"
    asyncio.run(create_topics(broker.bootstrap, [topic], 1))
    docs = [orjson.dumps({"messageId": f"m{i}", "type": "T", "data": {"i": i}}) for i in range(9)]
    asyncio.run(
        send(broker.bootstrap, [(topic, b"k%d" % (i % 4), d, None) for i, d in enumerate(docs)])
    )
    warehouse = tmp_path / "old"
    legacy_warehouse(spark, warehouse, topic, changelog)
    with pytest.raises(tables.LegacyWarehouse, match="compact --convert"):
        MessageStore(warehouse)

    assert convert_warehouse(spark, warehouse) == {"audit": 6, "snapshots": 1}
    assert convert_warehouse(spark, warehouse) == {}  # once
    category = topic.replace("-", "_")
    assert MessageStore(warehouse).version(f"{category}-k1") == 1
    assert [bytes(r.value) for r in read_snapshot(spark, warehouse, changelog).collect()] == [b"v1"]
    # the next compaction reads from the old offsets on: nothing twice, nothing skipped
    assert compact_audit(spark, broker.bootstrap, [topic], warehouse) == 2
    rows = read_audit(spark, warehouse).collect()
    assert sorted(r.id for r in rows) == sorted(f"m{i}" for i in range(9))
    assert sorted(r.global_position for r in rows) == list(range(1, 10))
    # k1 had m1 and m5 (positions 0, 1 in the old run); the new run adds nothing to it
    assert MessageStore(warehouse).version(f"{category}-k0") == 2  # m0, m4, then m8
