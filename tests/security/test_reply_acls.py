"""A reply topic the worker may not write, on Apache Kafka with the
StandardAuthorizer: the command worker, granted the documented
ACLs for another reply topic only (and Describe on this one), dead-letters
the reply ``reply-undeliverable`` instead of failing its transaction; the
command is applied once and the later commands are answered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from seqkeeper.demo import publish
from seqkeeper.permissions import Grant, worker_grants
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.reply_commands import add_stock as command
from tests.secured_broker import SecuredKafkaBroker
from tests.security.test_acls import (  # noqa: F401 - the fixtures
    admin_config,
    as_user,
    command_worker,
    grant,
    user_password,
)
from tests.topic_wait import wait_for

pytestmark = pytest.mark.integration


def test_a_reply_topic_without_write_is_dead_lettered_and_later_commands_answered(
    secured_broker: SecuredKafkaBroker,
    admin_config: Path,  # noqa: F811
    as_user: Settings,  # noqa: F811
    secured_logs: Path,
) -> None:
    settings = command_worker(as_user)
    bootstrap, app = settings.broker.bootstrap, settings.runtime.app_id
    replies, denied = f"{app}.replies", f"{app}-denied.replies"
    asyncio.run(create_topics(bootstrap, [replies, denied], 1))  # (as admin)
    grants = worker_grants(settings, reply_topics=[replies])
    grant(secured_broker, admin_config, [*grants, Grant(("Describe",), "topic", (denied,))])
    asyncio.run(create_topics(bootstrap, settings.topics(), 2))
    first = [command("lost", denied, 3), command("next", replies, 2)]
    asyncio.run(publish(bootstrap, settings.commands.command_topic, first))
    worker = WorkerProcess(settings, secured_logs / "reply-not-writable.log").start()
    try:
        wait_for(bootstrap, replies, 1, worker)
        [letter] = wait_for(bootstrap, settings.commands.command_dlq_topic, 1, worker)
        later = [command("later", replies, 1)]
        asyncio.run(publish(bootstrap, settings.commands.command_topic, later))
        answers = wait_for(bootstrap, replies, 2, worker)
        events = asyncio.run(read_topic(bootstrap, settings.commands.events_topic))
    finally:
        code = worker.stop()
    assert code == 0, worker.log()[-3000:]
    assert "exactly_once" in worker.log()
    bodies = [orjson.loads(r.value) for r in answers]
    assert [(b["causationId"], b["data"]["available"], b["version"]) for b in bodies] == [
        ("next", 5, 2),
        ("later", 6, 3),
    ]
    said = {k: bytes(v) for k, v in letter.headers}
    assert said["seqkeeper.reason"] == b"reply-undeliverable"
    assert said["seqkeeper.reply-to"] == denied.encode()
    assert b"may not Write" in said["seqkeeper.detail"], said["seqkeeper.detail"]
    assert orjson.loads(letter.value)["causationId"] == "lost"
    assert sorted(orjson.loads(r.value)["causationId"] for r in events) == ["later", "lost", "next"]
    assert asyncio.run(read_topic(bootstrap, denied)) == []
