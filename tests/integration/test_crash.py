"""kill -9 against a real broker: a restarted worker loses nothing, keeps
per-key order, and what it emits again is byte-identical (counted)."""

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


@pytest.mark.parametrize("guarantee", ["auto", "at_least_once"])
def test_kill_9_while_processing_loses_nothing(
    make_settings, tmp_path, broker: Broker, guarantee: str
) -> None:
    """``auto`` is exactly_once on Apache Kafka (tests/integration/test_exactly_once.py
    also counts its re-emissions: none) and at_least_once on the embedded
    broker; at_least_once runs on Apache Kafka too."""
    if guarantee == "at_least_once" and broker.is_tansu:
        pytest.skip("auto is at_least_once on the embedded broker")
    settings = make_settings(partitions=3, gap_timeout=600.0, processing_guarantee=guarantee)
    asyncio.run(
        create_topics(settings.broker.bootstrap, settings.topics(), settings.broker.partitions)
    )
    w = generate(messages=6000, keys=60, malformed=6, seed=5)
    kills = 3
    n = len(w.records)
    waves = [w.records[i * n // (kills + 1) : (i + 1) * n // (kills + 1)] for i in range(kills + 1)]
    rng = random.Random(5)
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
        report = asyncio.run(wait_until_verified(settings, timeout=180, worker=final))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        assert report.valid_messages >= 6000
    finally:
        assert final.stop() == 0
    # every restart after a kill discarded its local state and rebuilt it
    assert all("did not stop cleanly" in log for log in [*logs[1:], final.log()])
    mode = "exactly_once" if guarantee == "auto" and not broker.is_tansu else "at_least_once"
    assert all(f"processing guarantee: {mode}" in log for log in [*logs, final.log()])
    print("re-emitted:", report.reemitted)
