"""The command-line tools on the secured broker, as ``admin`` over SASL_SSL
with the settings from the environment only: ``demo`` (its worker too) and
``inspect``; ``replay``'s publishing. ``verify`` is test_secured_kafka's
and test_mtls's; ``compact`` hands the same settings to the Spark source,
tested there too."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from seqkeeper.security import ClientSecurity
from seqkeeper.spark_sink.replay import _publish
from seqkeeper.topics import read_topic
from tests.security.test_secured_kafka import run_cli

pytestmark = pytest.mark.integration


def test_demo_and_inspect_as_admin(
    as_admin: ClientSecurity, secured_logs: Path, tmp_path: Path
) -> None:
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    tag = uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        "SEQKEEPER_APP_ID": f"cli-{tag}",
        "SEQKEEPER_COMMAND_TOPIC": f"cli-commands-{tag}",
        "SEQKEEPER_EVENTS_TOPIC": f"cli-events-{tag}",
        "SEQKEEPER_COMMAND_DLQ_TOPIC": f"cli-dlq-{tag}",
        "SEQKEEPER_DATA_DIR": str(tmp_path / "data"),
        "SEQKEEPER_PARTITIONS": "2",
    }
    demo = ["demo", "-b", bootstrap, "--topology", "commands", "--commands", "30", "--seed", "3"]
    done = run_cli(demo, env, secured_logs / "demo-commands.log")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "PASSED" in done.stdout, done.stdout[-3000:]

    inspect = ["inspect", "-b", bootstrap, "--message-id", "cmd-3-0", "--web-port", "0"]
    done = run_cli(inspect, env, secured_logs / "inspect.log")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "cmd-3-0" in done.stdout


def test_replay_publishes_as_admin(as_admin: ClientSecurity) -> None:
    """What ``replay`` sends, once Spark has selected it (its client takes
    the environment's settings)."""
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    topic = f"replayed-{uuid.uuid4().hex[:8]}"
    rows = [SimpleNamespace(key=b"k", value=orjson.dumps({"n": n})) for n in range(5)]
    assert asyncio.run(_publish(bootstrap, topic, rows, lambda n: None, None)) == 5
    replayed = asyncio.run(read_topic(bootstrap, topic))
    assert [r.value for r in sorted(replayed, key=lambda r: r.offset)] == [r.value for r in rows]
