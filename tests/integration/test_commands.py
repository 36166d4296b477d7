"""The command worker against a real broker: a duplicate storm with poison
records, a kill -9 in the middle, a restart — every command answered, each
applied once, stock equal to the reference and never negative."""

from __future__ import annotations

import asyncio
import time

import pytest
from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.demo import publish
from seqkeeper.inspect import load, lookup
from seqkeeper.topics import create_topics
from seqkeeper.verification.commands import storm, wait_until_commands_verified
from seqkeeper.worker import WorkerProcess

pytestmark = pytest.mark.integration


def test_duplicate_storm_with_a_crash(make_settings, names, tmp_path) -> None:
    tag = names["app_id"]
    settings = make_settings(
        topology="commands",
        partitions=3,
        command_topic=f"cmd-{tag}",
        events_topic=f"ev-{tag}",
        command_dlq_topic=f"cdlq-{tag}",
    )
    replies = f"replies-{tag}"
    asyncio.run(create_topics(settings.broker.bootstrap, [*settings.topics(), replies], 3))
    work = storm(commands=400, reply_to=replies, seed=3)
    half = len(work.records) // 2
    asyncio.run(
        publish(settings.broker.bootstrap, settings.commands.command_topic, work.records[:half])
    )
    first = WorkerProcess(settings, tmp_path / "first.log").start()
    deadline = time.monotonic() + 90
    while "Worker ready" not in first.log():
        first.check_alive()
        assert time.monotonic() < deadline, first.log()[-3000:]
        time.sleep(0.2)
    time.sleep(1.5)
    first.kill()  # somewhere between persist, dispatch and mark
    asyncio.run(
        publish(settings.broker.bootstrap, settings.commands.command_topic, work.records[half:])
    )
    second = WorkerProcess(settings, tmp_path / "second.log").start()
    try:
        report = wait_until_commands_verified(settings, replies, 150, second)
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        assert report.commands == 401  # 400 + the poison with an unknown type
        assert report.copies > 2 * report.commands  # a storm indeed
        assert report.stock and all(s["available"] >= 0 for s in report.stock.values())
        # the Message Store: by messageId and by correlationId
        table = asyncio.run(load(settings))
        (one,) = lookup(table, message_id="cmd-3-1")
        assert one["command"]["status"] in ("COMPLETED", "FAILED", "EXPIRED")
        assert one["entity"]["id"] == one["command"]["entity"]
        shown = CliRunner().invoke(
            app,
            [
                "inspect",
                "-b",
                settings.broker.bootstrap,
                "--app-id",
                tag,
                "--message-id",
                "cmd-3-1",
            ],
        )
        assert shown.exit_code == 0, shown.output
        assert '"message_id": "cmd-3-1"' in shown.output and '"version"' in shown.output
        missing = CliRunner().invoke(
            app,
            ["inspect", "-b", settings.broker.bootstrap, "--app-id", tag, "--message-id", "nope"],
        )
        assert missing.exit_code == 1
        related = lookup(table, correlation_id="corr-1")
        assert {c["command"]["message_id"] for c in related} == {
            f"cmd-3-{n}" for n in range(400) if n % 50 == 1
        }
    finally:
        assert second.stop() == 0
