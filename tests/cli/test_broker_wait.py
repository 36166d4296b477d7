"""A worker that waits for its broker.

Unreachable at start: one line per attempt naming the address and the next
delay (capped backoff), for up to ``SEQKEEPER_BROKER_WAIT`` seconds; then
exit 1 with a line naming the address, no traceback. Lost mid-run: the
worker keeps running and processes new input once the broker is back.

The tests with a broker start their own (Apache Kafka from ``KAFKA_HOME``
when set, else the embedded one): it must listen on a port chosen before it
exists, or be frozen while the worker runs.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError

from seqkeeper.broker import (
    EmbeddedBroker,
    KafkaBroker,
    LocalBroker,
    free_port,
    kafka_home_from_env,
)
from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.wait import (
    BrokerUnreachable,
    backoff,
    broker_answers,
    parse_seconds,
    retry_line,
    wait_for_broker,
)
from seqkeeper.worker import WorkerProcess

#: What the worker prints once its topics exist, just before Faust starts.
READY = "seqkeeper worker: broker "

# -- the schedule and the loop, without a broker ------------------------------


def test_backoff_doubles_from_half_a_second_to_ten() -> None:
    delays = backoff()
    assert [next(delays) for _ in range(8)] == [0.5, 1, 2, 4, 8, 10, 10, 10]
    custom = backoff(first=1, factor=3, cap=5)
    assert [next(custom) for _ in range(4)] == [1, 3, 5, 5]


def test_wait_setting_default_env_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEQKEEPER_BROKER_WAIT", raising=False)
    assert Settings().broker.broker_wait == 300
    monkeypatch.setenv("SEQKEEPER_BROKER_WAIT", "2.5")
    assert Settings().broker.broker_wait == 2.5
    assert Settings().to_env()["SEQKEEPER_BROKER_WAIT"] == "2.5"
    assert parse_seconds("X", "0") == 0
    assert math.isinf(parse_seconds("X", "inf"))
    for bad in ("abc", "-1", "nan", ""):
        with pytest.raises(ValueError, match="SEQKEEPER_BROKER_WAIT must be a non-negative"):
            parse_seconds("SEQKEEPER_BROKER_WAIT", bad)


class FakeTime:
    """A clock that only the loop's sleeps move (plus a cost per attempt)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += delay


def run_wait(limit: float, failures: int | None, error: Exception | None = None):
    """Run :func:`wait_for_broker` on fake time with an attempt that fails
    ``failures`` times (``None``: always), each costing 0.1 s; the result
    (or the exception), the lines logged, the sleeps and the attempts."""
    fake, lines, attempts = FakeTime(), [], []

    async def attempt() -> str:
        attempts.append(fake.now)
        fake.now += 0.1
        if failures is None or len(attempts) <= failures:
            raise error or KafkaConnectionError("Unable to bootstrap from [('h', 1)]")
        return "up"

    async def main() -> object:
        try:
            return await wait_for_broker(
                "h:1", limit, attempt, clock=fake.clock, sleep=fake.sleep, say=lines.append
            )
        except Exception as exc:
            return exc

    return asyncio.run(main()), lines, fake.sleeps, attempts


def test_wait_logs_each_failed_attempt_and_returns_once_the_broker_answers() -> None:
    result, lines, sleeps, attempts = run_wait(limit=300, failures=7)
    assert result == "up"
    assert len(attempts) == 8 and len(lines) == 7
    assert sleeps == [0.5, 1, 2, 4, 8, 10, 10]
    assert lines[0] == retry_line(
        "h:1", "KafkaConnectionError: Unable to bootstrap from [('h', 1)]", 0.5, 0.1, 300
    )
    assert lines[0] == (
        "broker h:1 unreachable (KafkaConnectionError: Unable to bootstrap from [('h', 1)]); "
        "retrying in 0.5s (waited 0.1s of 300s)"
    )
    assert all(line.startswith("broker h:1 unreachable (") for line in lines)
    assert "retrying in 10s (waited 26.2s of 300s)" in lines[-1]


def test_wait_gives_up_at_the_limit_with_the_address() -> None:
    result, lines, sleeps, attempts = run_wait(limit=20, failures=None)
    assert isinstance(result, BrokerUnreachable)
    assert str(result) == "no Kafka broker answered at h:1 within 20s (SEQKEEPER_BROKER_WAIT)"
    assert isinstance(result.last, KafkaConnectionError)
    # the last delay is cut short: the last attempt falls on the limit
    assert sleeps[:5] == [0.5, 1, 2, 4, 8]
    assert len(sleeps) == 6 and sleeps[5] == pytest.approx(20 - 15.5 - 6 * 0.1)
    assert attempts[-1] - attempts[0] == pytest.approx(20)
    assert len(lines) == len(sleeps) == len(attempts) - 1


def test_wait_of_zero_tries_once() -> None:
    result, lines, sleeps, attempts = run_wait(limit=0, failures=None)
    assert isinstance(result, BrokerUnreachable)
    assert (len(attempts), lines, sleeps) == (1, [], [])


def test_retriable_kafka_errors_are_waited_out_others_are_not() -> None:
    result, lines, _, _ = run_wait(limit=60, failures=2, error=NodeNotReadyError("starting"))
    assert result == "up" and len(lines) == 2
    assert "(NodeNotReadyError: starting)" in lines[0]
    result, lines, sleeps, attempts = run_wait(limit=60, failures=5, error=ValueError("bad"))
    assert isinstance(result, ValueError)
    assert (len(attempts), lines, sleeps) == (1, [], [])


# -- the worker process ---------------------------------------------------------


def worker_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQKEEPER_")}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    return {**env, **extra}


def test_gives_up_after_the_wait_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = worker_env(
        KAFKA_BOOTSTRAP_SERVERS=address,
        SEQKEEPER_BROKER_WAIT="3",
        SEQKEEPER_DATA_DIR=str(tmp_path / "data"),
    )
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "seqkeeper", "worker"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    took = time.monotonic() - began
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 1, out + err
    assert "Traceback" not in out + err
    assert err.strip() == (
        f"error: no Kafka broker answered at {address} within 3s (SEQKEEPER_BROKER_WAIT)"
    ), err
    retries = [line for line in out.splitlines() if line]
    assert len(retries) >= 3, out
    assert all(line.startswith(f"broker {address} unreachable (") for line in retries), out
    assert re.search(r"; retrying in 0\.5s \(waited [\d.]+s of 3s\)$", retries[0]), out
    assert 3 <= took < 30


def test_a_bad_wait_setting_is_one_line(tmp_path: Path) -> None:
    env = worker_env(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", SEQKEEPER_BROKER_WAIT="soon")
    done = subprocess.run(
        [sys.executable, "-m", "seqkeeper", "worker"], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.decode().strip() == (
        "error: SEQKEEPER_BROKER_WAIT='soon': expected a non-negative number of seconds"
    )


def own_broker(port: int | None, log_path: Path) -> LocalBroker:
    """Apache Kafka from ``KAFKA_HOME`` when set, else the embedded broker."""
    home = kafka_home_from_env()
    if home:
        return KafkaBroker(home, port=port, log_path=log_path)
    return EmbeddedBroker(port=port, log_path=log_path)


@pytest.fixture
def settings(names: dict[str, str], tmp_path: Path) -> Settings:
    """Worker settings with unique names; the broker is set by each test."""
    return Settings.of(
        bootstrap="",
        kafka_home="",
        data_dir=tmp_path / "data",
        partitions=2,
        session_timeout=6.0,  # the embedded broker joins a group in half of it
        gap_timeout=120.0,
        broker_wait=180.0,
        **names,
    )


def wait_for_log(worker: WorkerProcess, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in worker.log():
        worker.check_alive()
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{worker.log()[-3000:]}"
        time.sleep(0.2)


def verified(settings: Settings, worker: WorkerProcess, timeout: float = 180) -> None:
    report = asyncio.run(wait_until_verified(settings, timeout=timeout, worker=worker))
    assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
    assert report.ordered_records > 0


@pytest.fixture
def worker_stopped() -> Iterator[list[WorkerProcess]]:
    """Workers a test started, stopped at its end even when it fails."""
    workers: list[WorkerProcess] = []
    yield workers
    for w in workers:
        w.stop()


@pytest.mark.integration
def test_waits_for_a_broker_that_starts_late(
    settings: Settings, tmp_path: Path, worker_stopped: list[WorkerProcess]
) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    s = settings.with_overrides(bootstrap=address)
    worker = WorkerProcess(s, tmp_path / "worker.log").start()
    worker_stopped.append(worker)
    # it retries, naming the address and the next delay ...
    wait_for_log(worker, f"broker {address} unreachable (", timeout=30)
    wait_for_log(worker, "retrying in 2s", timeout=30)
    assert READY not in worker.log()
    with own_broker(port, tmp_path / "broker.log"):
        # ... and once the broker answers, creates its topics and runs
        wait_for_log(worker, READY, timeout=120)
        assert "Traceback" not in worker.log()
        work = generate(messages=400, keys=10, malformed=2, seed=32)
        asyncio.run(publish(s.broker.bootstrap, s.ordered.input_topic, work.records))
        verified(s, worker)
        worker.check_alive()
        code = worker.stop()
    assert code == 0, worker.log()[-3000:]


@pytest.mark.integration
def test_survives_a_broker_lost_mid_run(
    settings: Settings, tmp_path: Path, worker_stopped: list[WorkerProcess]
) -> None:
    work = generate(messages=800, keys=10, malformed=4, seed=33)
    cut = len(work.records) // 2
    with own_broker(None, tmp_path / "broker.log") as broker:
        s = settings.with_overrides(bootstrap=broker.bootstrap)
        asyncio.run(create_topics(s.broker.bootstrap, s.topics(), s.broker.partitions))
        asyncio.run(publish(s.broker.bootstrap, s.ordered.input_topic, work.records[:cut]))
        worker = WorkerProcess(s, tmp_path / "worker.log").start()
        worker_stopped.append(worker)
        verified(s, worker)
        broker.pause()  # gone for 15 s: every request of the worker times out
        try:
            time.sleep(15)
            worker.check_alive()
        finally:
            broker.resume()
        # Apache Kafka's controller fenced its own broker during the freeze
        # (no heartbeat for 15 s): until it is unfenced, metadata names no
        # broker, and this test's own clients would fail on that
        asyncio.run(
            wait_for_broker(s.broker.bootstrap, 60, lambda: broker_answers(s.broker.bootstrap))
        )
        asyncio.run(publish(s.broker.bootstrap, s.ordered.input_topic, work.records[cut:]))
        verified(s, worker)
        worker.check_alive()
        code = worker.stop()
    assert code == 0, worker.log()[-3000:]
