"""Every command that uses a running cluster reads its address as the
worker does: ``KAFKA_BOOTSTRAP_SERVERS`` alone, no ``-b`` (the docs export
it, then call ``verify`` and ``compact``); without either, one line and
exit 2. Run as the user does: ``python -m seqkeeper`` in a subprocess."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable

import orjson
import pytest

from seqkeeper.broker import free_port
from seqkeeper.demo import publish
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "seqkeeper", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def environment(settings: Settings) -> dict[str, str]:
    """The process's environment with ``settings`` as variables (the broker's
    address in ``KAFKA_BOOTSTRAP_SERVERS``, as the docs export it)."""
    env = {**os.environ, **settings.to_env()}
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == settings.broker.bootstrap
    return env


@pytest.mark.integration
def test_verify_and_compact_take_the_broker_from_the_environment(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings()
    o = settings.ordered
    # (on this broker only: the names are the test's)
    w = generate(messages=30, keys=3, malformed=0, seed=1)
    asyncio.run(create_topics(settings.broker.bootstrap, settings.ordered.topics()[:4], 1))
    asyncio.run(publish(settings.broker.bootstrap, o.input_topic, w.records))
    env = environment(settings)

    done = run_cli(["verify", "--json"], env)
    # it read the input there: every message is missing from the (empty) outputs
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    report = orjson.loads(done.stdout)
    assert report["input_records"] == len(w.records) and not report["ok"], report
    assert "Traceback" not in done.stderr, done.stderr[-2000:]

    # compact: an app id with no topic there: it looked, found none, and
    # started no Spark for nothing
    for name in [n for n in env if n.endswith("_TOPIC")] + ["SEQKEEPER_APP_ID"]:
        env[name] = f"{env[name]}-none"
    done = run_cli(["compact", "--warehouse", str(settings.runtime.data_dir / "wh")], env)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip() == "no seqkeeper topics on this broker: nothing to compact", (
        done.stdout[-2000:]
    )
    assert done.stderr == "", done.stderr[-2000:]


@pytest.mark.parametrize("command", ["verify", "compact", "inspect", "replay", "send"])
def test_without_a_broker_it_is_one_line(command: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    args = {
        "verify": ["verify"],
        "compact": ["compact"],
        "inspect": ["inspect", "--message-id", "m1"],
        "replay": ["replay", "--topic", "t"],
        "send": ["send", "--type", "T", "--key", "k"],
    }[command]
    done = run_cli(args, env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: no broker: give --broker or set KAFKA_BOOTSTRAP_SERVERS (the workers' cluster)"
    ], done.stderr


@pytest.mark.parametrize("command", ["verify", "compact", "inspect", "replay"])
def test_a_broker_that_does_not_answer_is_one_error_line(command: str) -> None:
    """No traceback, no "Unclosed AIOKafkaConsumer": the address named, exit 2
    (aiokafka's own "Unable connect" line is kept: not a security failure)."""
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    args = {
        "verify": ["verify"],
        "compact": ["compact"],
        "inspect": ["inspect", "--message-id", "m1", "--web-port", "0"],
        "replay": ["replay", "--topic", "t"],
    }[command]
    done = run_cli([*args, "-b", nobody], dict(os.environ))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "Unclosed" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: cannot reach a Kafka broker at {nobody}"], done.stderr
