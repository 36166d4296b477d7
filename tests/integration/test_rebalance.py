"""Two workers share the partitions; when one leaves, the other takes its
partitions with their state (rebuilt from the changelog) and the output
stays ordered, deduplicated and complete."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess

pytestmark = pytest.mark.integration


def wait_until(predicate, worker: WorkerProcess, message: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        worker.check_alive()
        assert time.monotonic() < deadline, message
        time.sleep(0.5)


def check(settings: Settings, worker: WorkerProcess) -> None:
    report = asyncio.run(wait_until_verified(settings, timeout=120, worker=worker))
    assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]


def test_partitions_move_with_their_state(make_settings, tmp_path) -> None:
    base = make_settings(partitions=4)
    a = WorkerProcess(base.with_overrides(data_dir=tmp_path / "a"), tmp_path / "a.log")
    b = WorkerProcess(base.with_overrides(data_dir=tmp_path / "b"), tmp_path / "b.log")
    asyncio.run(create_topics(base.broker.bootstrap, base.topics(), base.broker.partitions))
    w = generate(messages=3000, keys=60, malformed=6, seed=21)
    thirds = [w.records[i * len(w.records) // 3 : (i + 1) * len(w.records) // 3] for i in range(3)]
    try:
        asyncio.run(publish(base.broker.bootstrap, base.ordered.input_topic, thirds[0]))
        a.start()
        check(base, a)
        b.start()  # the group rebalances: some partitions move from a to b
        wait_until(lambda: "Worker ready" in b.log(), b, "b never got partitions while a ran")
        asyncio.run(publish(base.broker.bootstrap, base.ordered.input_topic, thirds[1]))
        check(base, b)
        assert a.stop() == 0  # b takes every partition, with a's state
        asyncio.run(publish(base.broker.bootstrap, base.ordered.input_topic, thirds[2]))
        check(base, b)
    finally:
        a.stop()
        assert b.stop() == 0
    replayed = [int(n) for n in re.findall(r"table state: replayed (\d+)", b.log())]
    assert replayed and max(replayed) > 0, "b never rebuilt state from the changelog"
