"""Exactly-once on a broker with transactions: under ``kill -9`` a
``read_committed`` reader of the outputs sees each of them once (no
re-emission, not even an identical one), nothing lost, per-key order kept."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

pytestmark = pytest.mark.integration


@pytest.fixture
def transactional(broker: Broker) -> None:
    if broker.is_tansu:
        pytest.skip("the embedded broker has no transactions (tests/integration/test_guarantee.py)")


def test_kill_9_re_emits_nothing_under_read_committed(
    transactional: None, make_settings, tmp_path
) -> None:
    settings = make_settings(partitions=3, gap_timeout=600.0, processing_guarantee="exactly_once")
    asyncio.run(
        create_topics(settings.broker.bootstrap, settings.topics(), settings.broker.partitions)
    )
    w = generate(messages=6000, keys=60, malformed=6, seed=7)
    kills = 3
    n = len(w.records)
    waves = [w.records[i * n // (kills + 1) : (i + 1) * n // (kills + 1)] for i in range(kills + 1)]
    rng = random.Random(7)
    logs = []
    for i in range(kills):
        asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, waves[i]))
        worker = WorkerProcess(settings, tmp_path / f"killed-{i}.log").start()
        worker.wait_ready()
        time.sleep(rng.uniform(0.5, 2.5))  # in the middle of the wave
        worker.kill()
        logs.append(worker.log())
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, waves[kills]))
    final = WorkerProcess(settings, tmp_path / "final.log").start()
    try:
        report = asyncio.run(
            wait_until_verified(settings, timeout=180, worker=final, isolation="read_committed")
        )
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        assert report.valid_messages >= 6000
        assert report.reemitted == {"ordered": 0, "deduped": 0, "dlq": 0}, report.reemitted
    finally:
        assert final.stop() == 0
    assert all("processing guarantee: exactly_once" in log for log in [*logs, final.log()])
