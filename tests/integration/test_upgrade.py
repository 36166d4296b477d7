"""Upgrades of the state format (:mod:`seqkeeper.state.formats`) with the
installed worker on a real broker (exactly_once where it has transactions):

* state written as format 1 wrote it (receipts without tenants, no marker),
  given to the worker as a data directory (a local RocksDB beside its
  changelog) or as a changelog alone, is migrated: a copy of a command
  decided then gets its stored reply byte for byte and runs nothing, a new
  command continues the entity, and the current marker (``4/4``) is in the changelog
  and the local database, the old keys tombstoned;
* state of a newer format (a downgrade) is refused in one line with exit
  code 4, from a data directory or a changelog, and nothing is written.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from rocksdict import Options, Rdict

from seqkeeper.demo import publish
from seqkeeper.inspect import changelog_topic
from seqkeeper.settings import Settings
from seqkeeper.state.formats import CURRENT, MARKER, encode_marker
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

#: A marker of the format after this release's: what a newer release wrote.
NEWER = f"{CURRENT.number + 1}/{CURRENT.number + 1}".encode()

pytestmark = pytest.mark.integration

#: Faust's table directory under SEQKEEPER_DATA_DIR (app version 1) and the
#: command table's name: where the worker opens partition 0's RocksDB.
TABLE_DB = Path("v1", "tables", "commands-0.db")
FAUST_OFFSET_KEY = b"__faust\x00offset__"  # (its value: the offset in decimal)
ADOPTED_KEY = b"__seqkeeper\x00format__"  # the previous release's "offset covers state" flag
STORED = {"available": 3, "from": "format 1"}  # a reply the handler would never write


def format_1_table(replies: str, now: float) -> list[tuple[bytes, bytes]]:
    """t1's sku-1 after AddStock m1, as the previous release wrote it: the
    entity under its tenant-scoped key, the receipt and its indexes under
    the bare messageId (r, c, t), no ``trace`` in the receipt, no marker.
    Byte for byte, not through today's encoders."""
    reply = orjson.dumps(
        {
            "messageId": "m1:reply",
            "correlationId": "corr-m1",
            "causationId": "m1",
            "success": True,
            "data": STORED,
        }  # fmt: skip
    ).decode()
    receipt = orjson.dumps(
        {
            "message_id": "m1",
            "status": "COMPLETED",
            "entity": "2:t1/sku-1",
            "command_type": "AddStock",
            "correlation_id": "corr-m1",
            "received_at": now,
            "updated_at": now,
            "attempts": 1,
            "error": None,
            "reply": [replies, "sku-1", "m1:reply", reply, []],
            "dispatched": True,
            "retry_at": None,
            "value": None,
            "origin": None,
        }  # fmt: skip
    )
    return [
        (b"e2:t1/sku-1", b'[1,{"available":3,"reserved":{}},[]]'),
        (b"ccorr-m1\x00m1", b""),
        (b"rm1", receipt),
        (b"t" + struct.pack(">d", now) + b"m1", b""),
    ]


def command(mid: str, replies: str, quantity: int) -> tuple[bytes, bytes]:
    return b"sku-1", orjson.dumps(
        {
            "messageId": mid,
            "commandType": "AddStock",
            "schemaVersion": 1,
            "correlationId": f"corr-{mid}",
            "partitionKey": "sku-1",
            "tenantId": "t1",
            "replyTo": replies,
            "payload": {"quantity": quantity},
        }  # fmt: skip
    )


def write_db(path: Path, entries: list[tuple[bytes, bytes]]) -> None:
    db = Rdict(str(path), Options(raw_mode=True))
    try:
        for key, value in entries:
            db[key] = value
    finally:
        db.close()


def read_db(path: Path) -> dict[bytes, bytes]:
    db = Rdict(str(path), Options(raw_mode=True))
    try:
        return dict(db.items())
    finally:
        db.close()


class World:
    """One test's topics and settings (one partition: one table database)."""

    def __init__(self, broker: Broker, make_settings: Any, names: dict[str, str], tmp: Path):
        self.exactly_once = not broker.is_tansu  # (the embedded broker has no transactions)
        self.isolation = "read_committed" if self.exactly_once else "read_uncommitted"
        self.settings: Settings = make_settings(
            topology="commands",
            partitions=1,
            processing_guarantee="exactly_once" if self.exactly_once else "at_least_once",
        )
        self.tmp = tmp
        self.replies = f"{names['app_id']}.replies"
        self.changelog = changelog_topic(self.settings)
        self.bootstrap = self.settings.broker.bootstrap
        topics = [*self.settings.topics(), self.replies, self.changelog]
        asyncio.run(create_topics(self.bootstrap, topics, 1))

    def read(self, topic: str) -> list[Any]:
        return asyncio.run(read_topic(self.bootstrap, topic, isolation=self.isolation))

    def changelog_table(self) -> dict[bytes, bytes | None]:
        last: dict[bytes, bytes | None] = {}
        for r in sorted(self.read(self.changelog), key=lambda r: r.offset):
            last[r.key] = r.value
        return last

    def worker(self, name: str) -> WorkerProcess:
        return WorkerProcess(self.settings, self.tmp / f"{name}.log", cwd=self.tmp)

    def db_path(self) -> Path:
        return self.settings.runtime.data_dir / TABLE_DB


def run_until_replied(world: World, worker: WorkerProcess, mids: set[str]) -> dict[str, bytes]:
    deadline = time.monotonic() + 90
    while True:
        got = {orjson.loads(r.value)["causationId"]: r.value for r in world.read(world.replies)}
        if mids <= set(got):
            return got
        worker.check_alive()
        assert time.monotonic() < deadline, (sorted(mids - set(got)), worker.log()[-3000:])
        time.sleep(0.5)


@pytest.mark.parametrize("given", ["data_dir", "changelog"])
def test_format_1_state_is_migrated_and_marked(
    broker: Broker, make_settings, names, tmp_path: Path, given: str
) -> None:
    world = World(broker, make_settings, names, tmp_path)
    old = format_1_table(world.replies, time.time())
    asyncio.run(publish(world.bootstrap, world.changelog, old))
    if given == "data_dir":  # the previous release's local state: the changelog's, at its end
        world.db_path().parent.mkdir(parents=True)
        write_db(
            world.db_path(),
            [*old, (FAUST_OFFSET_KEY, str(len(old) - 1).encode()), (ADOPTED_KEY, b"1")],
        )
    asyncio.run(
        publish(
            world.bootstrap,
            world.settings.commands.command_topic,
            [command("m1", world.replies, 3), command("m2", world.replies, 2)],  # m1: a copy
        )
    )
    worker = world.worker("upgrade").start()
    try:
        got = run_until_replied(world, worker, {"m1", "m2"})
        time.sleep(1.0)  # (a second reply or event would show)
        replies, events = (
            world.read(world.replies),
            world.read(world.settings.commands.events_topic),
        )
    finally:
        assert worker.stop() == 0
    log = worker.log()
    assert "Traceback" not in log, log[-3000:]
    # m1 was decided under format 1: its stored reply, once, and no second run
    first = orjson.loads(got["m1"])
    assert first["data"] == STORED and first["messageId"] == "m1:reply"
    assert [orjson.loads(r.value)["causationId"] for r in replies].count("m1") == 1
    second = orjson.loads(got["m2"])
    assert (second["success"], second["data"]["available"]) == (True, 5), second
    assert [orjson.loads(e.value)["causationId"] for e in events] == ["m2"]
    # migrated: the marker and the receipt under its receipt id in the
    # changelog, the old keys tombstoned; the local database the same
    table = world.changelog_table()
    assert table[MARKER] == encode_marker()
    assert {k: table[k] for k, _ in old[1:]} == {k: None for k, _ in old[1:]}
    moved = orjson.loads(table[b"R2:t1/m1"] or b"null")
    assert moved["message_id"] == "m1" and orjson.loads(moved["reply"][3])["data"] == STORED
    local = read_db(world.db_path())
    assert local[MARKER] == encode_marker() and b"R2:t1/m1" in local
    assert not [k for k in local if k[:1] in b"rct"], sorted(local)


def refused(worker: WorkerProcess, timeout: float = 90.0) -> tuple[int, str]:
    assert worker.proc is not None
    worker.proc.wait(timeout)
    return worker.proc.returncode, worker.log()


#: A marker no release writes (damaged state, or another program's record).
GARBAGE = b"v2-final"


@pytest.mark.parametrize("marker", [NEWER, GARBAGE], ids=["newer", "garbage"])
@pytest.mark.parametrize("given", ["data_dir", "changelog"])
def test_a_downgrade_is_refused_in_one_line_and_writes_nothing(
    broker: Broker, make_settings, names, tmp_path: Path, given: str, marker: bytes
) -> None:
    """State of a newer format, or with a marker no release writes."""
    world = World(broker, make_settings, names, tmp_path)
    newer = [*format_1_table(world.replies, time.time()), (MARKER, marker)]
    if given == "data_dir":  # a newer release's local state (no changelog)
        world.db_path().parent.mkdir(parents=True)
        write_db(world.db_path(), [*newer, (ADOPTED_KEY, b"1")])
        before_db = read_db(world.db_path())
    else:  # a newer release's changelog, restored into a new data directory
        asyncio.run(publish(world.bootstrap, world.changelog, newer))
    asyncio.run(
        publish(
            world.bootstrap,
            world.settings.commands.command_topic,
            [command("m2", world.replies, 2)],
        )  # fmt: skip
    )
    before = world.read(world.changelog)
    code, log = refused(world.worker("downgrade").start())
    assert code == 4, log[-3000:]
    lines = [line for line in log.splitlines() if line.startswith("error:")]
    where = "commands-0.db" if given == "data_dir" else "changelog partition 0 at offset 4"
    assert len(lines) == 1 and where in lines[0], log[-3000:]
    n = CURRENT.number
    if marker == NEWER:
        assert f"state format {n + 1}," in lines[0] and f"formats up to {n}" in lines[0]
    else:
        assert "marker no seqkeeper release writes (b'v2-final')" in lines[0], lines[0]
    assert "Traceback" not in log, log[-3000:]
    # nothing written: no reply, no event, the changelog as it was
    assert world.read(world.replies) == []
    assert world.read(world.settings.commands.events_topic) == []
    assert [(r.key, r.value) for r in world.read(world.changelog)] == [
        (r.key, r.value) for r in before
    ]
    if given == "data_dir":
        assert read_db(world.db_path()) == before_db


@dataclass
class OrderedRun:
    ordered: list[Any]
    dead: list[Any]
    changelog: list[Any]  # (in offset order)


def run_ordered(
    broker: Broker,
    make_settings: Any,
    tmp_path: Path,
    table: list[tuple[bytes, bytes]],
    mid: str,
    done: Callable[[OrderedRun], bool],
) -> OrderedRun:
    """An ordered worker (exactly_once where the broker has transactions)
    over a changelog holding ``table``, given k1's messages of sequence 2
    and 3 (messageIds ``mid`` with the sequence), until ``done``, and a
    second more (another output would show)."""
    exactly_once = not broker.is_tansu
    isolation = "read_committed" if exactly_once else "read_uncommitted"
    settings = make_settings(
        partitions=1, processing_guarantee="exactly_once" if exactly_once else "at_least_once"
    )
    bootstrap, changelog = settings.broker.bootstrap, f"{settings.group_id}-state-changelog"
    asyncio.run(create_topics(bootstrap, [*settings.topics(), changelog], 1))
    asyncio.run(publish(bootstrap, changelog, table))
    messages = [
        (b"k1", orjson.dumps({"messageId": mid.format(seq=seq), "seq": seq, "type": "T"}))
        for seq in (2, 3)
    ]
    asyncio.run(publish(bootstrap, settings.ordered.input_topic, messages))
    worker = WorkerProcess(settings, tmp_path / "ordered.log").start()

    def read(topic: str) -> list[Any]:
        return asyncio.run(read_topic(bootstrap, topic, isolation=isolation))

    def now() -> OrderedRun:
        return OrderedRun(
            read(settings.ordered.ordered_topic), read(settings.ordered.dlq_topic), []
        )

    try:
        deadline = time.monotonic() + 90
        while not done(now()):
            worker.check_alive()
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.5)
        time.sleep(1.0)
        run = now()
    finally:
        assert worker.stop() == 0
    run.changelog = sorted(read(changelog), key=lambda r: r.offset)
    return run


def test_the_ordered_worker_reads_format_1_state_and_marks_it(
    broker: Broker, make_settings, names, tmp_path: Path
) -> None:
    """The ordered table's format 1 (the key state in its first layout, JSON,
    as the first release wrote it) from a changelog: read as it was (k1's
    next expected sequence is 3: 3 goes out at once, and a new message of
    sequence 2 is dead-lettered as a sequence conflict; state read as
    empty would hold both back waiting for 1), and marked."""
    # [next expected, buffered, gap since, skipped, seen head, seen tail, confirmed]
    table = [(b"s\x00\x00\x00\x02k1", b"[3,0,null,[],0,0,2]")]
    run = run_ordered(
        broker, make_settings, tmp_path, table, "k1:{seq}:new", lambda r: bool(r.ordered and r.dead)
    )
    assert [orjson.loads(r.value)["seq"] for r in run.ordered] == [3]
    dead = run.dead
    assert len(dead) == 1 and b"sequence-conflict" in dead[0].value + str(dead[0].headers).encode()
    assert {r.key: r.value for r in run.changelog}[MARKER] == encode_marker()


def test_the_ordered_worker_drops_copies_of_ids_format_3_remembered(
    broker: Broker, make_settings, names, tmp_path: Path
) -> None:
    """The ordered table's format 3 (one ``p`` record per seen id, the key
    state in its layout before pages) from a changelog, byte for byte: k1
    accepted ids k1:1 and k1:2, next expected 3. A copy of k1:2 is dropped
    as a copy (state read without its ``p`` records would accept it and
    dead-letter it as a sequence conflict), k1:3 goes out, the partition is
    marked format 4 and no ``p`` record is written."""
    now, key = time.time(), b"\x00\x00\x00\x02k1"
    everything = (1 << 64) - 1  # (the ids filter: every bit, read always)
    # version, flags (no gap), next, buffered, gap since, head, tail, oldest,
    # filter high and low, confirmed, ranges
    state = struct.pack(">BBQQdQQdQQQH", 4, 2, 3, 0, 0.0, 0, 2, now, everything, everything, 3, 0)
    table = [(MARKER, b"3/3"), (b"s" + key, state)]
    for position, mid in enumerate([b"k1:1", b"k1:2"]):
        table.append((b"i" + key + mid, struct.pack(">Qdq", position, now, -1)))
        table.append((b"p" + key + struct.pack(">Q", position), struct.pack(">d", now) + mid))
    run = run_ordered(broker, make_settings, tmp_path, table, "k1:{seq}", lambda r: bool(r.ordered))
    assert [orjson.loads(r.value)["seq"] for r in run.ordered] == [3]
    assert run.dead == []
    assert {r.key: r.value for r in run.changelog}[MARKER] == encode_marker()
    written = [r.key for r in run.changelog if r.key[:1] == b"p"]
    assert written == [k for k, _ in table if k[:1] == b"p"]
