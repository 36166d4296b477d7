"""``seqkeeper compact`` killed (-9, Spark's JVM with it) in the middle of a
run: the previous complete run stays readable and unchanged, and the next
run finishes the work with nothing lost or doubled."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.audit import read_audit
from seqkeeper.spark_sink.job import run_compact
from seqkeeper.spark_sink.snapshots import latest_run, read_snapshot
from tests.spark_sink.cli_env import changelog_and_ordered, compact_env
from tests.spark_sink.test_audit import send
from tests.spark_sink.test_snapshots import put

pytestmark = pytest.mark.integration


def event(i: int) -> bytes:
    return orjson.dumps({"messageId": f"m{i}", "seq": i, "type": "T", "data": {"i": i}})


def test_compact_killed_midway_leaves_the_last_run_and_a_rerun_completes(
    spark, broker, make_settings, tmp_path
) -> None:
    settings = make_settings()
    changelog, ordered = changelog_and_ordered(broker.bootstrap, settings)
    asyncio.run(
        put(broker.bootstrap, changelog, [(f"k{i % 5}".encode(), b"%d" % i) for i in range(50)])
    )
    asyncio.run(
        send(broker.bootstrap, [(ordered, b"k%d" % (i % 5), event(i), None) for i in range(50)])
    )
    warehouse = tmp_path / "w"
    assert run_compact(spark, settings, warehouse) == {"snapshots": 1, "audit": 1}
    before = sorted(read_snapshot(spark, warehouse, changelog).collect())
    audited = sorted(r.id for r in read_audit(spark, warehouse).collect())

    asyncio.run(
        put(broker.bootstrap, changelog, [(f"k{i % 7}".encode(), b"%d" % i) for i in range(50, 90)])
    )
    asyncio.run(
        send(broker.bootstrap, [(ordered, b"k%d" % (i % 5), event(i), None) for i in range(50, 90)])
    )
    env = compact_env(settings)
    cmd = [sys.executable, "-m", "seqkeeper", "compact", "-b", broker.bootstrap]
    cmd += [
        "--warehouse",
        str(warehouse),
        "--master",
        "local[2]",
        "--app-id",
        settings.runtime.app_id,
    ]
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    data = warehouse / "seqkeeper" / "snapshots" / "data"
    (run_1,) = data.glob("run-*")

    def writing() -> list[Path]:
        return [p for p in data.glob("run-*") if p != run_1]

    deadline = time.monotonic() + 120
    while not writing() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI and Spark's JVM
    proc.wait()
    (killed,) = writing()  # "the job never started writing run 2" when empty
    # killed before its commit point: run 1 is what readers see, unchanged
    assert latest_run(warehouse)[0] == 1
    assert sorted(read_snapshot(spark, warehouse, changelog).collect()) == before
    assert sorted(r.id for r in read_audit(spark, warehouse).collect()) == audited

    # the next run redoes run 2 and completes it
    assert run_compact(spark, settings, warehouse) == {"snapshots": 2, "audit": 2}
    # the killed run's files: left while a run that started before them may
    # still commit, removed by the first run after a later commit
    assert killed.exists()
    tables.remove_orphans(tables.load(warehouse, "snapshots"))
    assert not killed.exists() and len(list(data.glob("run-*"))) == 2
    state = {
        bytes(r.key): bytes(r.value) for r in read_snapshot(spark, warehouse, changelog).collect()
    }
    reference: dict[bytes, bytes] = {}
    for i in range(90):
        reference[f"k{i % 5 if i < 50 else i % 7}".encode()] = b"%d" % i
    assert state == reference
    rows = read_audit(spark, warehouse).collect()
    assert sorted(r.id for r in rows) == sorted(f"m{i}" for i in range(90))
    assert sorted(r.global_position for r in rows) == list(range(1, 91))
