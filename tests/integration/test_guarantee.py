"""Which brokers have transactions, asked as a worker will ask: Apache
Kafka does, the embedded broker (which lists the API but answers
InitProducerId with an unknown error) does not. And the guarantee a worker
runs on each (SEQKEEPER_PROCESSING_GUARANTEE): what auto picks, exactly_once
refused where it cannot be had, said at start by ``seqkeeper worker``."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.runtime.guarantee import GuaranteeRefused, has_transactions, resolve_guarantee
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

pytestmark = pytest.mark.integration

REFUSED = "error: SEQKEEPER_PROCESSING_GUARANTEE=exactly_once needs a broker with transactions"
WAYS_OUT = "; use at_least_once or auto, or Apache Kafka (KAFKA_BOOTSTRAP_SERVERS / KAFKA_HOME)"


def test_the_broker_says_whether_it_has_transactions(broker: Broker) -> None:
    answer = asyncio.run(has_transactions(broker.bootstrap, f"probe-{uuid.uuid4().hex[:8]}"))
    assert answer is (not broker.is_tansu)


def resolve(requested: str, broker: Broker, app_id: str) -> tuple[str, str]:
    return asyncio.run(
        resolve_guarantee(requested, broker.bootstrap, app_id, embedded=broker.is_tansu, timeout=60)
    )


def test_auto_is_exactly_once_where_the_broker_has_transactions(
    broker: Broker, names: dict[str, str]
) -> None:
    if broker.is_tansu:
        expected = ("at_least_once", "auto: the broker has no transactions")
    else:
        expected = ("exactly_once", "auto: the broker supports transactions")
    assert resolve("auto", broker, names["app_id"]) == expected


def test_at_least_once_is_had_on_any_broker(broker: Broker, names: dict[str, str]) -> None:
    assert resolve("at_least_once", broker, names["app_id"]) == ("at_least_once", "requested")


def test_exactly_once_is_refused_without_transactions(
    broker: Broker, names: dict[str, str]
) -> None:
    if not broker.is_tansu:
        assert resolve("exactly_once", broker, names["app_id"]) == ("exactly_once", "requested")
        return
    with pytest.raises(GuaranteeRefused) as refused:
        resolve("exactly_once", broker, names["app_id"])
    assert str(refused.value) == (
        f"{REFUSED.removeprefix('error: ')}: the broker at {broker.bootstrap} "
        f"(the embedded broker, Tansu) answered InitProducerId with UNKNOWN_SERVER_ERROR{WAYS_OUT}"
    )


def test_the_probe_fences_no_producer_of_the_app(broker: Broker, names: dict[str, str]) -> None:
    """The probe has an id of its own: a transaction the app has open when a
    second worker starts commits afterwards."""
    if broker.is_tansu:
        pytest.skip("the embedded broker has no transactions to fence")
    app_id = names["app_id"]

    async def scenario() -> None:
        await create_topics(broker.bootstrap, [names["ordered_topic"]], 1)
        owner = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            transactional_id=f"{app_id}-{names['input_topic']}-0",
        )
        await owner.start()
        try:
            await owner.begin_transaction()
            await owner.send_and_wait(names["ordered_topic"], b"v", key=b"k")
            mode = await resolve_guarantee("auto", broker.bootstrap, app_id, embedded=False)
            assert mode[0] == "exactly_once"
            await owner.commit_transaction()  # raises ProducerFenced if the probe fenced it
        finally:
            await owner.stop()

    asyncio.run(scenario())


# -- the worker says which guarantee it runs, or refuses to start ---------------


def worker_in(tmp_path: Path, settings: Settings) -> WorkerProcess:
    """``seqkeeper worker`` as installed, run in ``tmp_path``."""
    return WorkerProcess(settings, tmp_path / "worker.log", cwd=tmp_path)


def run_to_exit(worker: WorkerProcess, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        worker.command(), env=env, cwd=worker.cwd, capture_output=True, text=True, timeout=180
    )


def said(worker: WorkerProcess, line: str, timeout: float = 120.0) -> str:
    """The worker's log once it has ``line`` (then the worker is stopped, so
    nothing after that line is asked of it); fails if it exits first."""
    worker.start()
    try:
        deadline = time.monotonic() + timeout
        while line not in worker.log():
            worker.check_alive()
            assert time.monotonic() < deadline, f"not said in {timeout:g} s: {worker.log()[-3000:]}"
            time.sleep(0.2)
        return worker.log()
    finally:
        # a SIGTERM this early may be lost (the KeyboardInterrupt it raises is
        # swallowed when it lands in a finaliser): SIGKILL follows
        worker.stop(timeout=10)


def refused(result: subprocess.CompletedProcess[str], bootstrap: str, which: str) -> None:
    """``result`` is a worker's refusal of exactly_once: exit 1, one line."""
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith(REFUSED)]
    assert lines == [
        f"{REFUSED}: the broker at {bootstrap}{which} answered InitProducerId with "
        f"UNKNOWN_SERVER_ERROR{WAYS_OUT}"
    ], result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_the_worker_runs_exactly_once_only_where_it_can(
    broker: Broker, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = make_settings(processing_guarantee="exactly_once")
    worker = worker_in(tmp_path, settings)
    if broker.is_tansu:
        refused(run_to_exit(worker, worker.environment()), broker.bootstrap, "")
    else:
        said(worker, "processing guarantee: exactly_once (requested)")


def test_the_worker_says_which_guarantee_and_fetch_wait_auto_chose(
    broker: Broker, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """And the fetch wait that goes with it: Kafka's own where the broker
    answers a waiting fetch when records arrive, the short one on the
    embedded broker, which holds it to the end."""
    worker = worker_in(tmp_path, make_settings(processing_guarantee="auto"))
    if broker.is_tansu:
        log = said(worker, "fetch max wait: 0.02 s (auto, at_least_once: ")
        assert "processing guarantee: at_least_once (auto: the broker has no transactions)" in log
    else:
        log = said(worker, "fetch max wait: 0.5 s (auto, exactly_once: ")
        assert "processing guarantee: exactly_once (auto: the broker supports transactions)" in log


def test_a_worker_on_its_own_embedded_broker_says_which_broker_refused(
    names: dict[str, str], tmp_path: Path
) -> None:
    """With no broker configured, the worker starts the embedded one; its
    refusal of exactly_once names it."""
    settings = Settings.of(data_dir=tmp_path / "data", processing_guarantee="exactly_once", **names)
    worker = worker_in(tmp_path, settings)
    env = {**worker.environment(), "KAFKA_BOOTSTRAP_SERVERS": "", "KAFKA_HOME": ""}
    result = run_to_exit(worker, env)
    started = [line for line in result.stdout.splitlines() if line.startswith("embedded broker")]
    assert len(started) == 1, result.stdout + result.stderr
    bootstrap = started[0].rsplit(" at ", 1)[1]
    refused(result, bootstrap, " (the embedded broker, Tansu)")
