"""A rebalance in the middle of a restore from the changelog (a second
worker joins): the worker must not start on half-restored state. Faust
cancels the overtaken recovery's completion after it started, and its
tables' callbacks ran before its generation check; the task then re-emitted
every output whose confirmation was not restored yet (under exactly_once,
duplicates a read_committed reader sees; chaos found 3,814)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

pytestmark = pytest.mark.integration


def test_a_rebalance_during_a_restore_re_emits_nothing(
    broker: Broker, make_settings, tmp_path: Path
) -> None:
    exactly_once = not broker.is_tansu
    settings = make_settings(partitions=4, gap_timeout=600.0)
    asyncio.run(create_topics(settings.broker.bootstrap, settings.topics(), 4))
    w = generate(messages=12_000, keys=400, malformed=4, seed=21)
    isolation = "read_committed" if exactly_once else "read_uncommitted"
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, w.records))

    # a changelog of some size (several records per message: seconds to restore)
    first = WorkerProcess(settings, tmp_path / "first.log").start()
    try:
        report = asyncio.run(
            wait_until_verified(settings, timeout=240, worker=first, isolation=isolation)
        )
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
    finally:
        first.kill()  # (unclean: the next start restores everything)

    a = WorkerProcess(settings, tmp_path / "a.log").start()
    b = WorkerProcess(settings.with_overrides(data_dir=tmp_path / "b"), tmp_path / "b.log")
    try:
        deadline = time.monotonic() + 120
        while "restoring " not in a.log():  # A's restore under way
            a.check_alive()
            assert time.monotonic() < deadline, a.log()[-3000:]
            time.sleep(0.1)
        b.start()  # a rebalance in the middle of A's restore
        b.wait_ready(timeout=240)
        a.wait_ready(timeout=240)
        report = asyncio.run(
            wait_until_verified(settings, timeout=240, worker=a, isolation=isolation)
        )
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        logs = a.log() + b.log()
        assert "IllegalTransition" not in logs
        if exactly_once:
            # confirmations commit with their outputs: nothing is unconfirmed
            assert "unconfirmed ordered records again" not in logs, logs[-3000:]
            assert report.reemitted == {"ordered": 0, "deduped": 0, "dlq": 0}, report.reemitted
    finally:
        code_b = b.stop() if b.running() else 0
        code_a = a.stop()
    assert (code_a, code_b) == (0, 0)
