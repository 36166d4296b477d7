"""The warehouse as Apache Iceberg tables, as other engines and concurrent
runs see it: DuckDB (its own Iceberg reader, offline) reads what compact
committed, offsets in every snapshot; two real concurrent `compact` runs
commit once (the other fails with one line and leaves no file); a
pre-Iceberg warehouse is refused with one line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.spark_sink import tables
from seqkeeper.topics import create_topics
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
    changelog = f"{settings.runtime.app_id}-state-changelog"
    ordered = settings.ordered.ordered_topic
    asyncio.run(create_topics(broker.bootstrap, [changelog, ordered], 2))
    asyncio.run(
        put(broker.bootstrap, changelog, [(b"k%d" % (i % 6), b"%d" % i) for i in range(60)])
    )
    docs = [orjson.dumps({"messageId": f"m{i}", "type": "T", "data": {"i": i}}) for i in range(40)]
    asyncio.run(
        send(broker.bootstrap, [(ordered, b"k%d" % (i % 4), d, None) for i, d in enumerate(docs)])
    )
    env = {
        **os.environ,
        "SEQKEEPER_ORDERED_TOPIC": ordered,
        "SEQKEEPER_INPUT_TOPIC": settings.ordered.input_topic,
        "SEQKEEPER_DEDUPED_TOPIC": settings.ordered.deduped_topic,
        "SEQKEEPER_DLQ_TOPIC": settings.ordered.dlq_topic,
    }
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
    with pytest.raises(tables.LegacyWarehouse, match="mv .* and run compact again"):
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
