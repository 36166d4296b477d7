"""The Iceberg commit protocol of :mod:`spark_sink.tables` against a model
(no Spark, no broker: runs write Parquet with pyarrow): whatever mix of
committed runs, runs killed before their commit and runs overtaken by a
concurrent one, the table holds each record of the log once, and the
offsets in its current snapshot are exactly where its rows end."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqkeeper.spark_sink import tables

TOPIC = "t"


def start_run(warehouse: Path, log: list[int]) -> tuple[object, tables.Committed, str, list[str]]:
    """A run up to writing its files: what it loaded, its folder, its files."""
    schema = pa.schema([("offset", pa.int64()), ("topic", pa.string())])
    table, base = tables.table_for(warehouse, "log", schema)
    start = base.offsets.get(TOPIC, {}).get("0", 0)
    directory = tables.run_directory(table)
    Path(directory).mkdir(parents=True)
    path = f"{directory}/part-0.parquet"
    rows = pa.table({"offset": log[start:], "topic": [TOPIC] * len(log[start:])}, schema=schema)
    pq.write_table(rows, path)
    return table, base, directory, [path]


def finish(run: tuple[object, tables.Committed, str, list[str]], end: int) -> None:
    table, base, directory, files = run
    tables.commit(table, base, files, {TOPIC: {"0": end}}, directory)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from(["commit", "killed", "overtaken"])),
        min_size=1,
        max_size=6,
    )
)
def test_each_record_once_whatever_runs_crash_or_race(steps: list[tuple[int, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        warehouse = Path(tmp)
        log: list[int] = []
        for new, fate in steps:
            log.extend(range(len(log), len(log) + new))  # records arrive
            run = start_run(warehouse, log)
            end = len(log)
            if fate == "killed":
                continue  # never commits; its folder is an orphan
            if fate == "overtaken":
                finish(start_run(warehouse, log), end)  # another run commits first
                with pytest.raises(tables.LostCommit, match="another run committed"):
                    finish(run, end)
                assert not Path(run[2]).exists()  # the loser's files are gone
                continue
            finish(run, end)
        table = tables.load(warehouse, "log")
        reached = tables.committed(table).offsets.get(TOPIC, {}).get("0", 0)
        offsets = sorted(table.scan().to_arrow()["offset"].to_pylist()) if table else []
        assert offsets == list(range(reached))  # once each, none past the offsets
        if table is not None and table.current_snapshot() is not None:
            # a killed run's folder goes once a later run committed
            tables.remove_orphans(table)
            named = {s.summary.additional_properties[tables.RUN_DIR] for s in table.snapshots()}
            made = table.current_snapshot().timestamp_ms
            for path in Path(tables.location(table), "data").glob("run-*"):
                assert path.name in named or int(path.name.split("-")[1]) >= made


def test_merged_offsets_keep_every_topic() -> None:
    old = {"a": {"0": 5, "1": 7}, "b": {"0": 1}}
    assert tables.merged(old, {"a": {"1": 9, "2": 3}}) == {
        "a": {"0": 5, "1": 9, "2": 3},
        "b": {"0": 1},
    }
    assert old == {"a": {"0": 5, "1": 7}, "b": {"0": 1}}
