"""A worker whose messages are shaped (the sequence key a field of the value,
so its repartition stage runs; the sequence in a header; the messageId a
nested field), on a real broker: :func:`wait_until_verified` and
``seqkeeper verify`` check its topics in the shape its settings give (the
environment, or the flags), with no re-keying of the input by the caller;
read in the default shape the same topics fail."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.demo import verify_topics, wait_until_verified
from seqkeeper.processors.envelope import Shape
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.integration.test_message_shapes import produce
from tests.verification.test_verify_shapes import reshape

pytestmark = pytest.mark.integration

SHAPE = Shape(key_path=("account", "id"), seq_header="x-seq", id_path=("meta", "id"))
#: The worker's settings for :data:`SHAPE`, as flags and as variables.
FLAGS = {"key_field": "account.id", "seq_header": "x-seq", "message_id_field": "meta.id"}
ENV = {
    "SEQKEEPER_KEY_FIELD": "account.id",
    "SEQKEEPER_SEQ_HEADER": "x-seq",
    "SEQKEEPER_MESSAGE_ID_FIELD": "meta.id",
}


def cli_verify(settings: Settings, *args: str, env: dict[str, str | None]) -> dict:
    """``seqkeeper verify --drained --json`` on ``settings``' topics; the report."""
    o = settings.ordered
    topics = [
        *("--input-topic", o.input_topic, "--ordered-topic", o.ordered_topic),
        *("--deduped-topic", o.deduped_topic, "--dlq-topic", o.dlq_topic),
        *("--late-topic", o.late_topic),
    ]
    result = CliRunner().invoke(
        app,
        ["verify", "-b", settings.broker.bootstrap, *topics, "--drained", "--json", *args],
        env=env,
    )
    doc = orjson.loads(result.output)
    assert result.exit_code == (0 if doc["ok"] else 1), result.output
    return doc


def test_a_shaped_worker_is_verified_in_its_shape(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = make_settings(**FLAGS)
    assert settings.ordered.shape() == SHAPE
    bootstrap = settings.broker.bootstrap
    asyncio.run(create_topics(bootstrap, settings.topics(), 2))
    w = generate(messages=400, keys=10, malformed=12, seed=9)
    # keyed by something else, each key's messages over both partitions
    records = reshape(w.records, SHAPE, random.Random(9))
    assert len({r.partition for r in records if r.value and b"key-00001" in r.value}) == 2
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        asyncio.run(
            produce(
                bootstrap,
                settings.ordered.input_topic,
                [(r.partition, r.key, r.value, list(r.headers)) for r in records],
            )
        )
        report = asyncio.run(wait_until_verified(settings, 120, worker, drained=True))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
    finally:
        assert worker.stop() == 0
    assert report.valid_messages == w.messages and report.redeliveries == w.duplicates
    # the same topics, read as messages of the default shape, fail
    default = settings.with_overrides(key_field="", seq_header="", message_id_field="messageId")
    assert not asyncio.run(verify_topics(default, drained=True)).ok
    # `seqkeeper verify`: the shape from the environment, or from flags
    unset: dict[str, str | None] = dict.fromkeys(ENV)
    assert cli_verify(settings, env=ENV)["ok"] is True
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in FLAGS.items()]
    assert cli_verify(settings, *flags, env=unset)["ok"] is True
    assert cli_verify(settings, env=unset)["ok"] is False
