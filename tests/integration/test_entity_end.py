"""Command handlers that end their entity (``seqkeeper.End``), from a user's
project outside this package, run by the installed ``seqkeeper worker
--topology commands`` (under exactly_once on a broker with transactions):

* the ending command's reply says ``ended`` and its events go out once;
* the ended entity's record is a tombstone at the end of the changelog (or,
  written and ended in one transaction, not there at all), so a worker
  restoring from the changelog (a new data directory) forgets it;
* after that restore, a copy of a command sent before the end gets its stored
  reply byte for byte (no second run), a new command for an ended key starts
  a new entity at version 1, and a key that never ended goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.demo import publish
from seqkeeper.inspect import changelog_topic
from seqkeeper.state.command_records import entity_key
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

pytestmark = pytest.mark.integration

HANDLERS = """
from seqkeeper import DomainError, End, Event, Registry

registry = Registry()


@registry.register("Add")
def add(state, command):
    total = (state or {"total": 0})["total"] + command.payload["amount"]
    return {"total": total}, [Event("Added", {"total": total})]


@registry.register("Close")
def close(state, command):
    if state is None:
        raise DomainError(f"no account {command.partition_key}")
    return End(state), [Event("Closed", state)]
"""

KEYS = ("k0", "k1", "k2", "k3")
CLOSED = ("k0", "k1", "k2")  # k3 stays open


def command(mid: str, kind: str, key: str, replies: str, **extra: Any) -> tuple[bytes, bytes]:
    doc = {"messageId": mid, "commandType": kind, "schemaVersion": 1, "correlationId": f"c-{mid}",
           "partitionKey": key, "tenantId": "bank", "replyTo": replies, "payload": extra}  # fmt: skip
    if "expectedVersion" in extra:
        doc["expectedVersion"] = extra.pop("expectedVersion")
    return key.encode(), orjson.dumps(doc)


def test_an_ended_entity_stays_ended_through_a_restore_and_its_key_begins_anew(
    broker: Broker, make_settings, names, tmp_path: Path
) -> None:
    exactly_once = not broker.is_tansu  # (the embedded broker has no transactions)
    isolation = "read_committed" if exactly_once else "read_uncommitted"
    project = tmp_path / "project"
    project.mkdir()
    (project / "accounts.py").write_text(HANDLERS)
    settings = make_settings(
        topology="commands",
        handlers="accounts:registry",
        processing_guarantee="exactly_once" if exactly_once else "at_least_once",
    )
    bootstrap, topic = settings.broker.bootstrap, settings.commands.command_topic
    replies = f"{names['app_id']}.replies"
    asyncio.run(create_topics(bootstrap, [*settings.topics(), replies], 2))

    def read(name: str) -> list[Any]:
        return asyncio.run(read_topic(bootstrap, name, isolation=isolation))

    def answered(worker: WorkerProcess, mids: set[str]) -> dict[str, bytes]:
        """The replies by causationId once each of ``mids`` has one."""
        deadline = time.monotonic() + 90
        while True:
            got = {orjson.loads(r.value)["causationId"]: r.value for r in read(replies)}
            if mids <= set(got):
                return got
            worker.check_alive()
            assert time.monotonic() < deadline, (sorted(mids - set(got)), worker.log()[-3000:])
            time.sleep(0.5)

    first: list[tuple[bytes, bytes]] = []
    for n, key in enumerate(KEYS):
        first += [command(f"{key}-a", "Add", key, replies, amount=n + 1),
                  command(f"{key}-b", "Add", key, replies, amount=10)]  # fmt: skip
        if key in CLOSED:
            first += [command(f"{key}-close", "Close", key, replies)]
    first += [command("k0-c", "Add", "k0", replies, amount=100)]  # after its end: a new k0
    asyncio.run(publish(bootstrap, topic, first))
    worker = WorkerProcess(settings, tmp_path / "first.log", cwd=project).start()
    try:
        before = answered(worker, {orjson.loads(v)["messageId"] for _, v in first})
    finally:
        assert worker.stop() == 0
    closing = {key: orjson.loads(before[f"{key}-close"]) for key in CLOSED}
    for n, key in enumerate(CLOSED):
        reply = closing[key]
        assert (reply["success"], reply["ended"], reply["version"]) == (True, True, 3)
        assert reply["data"] == {"total": n + 11}
    assert orjson.loads(before["k0-c"])["version"] == 1  # a new k0 at once

    # the changelog: an ended key's last entity record is a tombstone, or
    # there is none (under exactly_once, an entity written and deleted in
    # one transaction is left out of it); the others' are there
    last: dict[bytes, bytes | None] = {}
    for r in sorted(read(changelog_topic(settings)), key=lambda r: (r.partition, r.offset)):
        last[r.key] = r.value
    ended = {key: entity_key(f"4:bank/{key}") for key in KEYS}
    assert [key for key in KEYS if last.get(ended[key]) is None] == ["k1", "k2"]

    # a worker restoring from the changelog alone (a new data directory)
    restored = settings.with_overrides(data_dir=tmp_path / "restored")
    second_batch = [
        command("k1-a", "Add", "k1", replies, amount=2),  # a copy from before the end
        command("k1-new", "Add", "k1", replies, amount=7),
        command("k2-new", "Add", "k2", replies, amount=8, expectedVersion=0),
        command("k2-close", "Close", "k2", replies),  # a copy of the ending command
        command("k3-new", "Add", "k3", replies, amount=1),
    ]
    asyncio.run(publish(bootstrap, topic, second_batch))
    worker = WorkerProcess(restored, tmp_path / "second.log", cwd=project).start()
    try:
        after = answered(worker, {"k1-new", "k2-new", "k3-new"})
        time.sleep(1.0)  # (a second reply or event would show)
        all_replies, events = read(replies), read(settings.commands.events_topic)
    finally:
        assert worker.stop() == 0
    got = {mid: orjson.loads(after[mid]) for mid in ("k1-new", "k2-new", "k3-new")}
    assert {mid: (r["success"], r["data"], r["version"]) for mid, r in got.items()} == {
        "k1-new": (True, {"total": 7}, 1),
        "k2-new": (True, {"total": 8}, 1),
        "k3-new": (True, {"total": 15}, 3),
    }
    # copies: their stored replies, byte for byte, and no second run
    copies = Counter(r.value for r in all_replies)
    assert {r.value for r in all_replies if orjson.loads(r.value)["causationId"] == "k1-a"} == {
        before["k1-a"]
    }
    assert {r.value for r in all_replies if orjson.loads(r.value)["causationId"] == "k2-close"} == {
        before["k2-close"]
    }
    assert copies[before["k1-a"]] >= 2 and copies[before["k2-close"]] >= 2  # sent again
    types = Counter((orjson.loads(e.value)["causationId"], orjson.loads(e.value)["type"])
                    for e in events)  # fmt: skip
    assert {mid for mid, kind in types if kind == "Closed"} == {f"{k}-close" for k in CLOSED}
    if exactly_once:  # each event once, as read_committed reads it
        assert [k for k, n in types.items() if n > 1] == []
