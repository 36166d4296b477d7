"""A handler ends its entity (``seqkeeper.End``, processors/command.py):
copies of the entity's commands, before or after the end, get their stored
replies and run no handler again; a new command for the key starts a new
entity at version 0; the ended entity's record holds nothing once its
messages are dispatched (the shell deletes it)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper import Command, End, Event, Registry
from seqkeeper.processors.command import Entity, Outgoing, decide, mark_dispatched, reply_id
from tests.processors.test_command import Shell, command

KEYS = ("a", "b")


def counters(calls: Counter[str]) -> Registry:
    """``Add`` adds its amount to the key's total; ``Close`` ends the entity,
    its reply's data the last total. ``calls`` counts each command's runs."""
    registry = Registry()

    @registry.register("Add")
    def add(state: Any, c: Command) -> tuple[Any, list[Event]]:
        calls[c.message_id] += 1
        total = (state or {"total": 0})["total"] + c.payload["amount"]
        return {"total": total}, [Event("Added", {"total": total})]

    @registry.register("Close")
    def close(state: Any, c: Command) -> tuple[Any, list[Event]]:
        calls[c.message_id] += 1
        return End({"total": (state or {"total": 0})["total"]}), [Event("Closed")]

    return registry


def expected(commands: list[Command]) -> tuple[dict[str, tuple[Any, int, bool]], dict[str, Any]]:
    """Each command's reply (data, version, ended) and each key's entity
    (version, state) after all, applying each once in this order: an
    independent model of the rules."""
    entities: dict[str, tuple[int, Any]] = {}
    replies: dict[str, tuple[Any, int, bool]] = {}
    for c in commands:
        version, state = entities.get(c.partition_key, (0, None))
        total = (state or {"total": 0})["total"]
        if c.command_type == "Add":
            state = {"total": total + c.payload["amount"]}
            entities[c.partition_key] = (version + 1, state)
            replies[c.message_id] = (state, version + 1, False)
        else:
            entities.pop(c.partition_key, None)
            replies[c.message_id] = ({"total": total}, version + 1, True)
    return replies, entities


@st.composite
def histories(draw: st.DrawFn) -> list[Command]:
    """Distinct commands over two keys, Close among the Adds."""
    out = []
    for n in range(draw(st.integers(1, 16))):
        key = draw(st.sampled_from(KEYS))
        if draw(st.integers(0, 3)) == 0:
            out.append(command(f"m{n}", "Close", key, {}))
        else:
            out.append(command(f"m{n}", "Add", key, {"amount": draw(st.integers(1, 9))}))
    return out


def reply_of(shell: Shell, c: Command) -> dict[str, Any]:
    sent = shell.sent(f"{c.message_id}:reply")
    assert sent, f"no reply to {c.message_id}"
    assert len(set(sent)) == 1, "a reply changed"
    doc: dict[str, Any] = orjson.loads(sent[0])
    return doc


@settings(max_examples=150)
@given(histories(), st.randoms(use_true_random=False), st.booleans())
def test_after_an_end_copies_get_their_replies_and_a_new_command_a_new_entity(
    commands: list[Command], rng: Any, transactional: bool
) -> None:
    calls: Counter[str] = Counter()
    shell = Shell(counters(calls))
    for n, c in enumerate(commands):
        shell.offer(c, float(n), transactional=transactional)
        if rng.random() < 0.5:
            shell.confirm_all(float(n))
    shell.confirm_all(100.0)
    replies, entities = expected(commands)
    # every copy again, in any order, before and after their dispatch marks
    copies = list(commands) * 2
    rng.shuffle(copies)
    for n, c in enumerate(copies):
        shell.offer(c, 200.0 + n, transactional=transactional)
        if rng.random() < 0.3:
            shell.confirm_all(200.0 + n)
    shell.confirm_all(300.0)

    assert calls == Counter(c.message_id for c in commands)  # each handler ran once
    got = {}
    for c in commands:
        doc = reply_of(shell, c)
        got[c.message_id] = (doc["data"], doc["version"], doc.get("ended", False))
    assert got == replies
    for key in KEYS:
        record = shell.entities[command("x", "Add", key, {}).entity]
        if key in entities:
            assert (record.version, record.state) == entities[key]
        else:  # ended (or never seen): a record holding nothing, which the store deletes
            assert record == Entity() and record.empty
    # a new command for each key: an ended key's is a new entity
    for key in KEYS:
        fresh = command(f"new-{key}", "Add", key, {"amount": 1}, expectedVersion=0)
        shell.offer(fresh, 400.0, transactional=transactional)
        doc = reply_of(shell, fresh)
        if key in entities:  # alive: a version conflict naming its version
            assert (doc["success"], doc["version"]) == (False, entities[key][0])
        else:
            assert (doc["success"], doc["data"], doc["version"]) == (True, {"total": 1}, 1)


def test_an_end_keeps_its_outbox_until_dispatched_and_a_command_meanwhile_starts_anew() -> None:
    calls: Counter[str] = Counter()
    registry = counters(calls)
    shell = Shell(registry)
    add, close = command("m1", "Add", "a", {"amount": 5}), command("m2", "Close", "a", {})
    shell.offer(add, 1.0)
    shell.confirm_all(1.0)
    shell.offer(close, 2.0)
    ended = shell.entities[close.entity]
    # not dispatched yet: the record keeps the Close's events and reply
    assert (ended.version, ended.state) == (0, None) and not ended.empty
    assert [cid for cid, _ in ended.outbox] == ["m2"]
    again = command("m3", "Add", "a", {"amount": 2})
    shell.offer(again, 3.0)
    assert orjson.loads(shell.sent("m3:reply")[0])["version"] == 1
    assert orjson.loads(shell.sent("m2:reply")[0]) == {
        "messageId": reply_id(close), "correlationId": "corr-m2", "causationId": "m2",
        "success": True, "message": "ok", "data": {"total": 5}, "version": 2, "ended": True,
    }  # fmt: skip
    events = [orjson.loads(v[0]) for mid, v in shell.dispatched.items() if mid.endswith("m2:1")]
    assert [(e["type"], e["version"]) for e in events] == [("Closed", 2)]
    shell.confirm_all(4.0)
    assert shell.entities[close.entity].outbox == ()
    assert shell.entities[close.entity].version == 1


def test_an_end_with_nothing_to_dispatch_keeps_an_entry_until_marked() -> None:
    registry = Registry()
    registry.register("Drop")(lambda state, c: (End(), []))
    quiet = command("m1", "Drop", "a", {}, replyTo=None)  # no events, no reply
    d = decide(registry, Entity(3, {"total": 4}), None, quiet, 1.0)
    # an entry with nothing in it: the trace of the command until its receipt is written
    assert d.entity == Entity(0, None, (("m1", ()),)) and not d.entity.empty
    assert d.ended and d.applied and d.dispatch == ()
    assert d.receipt is not None and d.receipt.status == "COMPLETED" and not d.receipt.dispatched
    # a copy before the mark: a duplicate, no run
    again = decide(registry, d.entity, d.receipt, quiet, 2.0)
    assert again.duplicate and again.dispatch == () and not again.applied
    entity, receipt = mark_dispatched(d.entity, d.receipt, "m1", 3.0)
    assert entity.empty and receipt is not None and receipt.dispatched


def test_returning_the_class_end_is_a_transient_failure_naming_it() -> None:
    registry = Registry()
    registry.register("Close")(lambda state, c: (End, []))
    d = decide(registry, Entity(1, {}), None, command("m1", "Close", "a", {}), 1.0)
    assert d.receipt is not None and d.receipt.status == "PROCESSING"
    assert d.receipt.error is not None and "End(data)" in d.receipt.error


def test_outgoing_of_an_end_round_trips() -> None:
    # (the ended reply is an Outgoing like any other, stored in the outbox)
    out = Outgoing("r", "a", "m", b'{"ended":true}')
    assert Outgoing.from_json(out.to_json()) == out
