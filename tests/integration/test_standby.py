"""Standby replicas (``SEQKEEPER_STANDBY_REPLICAS``): each worker
keeps a warm copy of the other's partitions, applied a fetch at a time;
when one is killed, the survivor's restore of the partitions it takes over
replays only what its copy lacked, and nothing is lost or out of order.
Counted in records and offsets, never in seconds."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import pytest

from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.integration.replays import changelog_of, guarantee, number

pytestmark = pytest.mark.integration

LINE = re.compile(
    r"table state: partition (\d+) \((active|standby)\) replayed ([\d,]+) changelog records"
    r"(?:, offsets ([\d,]+) → ([\d,]+))?"
)


def lines(log: str) -> list[tuple[int, str, int, int | None, int | None]]:
    """(partition, role, count, first, last) of each replay line, in order."""
    return [
        (int(p), role, number(n), number(a) if a else None, number(b) if b else None)
        for p, role, n, a, b in LINE.findall(log)
    ]


TOTAL = re.compile(r"table state: replayed \d+ changelog records \(")


def last_report(log: str) -> list[tuple[int, str, int, int | None, int | None]]:
    """The replay lines of the last completed recovery in ``log`` (its
    assignment now: a worker alone in the group had every partition)."""
    reports = TOTAL.split(log)
    return lines(reports[-2]) if len(reports) > 1 else []


def wait_until(predicate, worker: WorkerProcess, message: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        worker.check_alive()
        assert time.monotonic() < deadline, message
        time.sleep(0.25)


def test_a_standby_takes_over_replaying_only_what_its_copy_lacks(
    make_settings, tmp_path: Path
) -> None:
    base: Settings = make_settings(partitions=2, standby_replicas=1, session_timeout=6.0)
    bootstrap = base.broker.bootstrap
    asyncio.run(create_topics(bootstrap, base.topics(), base.broker.partitions))
    w = generate(messages=8_000, keys=200, malformed=0, seed=366)
    first, rest = w.records[: len(w.records) // 2], w.records[len(w.records) // 2 :]
    a = WorkerProcess(base.with_overrides(data_dir=tmp_path / "a"), tmp_path / "a.log")
    b = WorkerProcess(base.with_overrides(data_dir=tmp_path / "b"), tmp_path / "b.log")
    asyncio.run(publish(bootstrap, base.ordered.input_topic, first))
    a.start()
    b.start()
    try:
        # both in the group, each active for one partition, standby for the other
        wait_until(
            lambda: (
                any(role == "standby" for _, role, *_ in lines(b.log()))
                and any(role == "standby" for _, role, *_ in lines(a.log()))
            ),
            b,
            "no standby partition in both workers",
        )
        report = asyncio.run(wait_until_verified(base, timeout=180, worker=b))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        mode = guarantee(b.log())
        owned_by_a = {p for p, role, *_ in last_report(a.log()) if role == "active"}
        assert owned_by_a and len(owned_by_a) < base.broker.partitions, lines(a.log())
        offsets, _ = changelog_of(base, mode)
        before = len(lines(b.log()))

        # more input while A works; A is killed in the middle of it
        def flow() -> None:
            for i in range(10):
                part = rest[i * len(rest) // 10 : (i + 1) * len(rest) // 10]
                asyncio.run(publish(bootstrap, base.ordered.input_topic, part))
                time.sleep(0.3)

        publisher = threading.Thread(target=flow, daemon=True)
        publisher.start()
        time.sleep(1.5)
        a.kill()
        publisher.join()
        # B takes A's partitions once A's session expires
        wait_until(
            lambda: any(
                p in owned_by_a and role == "active" for p, role, *_ in lines(b.log())[before:]
            ),
            b,
            "B never took A's partitions",
        )
        report = asyncio.run(wait_until_verified(base, timeout=180, worker=b))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
    finally:
        if a.running():
            a.kill()
        code = b.stop()
    assert code == 0, b.log()[-3000:]
    # The promoted partitions replayed a tail: records from after what the
    # standby copy held, never from the start of the changelog partition.
    promoted = [
        (p, count, first, last)
        for p, role, count, first, last in lines(b.log())[before:]
        if role == "active" and p in owned_by_a
    ]
    assert promoted, b.log()[-3000:]
    for p, count, first, _last in promoted:
        assert first is None or first > offsets[p][0], (p, count, first, offsets[p][:3])
        assert count < len(offsets[p]), (p, count, len(offsets[p]))
    print("promoted:", promoted)  # (with -s)
