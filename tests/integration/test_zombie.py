"""A zombie under exactly_once: worker A is frozen (SIGSTOP) past its session
timeout while input keeps flowing, worker B takes every partition over (its
transactional producers fence A's and abort A's open transaction), then A is
resumed. A must find itself fenced (a ``fenced:`` line, exit code 3) and
nothing it does after may show: a read_committed reader of the outputs sees
every message once, in per-key order, once B has processed everything; B
stops cleanly."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

import pytest

from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.fleet.poll import poll
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.verification.scenarios.zombie import zombie_problems
from seqkeeper.verification.verify import Report
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker
from tests.integration.replays import committed_writes, local_state

pytestmark = pytest.mark.integration


async def committed_outputs(settings: Settings) -> int:
    """Records a read_committed reader sees in the ordered output."""
    bootstrap, topic = settings.broker.bootstrap, settings.ordered.ordered_topic
    return len(await read_topic(bootstrap, topic, isolation="read_committed"))


def grows(settings: Settings, since: int, timeout: float, worker: WorkerProcess) -> int:
    """Wait until the committed ordered output holds more than ``since``
    records; the count then (``since`` when it did not grow in time)."""
    return asyncio.run(
        poll(
            lambda: committed_outputs(settings),
            lambda n: n > since,
            time.monotonic() + timeout,
            0.5,
            alive=worker.check_alive,
        )
    )


def test_a_frozen_worker_is_fenced_and_its_writes_never_show(
    broker: Broker, make_settings, tmp_path: Path
) -> None:
    if broker.is_tansu:
        pytest.skip("the embedded broker has no transactions (tests/integration/test_guarantee.py)")
    settings = make_settings(partitions=3, gap_timeout=600.0, processing_guarantee="exactly_once")
    session = settings.runtime.session_timeout
    assert session <= 10  # (the freeze below outlasts it)
    asyncio.run(
        create_topics(settings.broker.bootstrap, settings.topics(), settings.broker.partitions)
    )
    w = generate(messages=6000, keys=60, malformed=6, seed=13)
    n = len(w.records)
    first, rest = w.records[: n // 3], w.records[n // 3 :]
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, first))

    # input keeps flowing while A works, while it is frozen, and after
    def flow() -> None:
        batches = 40
        for i in range(batches):
            part = rest[i * len(rest) // batches : (i + 1) * len(rest) // batches]
            asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, part))
            time.sleep(0.75)

    a = WorkerProcess(settings.with_overrides(data_dir=tmp_path / "a"), tmp_path / "a.log")
    b = WorkerProcess(settings.with_overrides(data_dir=tmp_path / "b"), tmp_path / "b.log")
    publisher = threading.Thread(target=flow, daemon=True)
    a.start()
    try:
        a.wait_ready()
        publisher.start()
        assert grows(settings, 0, 120, a) > 0, "A wrote nothing"
        time.sleep(1.0)  # A in the middle of its work
        assert a.proc is not None
        a.proc.send_signal(signal.SIGSTOP)
        time.sleep(session + 3.0)  # past A's session: the group drops it
        before = asyncio.run(committed_outputs(settings))
        b.start()
        b.wait_ready()
        assert grows(settings, before, 120, b) > before, "B wrote nothing"
        a.proc.send_signal(signal.SIGCONT)
        # within 60 s: a 'fenced:' line and a fenced worker's exit code (FENCED_EXIT)
        assert zombie_problems(a, 60.0) == [], a.log()[-4000:]
        # no clean stop (A's next start says so), and A's local state holds
        # nothing its aborted transaction wrote: every entry was written by
        # a committed changelog record (its next start keeps it)
        assert (tmp_path / "a" / "worker.running").exists()
        kept = local_state(tmp_path / "a")
        committed = committed_writes(settings)
        assert any(kept.values()), kept.keys()
        for partition, entries in kept.items():
            stray = set(entries.items()) - committed.get(partition, set())
            assert not stray, (partition, sorted(stray)[:5])
        publisher.join()
        report: Report = asyncio.run(
            wait_until_verified(settings, timeout=180, worker=b, isolation="read_committed")
        )
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        assert report.valid_messages >= 6000
        assert report.reemitted == {"ordered": 0, "deduped": 0, "dlq": 0}, report.reemitted
        assert "processing guarantee: exactly_once" in b.log()
    finally:
        if a.running():
            a.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            a.kill()
        code_b = b.stop()
    assert code_b == 0, f"B's clean stop exited {code_b}; its log ends:\n{b.log()[-3000:]}"
