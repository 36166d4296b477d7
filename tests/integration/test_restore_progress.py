"""A restore from the changelog, seen from outside: the
worker says per partition how far it is (log lines with totals and an ETA,
the ``seqkeeper_restore_remaining_records`` gauge), ``/ready`` answers 503
while it restores and 200 once it runs, and ``/health`` answers 200
throughout. Once restored, it says per partition what it replayed (issue
36, increment 1: ``table state: partition 0 (active) replayed ...``): what
its local state lacked of the changelog, counted in records and offsets
read from the broker, never in seconds."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from seqkeeper.broker import free_port
from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.integration.replays import (
    changelog_of,
    changelog_state,
    guarantee,
    local_state,
    number,
    replayed,
)

pytestmark = pytest.mark.integration

PROGRESS = re.compile(
    r"restoring (\S+)/(\d+): ([\d,]+) of ([\d,]+) records \((\d+) %\), "
    r"(about \d+ (?:s|min) left|time left not known yet)"
)
RESTORED = re.compile(r"restored (\S+)/(\d+): ([\d,]+) records in ([\d.]+) s")
GAUGE = re.compile(
    r'^seqkeeper_restore_remaining_records\{partition="(\d+)",topic="([^"]+)"\} (\S+)$', re.M
)


def check_rebuilt(log: str, mode: str, offsets: dict[int, list[int]], ends: dict[int, int]) -> None:
    """Without local state (local offset -1), every partition replayed every
    record of its changelog partition: ``end - (-1 + 1)`` of them when the
    log holds nothing else (at_least_once; exactly_once's transaction
    markers take offsets too)."""
    replays = replayed(log)
    assert set(replays) == set(offsets), log[-3000:]
    for p, r in replays.items():
        assert offsets[p], offsets  # (the workload fills every partition)
        every = (len(offsets[p]), offsets[p][0], offsets[p][-1])
        assert (r.count, r.first, r.last) == every, (p, r)
        assert r.last == ends[p] - 1, (p, r, ends)
        if mode != "exactly_once":
            assert r.count == ends[p] - (-1 + 1), (p, r, ends)


def get(url: str) -> tuple[int, Any]:
    """(status, body) of a GET; (0, None) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    except OSError:
        return 0, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def gauge_of(metrics: str) -> dict[tuple[str, int], float]:
    return {(topic, int(p)): float(v) for p, topic, v in GAUGE.findall(metrics)}


def test_a_rebuild_from_the_changelog_shows_its_progress(make_settings, tmp_path: Path) -> None:
    port = free_port()
    settings: Settings = make_settings(web_port=port)
    asyncio.run(create_topics(settings.broker.bootstrap, settings.topics(), 2))
    changelog = f"{settings.group_id}-state-changelog"
    base = f"http://127.0.0.1:{port}"

    # A changelog of some size (four to five records per message, fewer
    # under exactly_once: some 80,000, seconds to restore), so that the
    # restore is seen under way.
    workload = generate(messages=20_000, keys=5_000, malformed=0, seed=36)
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, workload.records))
    first = WorkerProcess(settings, tmp_path / "w1.log").start()
    try:
        report = asyncio.run(wait_until_verified(settings, timeout=180, worker=first))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
    finally:
        first.kill()  # unclean: the next start says so
    for db in settings.runtime.data_dir.rglob("*.db"):  # a lost disk: a full rebuild
        shutil.rmtree(db)
    mode = guarantee(first.log())
    offsets, ends = changelog_of(settings, mode)

    second = WorkerProcess(settings, tmp_path / "w2.log").start()
    ready: list[tuple[int, Any]] = []
    health: list[int] = []
    gauges: list[dict[tuple[str, int], float]] = []  # while not ready
    try:
        deadline = time.monotonic() + 180
        while True:
            assert time.monotonic() < deadline, second.log()[-3000:]
            second.check_alive()
            status, body = get(f"{base}/ready")
            if status:
                ready.append((status, body))
                health.append(get(f"{base}/health")[0])
            if status == 200:
                break
            if status == 503:  # (each time: a short restore is over within a few)
                gauges.append(gauge_of(get(f"{base}/metrics")[1]))
            time.sleep(0.02)
        log = second.log()
        metrics = get(f"{base}/metrics")[1]
    finally:
        code = second.stop()
    assert code == 0, second.log()[-3000:]

    # The worker rebuilt its state, partition by partition, saying how far.
    assert "did not stop cleanly" in log, log[-3000:]
    progress = [m for m in PROGRESS.findall(log) if m[0] == changelog]
    restored = {int(p): number(n) for topic, p, n, _ in RESTORED.findall(log) if topic == changelog}
    assert set(restored) == {0, 1}, log[-3000:]
    totals = {int(p): number(total) for _, p, _, total, _, _ in progress}
    assert set(totals) == {0, 1} and totals == restored, (progress, restored)
    assert all(number(done) <= number(total) for _, _, done, total, _, _ in progress)
    states = [b["state"] if isinstance(b, dict) and "state" in b else s for s, b in ready]
    seen = [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]
    print(f"restored {restored}, {len(progress)} progress lines; /ready: {seen}")  # (with -s)

    # /ready: 503 saying it restores while it does (the first line is out
    # when it starts reading), then 200 once it runs; /health 200 throughout.
    said = [body for status, body in ready if status == 503 and isinstance(body, dict)]
    assert said and all(b["ready"] is False for b in said), ready[:5]
    restoring = [b for b in said if b["state"] == "restoring" and any(b["remaining"].values())]
    assert restoring, said
    assert set(restoring[0]["remaining"]) <= {f"{changelog}/0", f"{changelog}/1"}
    assert ready[-1] == (200, {"ready": True}), ready[-1]
    assert health and set(health) == {200}, health

    # The gauge: what is left while it restores, 0 for every partition once
    # restored.
    assert any(v > 0 for g in gauges for k, v in g.items() if k[0] == changelog), gauges
    assert gauge_of(metrics) == {(changelog, 0): 0.0, (changelog, 1): 0.0}, metrics

    # Once restored, per partition: the whole changelog partition replayed,
    # and the counter of replayed records says as much; the local state is
    # the changelog's (applied a fetch at a time: adapter.recovery.BatchRestore).
    check_rebuilt(log, mode, offsets, ends)
    isolation = "read_committed" if mode == "exactly_once" else "read_uncommitted"
    assert local_state(settings.runtime.data_dir) == changelog_state(settings, isolation)
    total = sum(len(o) for o in offsets.values())
    assert f'seqkeeper_changelog_replayed_total{{role="active"}} {total}.0' in metrics, metrics
    assert 'seqkeeper_changelog_replayed_total{role="standby"} 0.0' in metrics, metrics


def test_a_restart_replays_what_its_local_state_lacks(make_settings, tmp_path: Path) -> None:
    """Per partition, replayed == end - (local offset + 1): 0 after a clean
    stop, every record once the data directory is gone."""
    settings: Settings = make_settings()
    asyncio.run(create_topics(settings.broker.bootstrap, settings.topics(), 2))
    partitions = set(range(settings.broker.partitions))
    workload = generate(messages=2_000, keys=200, malformed=0, seed=361)
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, workload.records))

    def run(name: str) -> str:
        """A worker started and stopped once restored; its log."""
        worker = WorkerProcess(settings, tmp_path / f"{name}.log").start()
        try:
            worker.wait_ready(timeout=180)
        finally:
            code = worker.stop()
        assert code == 0, worker.log()[-3000:]
        return worker.log()

    # A first start: no local state, an empty changelog.
    first = WorkerProcess(settings, tmp_path / "w1.log").start()
    try:
        report = asyncio.run(wait_until_verified(settings, timeout=180, worker=first))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
    finally:
        code = first.stop()
    assert code == 0, first.log()[-3000:]
    replays = replayed(first.log())
    assert set(replays) == partitions, first.log()[-3000:]
    # 0, no local state
    assert all((r.count, r.local) == (0, None) for r in replays.values()), replays
    mode = guarantee(first.log())

    # A clean restart: the local state ends where the changelog does.
    offsets, ends = changelog_of(settings, mode)
    log = run("w2")
    replays = replayed(log)
    assert set(replays) == partitions, log[-3000:]
    for p, r in replays.items():
        assert ends[p] > 0 and r.local is not None, (p, r, ends)
        assert r.count == ends[p] - (r.local + 1) == 0, (p, r, ends)
    assert "table state: replayed 0 changelog records (0 active, 0 standby)" in log

    # The data directory gone: every record of every partition.
    shutil.rmtree(settings.runtime.data_dir)
    offsets, ends = changelog_of(settings, mode)
    check_rebuilt(run("w3"), mode, offsets, ends)
