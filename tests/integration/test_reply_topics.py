"""Reply addresses against a real broker: commands whose replyTo
names the worker's changelog, its leader topic, its command topic or
``__consumer_offsets`` are dead-lettered ``invalid-reply-to`` and not
applied, and those topics receive no reply; on Apache Kafka without topic
auto-creation, a reply to a missing topic goes to the dead letters
(``reply-undeliverable``) while later commands are answered, the command's
effect applied once."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.broker import KafkaBroker, kafka_home_from_env
from seqkeeper.demo import publish
from seqkeeper.permissions import internal_topics
from seqkeeper.settings import Settings
from seqkeeper.topics import UnknownTopic, create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.reply_commands import add_stock as command

pytestmark = pytest.mark.integration


def records(bootstrap: str, topic: str) -> list[Any]:
    try:
        return asyncio.run(read_topic(bootstrap, topic))
    except UnknownTopic:
        return []


def wait_for(bootstrap: str, topic: str, count: int, worker: WorkerProcess) -> list[Any]:
    deadline = time.monotonic() + 120
    while len(got := records(bootstrap, topic)) < count:
        worker.check_alive()
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.5)
    return got


def headers(record: Any) -> dict[str, bytes]:
    return {k: bytes(v) for k, v in record.headers or ()}


def test_replies_to_the_workers_own_topics_are_refused(make_settings, names, tmp_path) -> None:
    settings = make_settings(topology="commands", partitions=1)
    bootstrap, tag = settings.broker.bootstrap, names["app_id"]
    replies = f"{tag}.replies"
    asyncio.run(create_topics(bootstrap, [*settings.topics(), replies], 1))
    changelog, leader = internal_topics(settings)
    aimed = [changelog, leader, settings.commands.command_topic, "__consumer_offsets"]
    sent = [command(f"bad-{n}", topic, 3) for n, topic in enumerate(aimed)]
    sent.append(command("ok", replies, 5))
    asyncio.run(publish(bootstrap, settings.commands.command_topic, sent))
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        [answer] = wait_for(bootstrap, replies, 1, worker)
        letters = wait_for(bootstrap, settings.commands.command_dlq_topic, len(aimed), worker)
        time.sleep(1.0)  # a reply elsewhere would be a bug: give one time to show
        elsewhere = {topic: records(bootstrap, topic) for topic in aimed}
    finally:
        assert worker.stop() == 0
    body = orjson.loads(answer.value)
    # nothing of the four applied: the entity is new when "ok" comes
    assert (body["causationId"], body["data"]["available"], body["version"]) == ("ok", 5, 1)
    assert [headers(r)["seqkeeper.reason"] for r in letters] == [b"invalid-reply-to"] * 4
    assert [r.value for r in letters] == [value for _, value in sent[:4]]
    for topic, got in elsewhere.items():
        assert not [r for r in got if r.value and b'"causationId"' in r.value], topic
    assert len(elsewhere[settings.commands.command_topic]) == len(sent)  # ours only
    events = records(bootstrap, settings.commands.events_topic)
    assert [orjson.loads(r.value)["causationId"] for r in events] == ["ok"]


@pytest.fixture(scope="module")
def kafka_without_auto_creation() -> Iterator[str]:
    """A fresh Apache Kafka with ``auto.create.topics.enable=false`` (from
    ``KAFKA_HOME``; skipped without it: the embedded broker creates topics
    on demand)."""
    home = kafka_home_from_env()
    if not home:
        pytest.skip("needs KAFKA_HOME: a Kafka that does not create topics on demand")
    log = Path(tempfile.gettempdir()) / f"seqkeeper-no-autocreate-{time.time_ns()}.log"
    with KafkaBroker(home, log_path=log, extra_config={"auto.create.topics.enable": "false"}) as k:
        yield k.bootstrap


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_reply_to_a_missing_topic_is_dead_lettered_and_later_commands_answered(
    kafka_without_auto_creation: str, names: dict[str, str], tmp_path: Path, guarantee: str
) -> None:
    bootstrap = kafka_without_auto_creation
    settings = Settings.of(
        bootstrap=bootstrap,
        data_dir=tmp_path / "data",
        partitions=1,
        session_timeout=6.0,
        topology="commands",
        handlers="seqkeeper.processors.inventory:registry",
        processing_guarantee=guarantee,
        **names,
    )
    replies, missing = f"{names['app_id']}.replies", f"gone-{names['app_id']}.replies"
    asyncio.run(create_topics(bootstrap, [*settings.topics(), replies], 1))
    asyncio.run(
        publish(
            bootstrap,
            settings.commands.command_topic,
            [command("lost", missing, 3), command("next", replies, 2)],
        )
    )
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        [first] = wait_for(bootstrap, replies, 1, worker)
        [letter] = wait_for(bootstrap, settings.commands.command_dlq_topic, 1, worker)
        asyncio.run(
            publish(bootstrap, settings.commands.command_topic, [command("later", replies, 1)])
        )
        answers = wait_for(bootstrap, replies, 2, worker)
        time.sleep(1.0)
        letters = records(bootstrap, settings.commands.command_dlq_topic)
        events = records(bootstrap, settings.commands.events_topic)
    finally:
        assert worker.stop() == 0
    bodies = [orjson.loads(r.value) for r in answers]
    # "lost" applied once (3), its reply dead-lettered; the others answered
    assert [(b["causationId"], b["data"]["available"], b["version"]) for b in bodies] == [
        ("next", 5, 2),
        ("later", 6, 3),
    ]
    assert first.value == answers[0].value
    assert len(letters) == 1
    said = headers(letter)
    assert said["seqkeeper.reason"] == b"reply-undeliverable"
    assert said["seqkeeper.reply-to"] == missing.encode()
    assert b"UNKNOWN_TOPIC_OR_PARTITION" in said["seqkeeper.detail"]
    assert orjson.loads(letter.value)["causationId"] == "lost"
    assert sorted(orjson.loads(r.value)["causationId"] for r in events) == ["later", "lost", "next"]
    assert records(bootstrap, missing) == []  # (not created)
