"""Reply addresses in the command topology and the runtime's commit protocol,
on an in-memory store: a replyTo that names the worker's own topics (or any
topic not allowed) is dead-lettered before anything is applied; a reply
whose topic the broker would not take goes to the dead letters instead of
failing the cycle, the command applied once."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from seqkeeper.processors.command import Entity, Outgoing, Receipt, receipt_id
from seqkeeper.processors.inventory import registry
from seqkeeper.runtime.task import Task
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.topologies.command_worker import CommandTopology
from tests.reply_commands import add_stock as cmd

SETTINGS = Settings.of(bootstrap="unused", topology="commands", app_id="shop")
DLQ = SETTINGS.commands.command_dlq_topic
OWN = [
    "shop-commands-commands-changelog",
    "shop-commands-__assignor-__leader",
    SETTINGS.commands.command_topic,
    SETTINGS.commands.events_topic,
    DLQ,
    "__consumer_offsets",
]


def worker(memory: MemoryStore, settings: Settings = SETTINGS) -> CommandTopology:
    topology = CommandTopology(settings, CommandStore(memory), registry)
    topology.on_assigned({0})
    return topology


def headers(record: Any) -> dict[str, bytes]:
    return dict(record[3] or ())


@pytest.mark.parametrize("topic", OWN)
def test_a_reply_to_the_workers_own_topics_is_dead_lettered_and_nothing_applied(
    topic: str,
) -> None:
    memory = MemoryStore()
    topology = worker(memory)
    key, value = cmd("m1", topic)
    topology.on_record(0, 7, key, value, [], 1.0, 100.0)
    [letter] = topology.take().records
    assert letter[0] == DLQ and letter[2] == value
    assert headers(letter)["seqkeeper.reason"] == b"invalid-reply-to"
    assert headers(letter)["kafka_dlt-original-offset"] == b"\x00" * 7 + b"\x07"
    store = CommandStore(memory)
    assert store.receipt(0, receipt_id("t1", "m1")) is None
    assert store.entity(0, "2:t1/sku-1") == Entity()
    # the same messageId with an allowed replyTo is a command of its own: applied once
    topology.on_record(0, 8, *cmd("m1", "shop.replies"), [], 1.0, 100.0)
    batch = topology.take()
    assert sorted(r[0] for r in batch.records) == [SETTINGS.commands.events_topic, "shop.replies"]
    assert store.entity(0, "2:t1/sku-1").version == 1


def test_a_stored_reply_goes_where_replies_may_go_now() -> None:
    """An outbox stored while another setting allowed its reply's topic is
    swept to the dead letters (reply-undeliverable), never to that topic."""
    memory = MemoryStore()
    topology = worker(memory, SETTINGS.with_overrides(reply_topics="old-answers"))
    topology.on_record(0, 0, *cmd("m1", "old-answers"), [], 1.0, 100.0)
    assert "old-answers" in {r[0] for r in topology.take().records}  # lost in a crash
    swept = worker(memory).take()  # restarted with the default setting
    topics = [r[0] for r in swept.records]
    assert "old-answers" not in topics and topics.count(DLQ) == 1
    [letter] = [r for r in swept.records if r[0] == DLQ]
    assert headers(letter)["seqkeeper.reason"] == b"reply-undeliverable"
    assert headers(letter)["seqkeeper.reply-to"] == b"old-answers"
    assert orjson.loads(letter[2])["messageId"] == "2:t1/m1:reply"


class Store:
    """The changelog side of the task: acknowledged at once."""

    def take_writes(self) -> dict[int, Any]:
        return {}

    async def flush(self, writes: Any) -> None:
        return None

    @property
    def changelog_topic(self) -> str:
        return "changelog"

    def committed(self, cycle: Any, last: Any) -> None:
        return None

    def sync(self) -> None:
        return None


class Producer:
    def __init__(self) -> None:
        self.produced: list[Any] = []

    async def group(self, records: Any, topic_of: Any) -> Any:
        return [(topic_of(r[0]), *r[1:]) for r in records]

    async def send(self, grouped: Any) -> None:
        self.produced.extend(grouped)


class Transactions:
    def __init__(self) -> None:
        self.committed: list[Any] = []

    async def commit(self, partition: int, records: Any, position: Any) -> dict[Any, int]:
        self.committed.extend(records)
        return {}


class Destinations:
    """The broker's answers: ``missing.replies`` does not exist."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def problem(self, topic: str) -> str | None:
        self.asked.append(topic)
        return "UNKNOWN_TOPIC_OR_PARTITION" if topic == "missing.replies" else None


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_an_undeliverable_reply_is_dead_lettered_and_the_others_go_on(guarantee: str) -> None:
    memory = MemoryStore()
    topology = worker(memory)
    producer, destinations = Producer(), Destinations()
    transactions = Transactions() if guarantee == "exactly_once" else None
    task = Task(
        topology,
        Store(),
        producer,
        lambda name: name,
        transactions=transactions,
        destinations=destinations,
    )
    topology.on_record(0, 0, *cmd("m1", "missing.replies"), [], 1.0, 100.0)
    topology.on_record(0, 1, *cmd("m2", "shop.replies", 2), [], 1.0, 100.0)

    async def cycle() -> None:
        await task.cycle()

    asyncio.run(cycle())
    out = producer.produced if transactions is None else transactions.committed
    topics = [r[0] for r in out]
    assert "missing.replies" not in topics
    assert topics.count("shop.replies") == 1 and topics.count(DLQ) == 1
    assert topics.count(SETTINGS.commands.events_topic) == 2  # both applied
    [letter] = [r for r in out if r[0] == DLQ]
    assert headers(letter)["seqkeeper.reason"] == b"reply-undeliverable"
    assert headers(letter)["seqkeeper.reply-to"] == b"missing.replies"
    assert orjson.loads(letter[2])["causationId"] == "m1"
    assert sorted(destinations.asked) == ["missing.replies", "shop.replies"]
    store = CommandStore(memory)
    entity = store.entity(0, "2:t1/sku-1")
    assert (entity.version, entity.state["available"], entity.outbox) == (2, 5, ())
    receipt = store.receipt(0, receipt_id("t1", "m1"))
    assert isinstance(receipt, Receipt) and receipt.dispatched and receipt.status == "COMPLETED"
    assert isinstance(receipt.reply, Outgoing) and receipt.reply.topic == "missing.replies"


def test_the_letters_and_every_command_reason_match_the_dead_letter_schema() -> None:
    import json
    from pathlib import Path

    from jsonschema import Draft202012Validator

    from seqkeeper.processors.command import CommandReason
    from seqkeeper.processors.dead_letter import dead_letter_headers, schema_document
    from seqkeeper.processors.return_address import undeliverable_letter

    schema = Path(__file__).resolve().parents[2] / "schemas" / "dead-letter-headers.schema.json"
    valid = Draft202012Validator(json.loads(schema.read_text())).is_valid
    reasons = [v for k, v in vars(CommandReason).items() if k.isupper()]
    assert "invalid-reply-to" in reasons and "reply-undeliverable" in reasons
    for reason in set(reasons) - {"reply-undeliverable"}:  # (that one: below)
        doc = schema_document(dead_letter_headers(reason, "why", "cmd", 0, 4))
        assert valid(doc), reason
    letter = undeliverable_letter((), "gone.replies", "missing", "cmd", 0)
    assert valid(schema_document(letter))
    without = [(k, v) for k, v in letter if k != "seqkeeper.reply-to"]
    assert not valid(schema_document(without))
