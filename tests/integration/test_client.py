"""The request/reply client (seqkeeper.client) and ``seqkeeper send``
against a command worker: replies matched to their requests, two clients on
one reply topic, failure replies, timeouts naming the messageId, and the
command's exit codes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.client import CommandClient, ReplyTimeout, SyncCommandClient
from seqkeeper.topics import create_topics
from seqkeeper.worker import WorkerProcess

pytestmark = pytest.mark.integration


def test_requests_get_their_own_replies(make_settings, names, tmp_path: Path) -> None:
    tag = names["app_id"]
    settings = make_settings(
        topology="commands",
    )
    bootstrap = settings.broker.bootstrap
    topic = settings.commands.command_topic
    asyncio.run(create_topics(bootstrap, settings.topics(), 2))
    worker = WorkerProcess(settings, tmp_path / "worker.log").start().wait_ready()
    shared = f"shared-{tag}.replies"
    try:

        async def two_clients() -> None:
            async with (
                CommandClient(bootstrap, command_topic=topic, reply_topic=shared, tenant="t1") as a,
                CommandClient(bootstrap, command_topic=topic, reply_topic=shared, tenant="t1") as b,
            ):
                added, other = await asyncio.gather(
                    a.request("AddStock", "sku-1", {"quantity": 5}, timeout=60),
                    b.request("AddStock", "sku-2", {"quantity": 7}, timeout=60),
                )
                assert added.success and other.success
                assert added.causation_id != other.causation_id
                assert (added.version, other.version) == (1, 1)
                refused = await a.request(
                    "ReserveInventory", "sku-1", {"orderId": "o1", "quantity": 9}, timeout=60
                )
                assert not refused.success
                assert "insufficient stock" in refused.message
                assert refused.data == {"available": 5}
                sent = await b.send("AddStock", "sku-1", {"quantity": 1})
                assert sent.startswith("seqkeeper-client:")

        asyncio.run(two_clients())
        with SyncCommandClient(bootstrap, command_topic=topic, reply_topic=shared) as sync:
            reply = sync.request("AddStock", "sku-3", {"quantity": 2}, tenant="t2", timeout=60)
            assert reply.success and reply.to_json()["causationId"] == reply.causation_id

        cli = CliRunner()
        base = ["send", "-b", bootstrap, "--command-topic", topic, "--tenant", "t1"]
        ok = cli.invoke(
            app, [*base, "--type", "AddStock", "--key", "sku-9", "--payload", '{"quantity": 3}']
        )
        assert ok.exit_code == 0, ok.output
        assert json.loads(ok.output)["success"] is True
        failed = cli.invoke(
            app,
            [*base, "--type", "ReserveInventory", "--key", "sku-9", "--payload",
             '{"orderId": "o", "quantity": 99}'],
        )  # fmt: skip
        assert failed.exit_code == 1, failed.output
        assert json.loads(failed.output)["success"] is False
        fire = cli.invoke(app, [*base, "--type", "AddStock", "--key", "k", "--wait", "0"])
        assert fire.exit_code == 0 and "messageId" in json.loads(fire.output)
    finally:
        assert worker.stop() == 0


def test_no_reply_is_a_timeout_naming_the_command(broker, names) -> None:
    """No worker reads this command topic."""
    tag = names["app_id"]
    topic = f"nobody-{tag}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 1))

    async def ask() -> None:
        async with CommandClient(broker.bootstrap, command_topic=topic, client_id=tag) as client:
            with pytest.raises(ReplyTimeout) as caught:
                await client.request("AddStock", "k", {}, message_id=f"m-{tag}", timeout=1.5)
            assert caught.value.message_id == f"m-{tag}"
            assert f"no reply to command m-{tag} within 1.5 s (on {tag}.replies)" == str(
                caught.value
            )

    asyncio.run(ask())
    base = ["send", "-b", broker.bootstrap, "--command-topic", topic, "--type", "T", "--key", "k"]
    timed_out = CliRunner().invoke(app, [*base, "--wait", "1"])
    assert timed_out.exit_code == 3
    assert "error: no reply to command seqkeeper-send:" in timed_out.output
    usage = CliRunner().invoke(app, [*base, "--payload", "{not json"])
    assert usage.exit_code == 2 and "not JSON" in usage.output
