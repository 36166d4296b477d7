"""The command topology under crashes anywhere, without a broker.

The world of ``test_crash_consistency`` (an in-memory store whose writes
go to a simulated changelog, the runtime's outbox cycle, crashes that keep
any prefix of what the broker had not acknowledged, batches produced in
part, the next batch taken meanwhile) runs the command worker:

* at_least_once: a crash between any two writes (entity, receipt, their
  indexes, the marks of a confirmation), in the middle of producing a
  batch, or between cycles; every start runs the assignment sweep, and the
  input is read again from the committed offset;
* exactly_once: what the transactions give (``runtime/task.py``, E2-E4,
  tested in ``tests/runtime/test_task_exactly_once.py``): a cycle's
  confirmations, changelog writes, outputs and input position become
  visible together or not at all, so a crash drops everything since the
  last cycle; the committed events and dead letters hold each messageId
  once (a copy of a command sends none of them again).

Quiet commands (a handler that emits no event, a command without
``replyTo``) are among them: nothing to send, yet applied once.

The input holds every command one to three times, in any order, so copies
arrive before and after their command's confirmation; at the end one more
copy of each arrives once everything is confirmed. Handlers are not
deterministic (each application draws a nonce), so a second application
shows. Whatever the crashes, per tenant and messageId:

* an applied command is in its entity's state once (entity version = the
  applied commands), and every command that should apply did;
* its events carry that application's nonce and version; all copies of an
  output messageId (events, replies, dead letters) are byte-identical;
* its receipt exists, is dispatched, has the status the command deserves,
  and keeps the reply that was sent (a copy asking for it gets the same
  bytes).
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seqkeeper.processors.command import (
    Command,
    DomainError,
    Event,
    Registry,
    entity_key,
    receipt_id,
    unscoped,
)
from seqkeeper.processors.envelope import output_id
from seqkeeper.runtime.protocol import Batch
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.topics import Record
from seqkeeper.topologies.command_worker import CommandTopology
from tests.topologies.test_crash_consistency import LoggedStore, World, actions_for

CONFIG = Settings.of(bootstrap="unused", topology="commands", command_retry_delay=0.5)
EVENTS = CONFIG.commands.events_topic
DLQ = CONFIG.commands.command_dlq_topic
TENANTS = ("t1", "t2")
TOPICS = (EVENTS, DLQ, *(f"{t}.replies" for t in TENANTS))
#: what each kind of command must come to: (applied, receipt status)
KINDS = {
    "Append": (True, "COMPLETED"),
    "Quiet": (True, "COMPLETED"),  # applied, emits no event (quiet too when sent without replyTo)
    "Flaky": (True, "COMPLETED"),  # fails transiently on its first run ever, then applies
    "Refuse": (False, "FAILED"),  # a DomainError
    "Nope": (False, "FAILED"),  # no handler: dead-lettered
    "Late": (False, "EXPIRED"),  # expiresAt passed
    "Conflict": (False, "FAILED"),  # expectedVersion never the entity's
}


def handlers(failed: set[str]) -> Registry:
    """Appends ``[messageId, nonce]`` to the entity's state and emits the
    nonce: a second application of a command would show."""
    registry = Registry()

    @registry.register("Append")
    def append(state: Any, command: Command) -> tuple[Any, list[Event]]:
        nonce = random.random()
        return [*(state or []), [command.message_id, nonce]], [Event("Appended", nonce)]

    @registry.register("Quiet")
    def quiet(state: Any, command: Command) -> tuple[Any, list[Event]]:
        return append(state, command)[0], []

    @registry.register("Flaky")
    def flaky(state: Any, command: Command) -> tuple[Any, list[Event]]:
        if command.receipt_id not in failed:
            failed.add(command.receipt_id)
            raise ConnectionError("away for a moment")
        return append(state, command)

    @registry.register("Refuse")
    def refuse(state: Any, command: Command) -> tuple[Any, list[Event]]:
        raise DomainError("refused", {"why": "a rule"})

    registry.register("Late")(append)
    registry.register("Conflict")(append)
    return registry


def envelope(tenant: str, mid: str, kind: str, sku: str, reply: bool) -> bytes:
    doc: dict[str, Any] = {
        "messageId": mid,
        "commandType": kind,
        "schemaVersion": 1,
        "correlationId": f"corr-{tenant}-{mid}",
        "partitionKey": sku,
        "tenantId": tenant,
        "payload": {},
    }
    if reply:
        doc["replyTo"] = f"{tenant}.replies"
    if kind == "Late":
        doc["expiresAt"] = 1000  # epoch ms: long past
    if kind == "Conflict":
        doc["expectedVersion"] = 10_000
    return orjson.dumps(doc)


class Sent:
    """A command as the test sent it."""

    def __init__(self, tenant: str, mid: str, kind: str, sku: str, reply: bool) -> None:
        self.tenant, self.mid, self.kind, self.sku, self.reply = tenant, mid, kind, sku, reply
        self.value = envelope(tenant, mid, kind, sku, reply)

    @property
    def entity(self) -> str:
        return entity_key(self.tenant, self.sku)

    def __repr__(self) -> str:
        reply = "replyTo" if self.reply else "no replyTo"
        return f"Sent({self.tenant}/{self.mid} {self.kind} on {self.sku}, {reply})"


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Sent], list[Sent]]:
    """Commands of two tenants over two entities (each tenant numbers its
    messageIds from m0: the tenants' messageIds collide), and a delivery:
    each one to three times, shuffled."""
    sent: list[Sent] = []
    numbered = dict.fromkeys(TENANTS, 0)
    for _ in range(draw(st.integers(1, 12))):
        tenant = draw(st.sampled_from(TENANTS))
        kind = draw(st.sampled_from(["Append", "Append", "Quiet", *KINDS]))
        sku = draw(st.sampled_from(["a", "b"]))
        sent.append(Sent(tenant, f"m{numbered[tenant]}", kind, sku, draw(st.booleans())))
        numbered[tenant] += 1
    delivery = [c for c in sent for _ in range(draw(st.integers(1, 3)))]
    return sent, draw(st.permutations(delivery))


def record(offset: int, command: Sent) -> Record:
    headers = (("tenant", command.tenant.encode()),)
    return Record("commands.in", 0, offset, command.sku.encode(), command.value, headers, 0)


class CommandWorld(World):
    """The world of ``test_crash_consistency`` with the command worker."""

    SETTINGS = CONFIG

    def __init__(self, inputs: list[Record]) -> None:
        self.failed: set[str] = set()  # Flaky commands that failed once already
        self.registry = handlers(self.failed)
        super().__init__(inputs, self.SETTINGS)

    def start(self) -> None:
        topology = CommandTopology(
            self.config, CommandStore(LoggedStore(self.changelog)), self.registry
        )
        confirm = topology.confirm
        topology.confirm = lambda batch, now=None: confirm(batch, self.wall)  # type: ignore[method-assign]
        self.topology = topology  # type: ignore[assignment]
        topology.on_assigned({0})  # the sweep
        self.position = self.committed

    @property
    def commands(self) -> CommandTopology:
        return self.topology  # type: ignore[return-value]

    def record(self) -> None:
        if self.position < len(self.inputs):
            rec = self.inputs[self.position]
            self.wall += 0.01
            waiting = self.commands.on_record(
                0, rec.offset, rec.key, rec.value, list(rec.headers), None, self.wall
            )
            assert waiting is None  # (sync handlers)
            self.position += 1

    def tick(self, seconds: float) -> None:
        self.wall += seconds
        assert self.commands.on_tick({}, self.wall) is None

    def stop(self) -> None:
        """A clean stop: a last cycle, then a start on the same state."""
        self.commit()
        self.start()

    def rebalance(self) -> None:
        """The partition revoked and assigned again to the same worker (a
        last cycle and a commit first): the sweep runs without a crash."""
        self.commit()
        self.commands.on_revoked()
        self.commands.on_assigned({0})

    def play(self, action: tuple) -> None:  # type: ignore[type-arg]
        if action[0] == "rebalance":
            self.rebalance()
        else:
            super().play(action)

    def settle(self) -> None:
        """Everything read, retried, produced and confirmed."""
        while self.position < len(self.inputs):
            self.record()
        self.commit()
        for _ in range(3):  # retries come due
            self.tick(100.0)
            self.commit()


class TransactionalWorld(CommandWorld):
    """exactly_once: a cycle confirms its batch as it takes it (E2), and its
    changelog writes, outputs and input position commit together (E3); a
    crash drops whatever the last cycle did not commit."""

    SETTINGS = CONFIG.with_overrides(processing_guarantee="exactly_once")

    def cycle(self, delivered: dict[str, int] | None = None) -> None:
        batch = self.topology.take()
        self.topology.confirm(batch)
        self.topology.settle()
        self.transact(batch)

    def transact(self, batch: Batch) -> None:
        self.durable = len(self.changelog)
        for topic, key, value, headers in batch.records:
            out = self.outputs[topic]
            out.append(Record(topic, 0, len(out), key, value, tuple(headers or ()), 0))
        self.committed = self.position

    def produce(self, batch: Batch, delivered: dict[str, int] | None = None) -> None:
        raise AssertionError("exactly_once never produces outside a cycle")

    def crash(self, cut: float, delivered: dict[str, int] | None) -> None:
        del self.changelog[self.durable :]  # the open transaction aborted
        self.crashes += 1
        self.start()

    def crash_pipelined(self, more: int, cut: float, delivered: dict[str, int]) -> None:
        for _ in range(more):  # read, decided, not committed
            self.record()
        self.crash(cut, None)


actions = st.one_of(st.just(("rebalance",)), actions_for(TOPICS))


def check(world: CommandWorld, sent: list[Sent]) -> None:
    """The invariants of the module docstring, against what was sent."""
    store = CommandStore(LoggedStore(list(world.changelog)))
    out = world.outputs
    # every copy of an output messageId is byte-identical
    for topic in TOPICS:
        copies: dict[tuple[str, str], set[bytes]] = defaultdict(set)
        for rec in out[topic]:
            doc = orjson.loads(rec.value)
            tenant = doc.get("tenantId", topic.removesuffix(".replies"))
            copies[(tenant, doc["messageId"])].add(
                rec.value + repr(sorted(rec.headers)).encode() if topic == DLQ else rec.value
            )
        differ = {ident: len(values) for ident, values in copies.items() if len(values) > 1}
        assert not differ, (topic, differ)
        if isinstance(world, TransactionalWorld) and topic in (EVENTS, DLQ):  # each once
            ids = [orjson.loads(r.value)["messageId"] for r in out[topic]]
            if topic == DLQ:  # (a dead letter's value is the command: its id is the command's)
                ids = [(r.value, r.headers) for r in out[topic]]  # type: ignore[misc]
            assert len(ids) == len(set(ids)), (topic, sorted(ids))
    events = {
        (orjson.loads(r.value)["tenantId"], orjson.loads(r.value)["messageId"]): r.value
        for r in out[EVENTS]
    }
    replies = {
        (t, orjson.loads(r.value)["messageId"]): orjson.loads(r.value)
        for t in TENANTS
        for r in out[f"{t}.replies"]
    }
    dead = {
        (orjson.loads(r.value)["tenantId"], orjson.loads(r.value)["messageId"]) for r in out[DLQ]
    }
    entities = {c.entity for c in sent}
    kinds = {(c.tenant, c.mid): c.kind for c in sent}
    for entity_id in entities:
        entity = store.entity(0, entity_id)
        mids = [mid for mid, _ in entity.state or []]
        expected = [c.mid for c in sent if c.entity == entity_id and KINDS[c.kind][0]]
        # applied once each, nothing lost, the version counts them
        assert sorted(mids) == sorted(expected), (entity_id, mids, expected)
        assert entity.version == len(mids) and entity.outbox == ()
        for version, (mid, nonce) in enumerate(entity.state or [], 1):
            tenant = unscoped(entity_id)[0]
            event = events.get((tenant, output_id(tenant, mid, "1")))
            assert (event is None) == (kinds[(tenant, mid)] == "Quiet"), (tenant, mid)
            if event is not None:
                assert orjson.loads(event)["data"] == nonce, (tenant, mid)
                assert orjson.loads(event)["version"] == version, (tenant, mid)
            answer = replies.get((tenant, output_id(tenant, mid, "reply")))
            if answer is not None:
                assert answer["success"] and answer["version"] == version
                assert [mid, nonce] in answer["data"]
    assert list(store.pending_entities(0)) == []
    for c in sent:
        applied, status = KINDS[c.kind]
        receipt = store.receipt(0, receipt_id(c.tenant, c.mid))
        assert receipt is not None, (c.tenant, c.mid, c.kind)
        assert (receipt.status, receipt.dispatched) == (status, True), (c.tenant, c.mid, c.kind)
        assert receipt.correlation_id == f"corr-{c.tenant}-{c.mid}"
        emits = applied and c.kind != "Quiet"
        assert ((c.tenant, output_id(c.tenant, c.mid, "1")) in events) == emits
        assert ((c.tenant, c.mid) in dead) == (c.kind == "Nope")
        if c.reply:
            answer = replies[(c.tenant, output_id(c.tenant, c.mid, "reply"))]
            assert answer["success"] == applied
            assert receipt.reply is not None and orjson.loads(receipt.reply.value) == answer
        else:
            assert (c.tenant, output_id(c.tenant, c.mid, "reply")) not in replies


def run(world: CommandWorld, sent: list[Sent], script: list[tuple]) -> None:  # type: ignore[type-arg]
    for action in script:
        world.play(action)
    world.settle()
    check(world, sent)
    # one more copy of each command, everything confirmed: nothing applied,
    # the stored reply sent again
    before = {t: len(world.outputs[t]) for t in TOPICS}
    world.inputs += [record(len(world.inputs) + i, c) for i, c in enumerate(sent)]
    world.settle()
    check(world, sent)
    again = [
        orjson.loads(r.value)["messageId"]
        for t in TENANTS
        for r in world.outputs[f"{t}.replies"][before[f"{t}.replies"] :]
    ]
    assert sorted(again) == sorted(output_id(c.tenant, c.mid, "reply") for c in sent if c.reply)
    assert len(world.outputs[EVENTS]) == before[EVENTS]


scripts = st.lists(st.one_of(st.just(("record",)), actions), min_size=5, max_size=80)
#: Found by this test on the code before the fix: a
#: crash keeps the entity record of ``m0`` (state, version and outbox) but
#: not its receipt; the sweep dispatches the outbox and the rebalance's
#: cycle confirms it, leaving no trace of ``m0`` but its effect; the copy
#: read again from the committed offset was applied a second time.
SWEPT_WITHOUT_A_RECEIPT = (
    ([m0 := Sent("t1", "m0", "Append", "a", True)], [m0]),
    [("record",), ("crash", 0.5, None), ("rebalance",)],
)
#: The same cut in a retry: the successful attempt's entity kept beside the
#: PROCESSING receipt of the failed one; the mark made that receipt
#: "dispatched" without a status or reply (a copy got no reply).
RETRY_SWEPT_WHILE_PROCESSING = (
    (
        [m0 := Sent("t1", "m0", "Flaky", "a", True), m1 := Sent("t1", "m1", "Flaky", "a", False)],
        [m0, m1],
    ),
    [("record",), ("record",), ("rebalance",), ("tick",), ("crash", 0.25, None)],
)

#: Found by this test on the code before the fix: a quiet
#: command (no event, no replyTo) left no outbox entry; a crash kept its
#: entity record (the new version) but not its receipt, and the copy read
#: again from the committed offset was applied a second time.
QUIET_CUT_BEFORE_ITS_RECEIPT = (
    ([m0 := Sent("t1", "m0", "Quiet", "a", False)], [m0]),
    [("record",), ("crash", 0.25, None)],
)
#: The same cut, its empty entry swept and confirmed before the copy is read.
QUIET_SWEPT_BEFORE_ITS_COPY = (
    ([m0 := Sent("t1", "m0", "Quiet", "a", False)], [m0]),
    [("record",), ("crash", 0.5, None), ("rebalance",)],
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), scripts)
@example(*SWEPT_WITHOUT_A_RECEIPT)
@example(*RETRY_SWEPT_WHILE_PROCESSING)
@example(*QUIET_CUT_BEFORE_ITS_RECEIPT)
@example(*QUIET_SWEPT_BEFORE_ITS_COPY)
def test_at_least_once_applies_each_command_once_whatever_crashes(
    work: tuple[list[Sent], list[Sent]],
    script: list[tuple],  # type: ignore[type-arg]
) -> None:
    sent, delivery = work
    world = CommandWorld([record(i, c) for i, c in enumerate(delivery)])
    run(world, sent, script)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), scripts)
@example(*SWEPT_WITHOUT_A_RECEIPT)
@example(*RETRY_SWEPT_WHILE_PROCESSING)
@example(*QUIET_CUT_BEFORE_ITS_RECEIPT)
@example(*QUIET_SWEPT_BEFORE_ITS_COPY)
def test_exactly_once_applies_each_command_once_whatever_crashes(
    work: tuple[list[Sent], list[Sent]],
    script: list[tuple],  # type: ignore[type-arg]
) -> None:
    sent, delivery = work
    world = TransactionalWorld([record(i, c) for i, c in enumerate(delivery)])
    run(world, sent, script)
