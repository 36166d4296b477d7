"""Entities that end (``seqkeeper.End``) under crashes anywhere, without a
broker: the world of ``test_command_crash`` (crashes that keep any prefix
of the changelog, batches produced in part, rebalances; at_least_once and
exactly_once) with two kinds of commands, ``Append`` (adds ``[messageId,
nonce]`` to the state, its event carries the nonce) and ``Close`` (ends the
entity, its event carries the state it ended). Whatever the crashes:

* every Append is applied once: its ``[messageId, nonce]`` is in exactly one
  life of its entity (a Close's event, or the state at the end), with its
  event's nonce; each life's versions count its commands;
* an entity whose last command was a Close has no record left (a
  tombstone), and no entity keeps an outbox;
* every receipt is COMPLETED and dispatched, every copy of an output is
  byte-identical, a reply of a Close says ``ended``; one more copy of each
  command later sends its stored reply and no event.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqkeeper import Command, End, Event, Registry
from seqkeeper.processors.command import receipt_id, unscoped
from seqkeeper.processors.envelope import output_id
from seqkeeper.state.command_records import CommandStore, entity_key
from tests.topologies.test_command_crash import (
    EVENTS,
    TENANTS,
    TOPICS,
    CommandWorld,
    Sent,
    TransactionalWorld,
    actions,
    record,
)
from tests.topologies.test_crash_consistency import LoggedStore, World


def lives() -> Registry:
    registry = Registry()

    @registry.register("Append")
    def append(state: Any, command: Command) -> tuple[Any, list[Event]]:
        nonce = random.random()
        return [*(state or []), [command.message_id, nonce]], [Event("Appended", nonce)]

    @registry.register("Close")
    def close(state: Any, command: Command) -> tuple[Any, list[Event]]:
        return End(state), [Event("Closed", state)]

    return registry


class Ending(CommandWorld):
    def __init__(self, inputs: list[Any]) -> None:
        self.failed: set[str] = set()
        self.registry = lives()
        World.__init__(self, inputs, self.SETTINGS)


class TransactionalEnding(TransactionalWorld):
    def __init__(self, inputs: list[Any]) -> None:
        self.failed: set[str] = set()
        self.registry = lives()
        World.__init__(self, inputs, self.SETTINGS)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Sent], list[Sent]]:
    sent: list[Sent] = []
    numbered = dict.fromkeys(TENANTS, 0)
    for _ in range(draw(st.integers(1, 12))):
        tenant = draw(st.sampled_from(TENANTS))
        kind = draw(st.sampled_from(["Append", "Append", "Close"]))
        sku = draw(st.sampled_from(["a", "b"]))
        sent.append(Sent(tenant, f"m{numbered[tenant]}", kind, sku, draw(st.booleans())))
        numbered[tenant] += 1
    delivery = [c for c in sent for _ in range(draw(st.integers(1, 3)))]
    return sent, draw(st.permutations(delivery))


def check(world: CommandWorld, sent: list[Sent]) -> None:
    store = CommandStore(LoggedStore(list(world.changelog)))
    out = world.outputs
    for topic in TOPICS:
        copies: dict[tuple[str, str], set[bytes]] = defaultdict(set)
        for rec in out[topic]:
            doc = orjson.loads(rec.value)
            copies[(doc.get("tenantId", topic), doc["messageId"])].add(rec.value)
        assert all(len(v) == 1 for v in copies.values()), topic
    events = {}
    for r in out[EVENTS]:
        doc = orjson.loads(r.value)
        events[(doc["tenantId"], doc["causationId"])] = doc
    if isinstance(world, TransactionalWorld):  # each event once
        ids = Counter(orjson.loads(r.value)["messageId"] for r in out[EVENTS])
        assert [m for m, n in ids.items() if n > 1] == []
    for entity_id in {c.entity for c in sent}:
        ended = [c for c in sent if c.entity == entity_id and c.kind == "Close"]
        record_ = store.store.get(0, entity_key(entity_id))
        entity = store.entity(0, entity_id)
        assert entity.outbox == () and entity.version == len(entity.state or [])
        if entity.state is None:  # ended last (or ended with nothing): no record at all
            assert record_ is None, entity_id
        found = [p for c in ended for p in events[(c.tenant, c.mid)]["data"] or []]
        found += entity.state or []
        appended = [c for c in sent if c.entity == entity_id and c.kind == "Append"]
        assert sorted(mid for mid, _ in found) == sorted(c.mid for c in appended), entity_id
        tenant = unscoped(entity_id)[0]
        for mid, nonce in found:
            assert events[(tenant, mid)]["data"] == nonce
        for c in ended:  # the Close's version: the life's length + 1
            life = events[(c.tenant, c.mid)]["data"] or []
            assert events[(c.tenant, c.mid)]["version"] == len(life) + 1
    assert list(store.pending_entities(0)) == []
    for c in sent:
        receipt = store.receipt(0, receipt_id(c.tenant, c.mid))
        assert receipt is not None and (receipt.status, receipt.dispatched) == ("COMPLETED", True)
        if c.reply:
            answer = [
                orjson.loads(r.value)
                for r in out[f"{c.tenant}.replies"]
                if orjson.loads(r.value)["messageId"] == output_id(c.tenant, c.mid, "reply")
            ]
            assert answer and answer[0]["success"]
            assert answer[0].get("ended", False) == (c.kind == "Close")


def run(world: CommandWorld, sent: list[Sent], script: list[tuple]) -> None:  # type: ignore[type-arg]
    for action in script:
        world.play(action)
    world.settle()
    check(world, sent)
    before = len(world.outputs[EVENTS])
    world.inputs += [record(len(world.inputs) + i, c) for i, c in enumerate(sent)]
    world.settle()
    check(world, sent)
    assert len(world.outputs[EVENTS]) == before  # copies: no handler ran again


scripts = st.lists(st.one_of(st.just(("record",)), actions), min_size=5, max_size=80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), scripts)
def test_at_least_once_ends_and_applies_each_command_once_whatever_crashes(
    work: tuple[list[Sent], list[Sent]],
    script: list[tuple],  # type: ignore[type-arg]
) -> None:
    sent, delivery = work
    run(Ending([record(i, c) for i, c in enumerate(delivery)]), sent, script)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), scripts)
def test_exactly_once_ends_and_applies_each_command_once_whatever_crashes(
    work: tuple[list[Sent], list[Sent]],
    script: list[tuple],  # type: ignore[type-arg]
) -> None:
    sent, delivery = work
    run(TransactionalEnding([record(i, c) for i, c in enumerate(delivery)]), sent, script)
