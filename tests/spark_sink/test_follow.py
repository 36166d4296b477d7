"""``seqkeeper compact --follow`` as a user runs it: records published while
it runs reach the Iceberg tables within a few triggers, topics created after
it started included; its lag is a Prometheus metric on loopback only; killed
with -9 (Spark's JVM with it) and restarted, the audit holds every record
once."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.follow import at_least, lag, oldest_pending
from seqkeeper.topics import create_topics
from tests.security.test_bind import outcome, own_addresses
from tests.spark_sink.cli_env import compact_env
from tests.spark_sink.test_audit import send
from tests.spark_sink.test_snapshots import put

pytestmark = pytest.mark.integration


def event(i: int) -> bytes:
    return orjson.dumps({"messageId": f"m{i}", "seq": i, "type": "T", "data": {"i": i}})


def audit_ids(warehouse: Path) -> list[str]:
    table = tables.load(warehouse, "audit")
    if table is None or table.current_snapshot() is None:
        return []
    return list(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())


def snapshot_values(warehouse: Path) -> dict[bytes, bytes]:
    table = tables.load(warehouse, "snapshots")
    if table is None or table.current_snapshot() is None:
        return {}
    rows = table.scan(selected_fields=("key", "value")).to_arrow().to_pylist()
    return {r["key"]: r["value"] for r in rows}


def wait_for(check, seconds: float, proc: subprocess.Popen, log: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        assert proc.poll() is None, f"compact --follow exited: {log.read_text()[-2000:]}"
        time.sleep(0.3)
    raise AssertionError(f"not in the store after {seconds} s: {log.read_text()[-2000:]}")


def test_follow_keeps_the_store_current_and_a_kill_neither_doubles_nor_loses(
    broker, make_settings, tmp_path
) -> None:
    settings = make_settings()
    # the changelog comes later, while it runs (a worker started after it)
    changelog = f"{settings.runtime.app_id}-state-changelog"
    ordered = settings.ordered.ordered_topic
    asyncio.run(create_topics(broker.bootstrap, [ordered], 2))
    warehouse = tmp_path / "w"
    env = compact_env(settings)
    cmd = [sys.executable, "-m", "seqkeeper", "compact", "-b", broker.bootstrap]
    cmd += ["--warehouse", str(warehouse), "--master", "local[2]"]
    cmd += ["--app-id", settings.runtime.app_id, "--follow", "--trigger-seconds", "1"]

    def start(n: int, *extra: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"follow-{n}.log"
        proc = subprocess.Popen(
            [*cmd, *extra],
            env=env,
            start_new_session=True,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        return proc, log

    def publish(lo: int, hi: int, changelog_too: bool = True) -> None:
        asyncio.run(
            send(
                broker.bootstrap,
                [(ordered, b"k%d" % (i % 5), event(i), None) for i in range(lo, hi)],
            )
        )
        if changelog_too:
            asyncio.run(
                put(
                    broker.bootstrap,
                    changelog,
                    [(b"k%d" % (i % 7), b"%d" % i) for i in range(lo, hi)],
                )
            )

    def metric(port: int, name: str) -> float | None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        found = re.search(rf"^{name} (\S+)$", text, re.M)
        return None if found is None else float(found[1])

    def expected(n: int) -> dict[bytes, bytes]:
        return {b"k%d" % (i % 7): b"%d" % i for i in range(n)}

    publish(0, 30, changelog_too=False)
    proc, log = start(1, "--metrics-port", "0")
    try:
        # Spark's start included. A batch is several Spark jobs: 20-35 s each
        # on a loaded 2-core machine (the margins are for such a machine)
        wait_for(
            lambda: sorted(audit_ids(warehouse)) == sorted(f"m{i}" for i in range(30)),
            150,
            proc,
            log,
        )
        served = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", log.read_text())
        assert served, log.read_text()
        port = int(served[1])
        wait_for(lambda: metric(port, "seqkeeper_store_rows_total") == 30, 30, proc, log)
        assert metric(port, "seqkeeper_store_lag_records") == 0
        assert metric(port, "seqkeeper_store_topics") == 1
        for address in own_addresses()[:1]:  # (SEQKEEPER_WEB_HOST: loopback by default)
            assert outcome(address, port) == "refused"
        # a topic created while it runs is followed from its first record
        asyncio.run(create_topics(broker.bootstrap, [changelog], 2))
        asyncio.run(
            put(broker.bootstrap, changelog, [(b"k%d" % (i % 7), b"%d" % i) for i in range(30)])
        )
        publish(30, 60)
        wait_for(lambda: len(audit_ids(warehouse)) == 60, 120, proc, log)
        wait_for(lambda: snapshot_values(warehouse) == expected(60), 90, proc, log)
        assert "following new topics: " + changelog in log.read_text()
        # (the batch logs after its commit)
        wait_for(lambda: "store lag: 0 records behind the topics" in log.read_text(), 30, proc, log)
        assert metric(port, "seqkeeper_store_topics") == 2
        # killed while records keep coming: mid-batch or between batches
        publish(60, 80)
        time.sleep(1.5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the CLI and Spark's JVM
        proc.wait()
    publish(80, 100)
    proc, log = start(2)
    try:
        wait_for(lambda: len(audit_ids(warehouse)) >= 100, 150, proc, log)
        time.sleep(2.5)  # (a doubled batch would land here)
        ids = audit_ids(warehouse)
        assert sorted(ids) == sorted(f"m{i}" for i in range(100))
        assert snapshot_values(warehouse) == expected(100)
        proc.send_signal(signal.SIGTERM)  # stops after the batch under way
        assert proc.wait(timeout=60) == 0, log.read_text()[-2000:]
        assert "follow stopped" in log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    rows = tables.load(warehouse, "audit").scan().to_arrow().to_pylist()
    assert sorted(r["global_position"] for r in rows) == list(range(1, 101))


def test_lag_counts_records_behind_and_ends_never_move_back() -> None:
    assert lag({"t": {"0": 10, "1": 5}}, {"t": {"0": 7}}) == 8
    assert lag({"t": {"0": 10}}, {"t": {"0": 12}}) == 0
    assert at_least({"t": {"0": 3, "1": 9}}, {"t": {"0": 5}}) == {"t": {"0": 5, "1": 9}}


def test_oldest_pending_is_the_first_record_the_store_lacks(broker, names) -> None:
    topic = f"{names['app_id']}-pending"
    asyncio.run(create_topics(broker.bootstrap, [topic], 1))
    before = time.time()
    asyncio.run(put(broker.bootstrap, topic, [(b"k", b"%d" % i) for i in range(3)]))
    ends = {topic: {"0": 3}}
    oldest = asyncio.run(oldest_pending(broker.bootstrap, ends, {topic: {"0": 1}}))
    assert oldest is not None and before - 1 <= oldest <= time.time() + 1
    assert asyncio.run(oldest_pending(broker.bootstrap, ends, {topic: {"0": 3}})) is None
