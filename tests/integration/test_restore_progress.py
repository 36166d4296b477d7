"""A restore from the changelog, seen from outside (issue 36, part 3): the
worker says per partition how far it is (log lines with totals and an ETA,
the ``seqkeeper_restore_remaining_records`` gauge), ``/ready`` answers 503
while it restores and 200 once it runs, and ``/health`` answers 200
throughout."""

from __future__ import annotations

import asyncio
import json
import re
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

pytestmark = pytest.mark.integration

PROGRESS = re.compile(
    r"restoring (\S+)/(\d+): ([\d,]+) of ([\d,]+) records \((\d+) %\), "
    r"(about \d+ (?:s|min) left|time left not known yet)"
)
RESTORED = re.compile(r"restored (\S+)/(\d+): ([\d,]+) records in ([\d.]+) s")
GAUGE = re.compile(
    r'^seqkeeper_restore_remaining_records\{partition="(\d+)",topic="([^"]+)"\} (\S+)$', re.M
)


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


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_a_rebuild_from_the_changelog_shows_its_progress(make_settings, tmp_path: Path) -> None:
    port = free_port()
    settings: Settings = make_settings(web_port=port)
    asyncio.run(create_topics(settings.broker.bootstrap, settings.topics(), 2))
    changelog = f"{settings.group_id}-state-changelog"
    base = f"http://127.0.0.1:{port}"

    # A changelog of some size (about five records per message: some
    # 60,000, seconds to restore), so that the restore is seen under way.
    workload = generate(messages=12_000, keys=3_000, malformed=0, seed=36)
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, workload.records))
    first = WorkerProcess(settings, tmp_path / "w1.log").start()
    try:
        report = asyncio.run(wait_until_verified(settings, timeout=180, worker=first))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
    finally:
        first.kill()  # unclean: the next start discards the local state

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
            if status and len(ready) % 5 == 0:
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
