"""Properties of the command handler core (processors/command.py)."""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from typing import Any

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from seqkeeper.processors import inventory
from seqkeeper.processors.command import (
    Command,
    CommandReason,
    Entity,
    Event,
    Outgoing,
    Receipt,
    Registry,
    RetryPolicy,
    decide,
    entity_key,
    mark_dispatched,
    parse_command,
    receipt_id,
    unscoped,
)
from seqkeeper.processors.envelope import InvalidMessage, output_id


def envelope(mid: str, ctype: str, sku: str, payload: Any, **extra: Any) -> bytes:
    doc = {
        "messageId": mid,
        "commandType": ctype,
        "schemaVersion": 1,
        "correlationId": f"corr-{mid}",
        "partitionKey": sku,
        "tenantId": "t1",
        "replyTo": "replies",
        "payload": payload,
    }
    doc.update(extra)
    return orjson.dumps(doc)


def command(mid: str, ctype: str, sku: str, payload: Any, **extra: Any) -> Command:
    return parse_command(sku.encode(), envelope(mid, ctype, sku, payload, **extra))


class Shell:
    """Applies decisions like the worker does, in memory: entities by entity
    key, receipts by receipt id, dispatched messages by their messageId
    (which names the command's tenant)."""

    def __init__(self, registry: Registry = inventory.registry) -> None:
        self.registry = registry
        self.entities: dict[str, Entity] = defaultdict(Entity)
        self.receipts: dict[str, Receipt] = {}
        self.dispatched: dict[str, list[bytes]] = defaultdict(list)
        self.dead: list[tuple[str, str, str]] = []
        self.applied: list[str] = []

    def offer(
        self, cmd: Command, now: float, retrying: bool = False, transactional: bool = False
    ) -> None:
        d = decide(
            self.registry,
            self.entities[cmd.entity],
            self.receipts.get(cmd.receipt_id),
            cmd,
            now,
            RetryPolicy(attempts=3),
            retrying,
            transactional=transactional,
        )
        if d.entity is not None:
            self.entities[cmd.entity] = d.entity
        if d.receipt is not None:
            self.receipts[cmd.receipt_id] = d.receipt
        for out in d.dispatch:
            self.dispatched[out.message_id].append(out.value)
        if d.dead_letter:
            self.dead.append(d.dead_letter)
        if d.applied:
            self.applied.append(cmd.receipt_id)

    def receipt(self, mid: str, tenant: str = "t1") -> Receipt:
        return self.receipts[receipt_id(tenant, mid)]

    def sent(self, name: str, tenant: str = "t1") -> list[bytes]:
        """What was sent as output ``<messageId>:<suffix>`` of the tenant's command."""
        mid, _, suffix = name.rpartition(":")
        return self.dispatched[output_id(tenant, mid, suffix)]

    def confirm_all(self, now: float) -> None:
        for key, entity in list(self.entities.items()):
            tenant = unscoped(key)[0]
            for cid, _ in entity.outbox:
                rid = receipt_id(tenant, cid)
                e, r = mark_dispatched(self.entities[key], self.receipts.get(rid), cid, now)
                self.entities[key] = e
                if r is not None:
                    self.receipts[rid] = r

    def retry_due(self, now: float) -> None:
        for r in list(self.receipts.values()):
            if r.status == "PROCESSING" and r.retry_at is not None and r.retry_at <= now:
                assert r.value is not None
                sku = orjson.loads(r.value)["partitionKey"]
                self.offer(parse_command(sku.encode(), r.value), now, retrying=True)


@st.composite
def storms(draw: st.DrawFn) -> tuple[list[Command], list[Command]]:
    """Distinct commands over a few SKUs of two tenants, and a delivery: each
    1-5 times, shuffled. Each tenant numbers its messageIds from c0, so the
    tenants' messageIds collide."""
    commands: list[Command] = []
    numbered = {"t1": 0, "t2": 0}
    for _ in range(draw(st.integers(1, 25))):
        tenant = draw(st.sampled_from(["t1", "t2"]))
        sku = draw(st.sampled_from(["a", "b", "c"]))
        kind = draw(st.sampled_from(["AddStock", "ReserveInventory", "ReleaseInventory"]))
        order = f"o{draw(st.integers(0, 4))}"
        qty = draw(st.integers(1, 5))
        payload = {"quantity": qty, "orderId": order}
        mid = f"c{numbered[tenant]}"
        numbered[tenant] += 1
        commands.append(command(mid, kind, sku, payload, tenantId=tenant))
    deliveries = [c for c in commands for _ in range(draw(st.integers(1, 5)))]
    return commands, draw(st.permutations(deliveries))


def reference(commands: list[Command], order: list[Command]) -> dict[str, Any]:
    """Stock per entity applying each (tenant, messageId) once, in
    first-arrival order."""
    state: dict[str, Any] = {}
    seen: set[tuple[str, str]] = set()
    for c in order:
        if (c.tenant_id, c.message_id) in seen:
            continue
        seen.add((c.tenant_id, c.message_id))
        handler = inventory.registry.handlers[(c.command_type, 1)]
        with contextlib.suppress(inventory.DomainError):
            state[c.entity], _ = handler(state.get(c.entity), c)
    return state


@settings(max_examples=200)
@given(storms(), st.lists(st.booleans(), min_size=10, max_size=10))
def test_duplicate_storms_apply_each_command_once(
    storm: tuple[list[Command], list[Command]], confirms: list[bool]
) -> None:
    commands, delivery = storm
    shell = Shell()
    for i, c in enumerate(delivery):
        shell.offer(c, 100.0 + i)
        if confirms[i % len(confirms)]:
            shell.confirm_all(100.0 + i)
    shell.confirm_all(1000.0)
    assert len(shell.applied) == len(set(shell.applied))  # each at most once
    expected = reference(commands, delivery)
    for key, entity in shell.entities.items():
        assert entity.outbox == ()
        state = entity.state or {"available": 0, "reserved": {}}
        assert state == (expected.get(key) or {"available": 0, "reserved": {}})
        assert state["available"] >= 0  # the stock invariant
        assert entity.version == sum(1 for m in shell.applied if shell.receipts[m].entity == key)
    for mid, values in shell.dispatched.items():
        assert len(set(values)) == 1, mid  # every dispatch is byte-identical
    for c in commands:  # every command answered (its reply dispatched at least once)
        assert shell.sent(f"{c.message_id}:reply", c.tenant_id)
        assert shell.receipts[c.receipt_id].status in ("COMPLETED", "FAILED")
    # a receipt per (tenant, messageId): one tenant's command never hides another's
    assert len(shell.receipts) == len(commands)
    assert all(shell.receipts[c.receipt_id].entity == c.entity for c in commands)


@given(st.text(), st.text(), st.text(), st.text())
def test_receipt_ids_are_unique_per_tenant_and_message_id(
    tenant: str, mid: str, other_tenant: str, other_mid: str
) -> None:
    """A receipt id gives back its tenant and messageId (so two differ unless
    both do), scoped as entity keys are."""
    rid = receipt_id(tenant, mid)
    assert unscoped(rid) == (tenant, mid) and rid == entity_key(tenant, mid)
    same = (tenant, mid) == (other_tenant, other_mid)
    assert (receipt_id(other_tenant, other_mid) == rid) == same
    assert receipt_id("a/b", "c") != receipt_id("a", "b/c")  # a separator alone would not do
    with pytest.raises(ValueError):
        unscoped("m1")  # a bare messageId is no receipt id


@settings(max_examples=100)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=12), st.integers(0, 2**32))
def test_transient_failures_are_retried_then_dead_lettered(failures: list[int], seed: int) -> None:
    """A handler that fails a number of times: retried with backoff while
    attempts remain (3), then FAILED and dead-lettered; never applied twice."""
    registry = Registry()
    calls: dict[str, int] = defaultdict(int)

    @registry.register("Flaky")
    def flaky(state: Any, cmd: Command) -> tuple[Any, list[Event]]:
        calls[cmd.message_id] += 1
        if calls[cmd.message_id] <= cmd.payload["fail"]:
            raise RuntimeError("transient")
        return (state or 0) + 1, [Event("Done")]

    shell = Shell(registry)
    cmds = [command(f"f{i}", "Flaky", "x", {"fail": n}) for i, n in enumerate(failures)]
    now = 0.0
    for c in cmds:
        shell.offer(c, now)
        shell.offer(c, now)  # a redelivery while in retry does nothing
    for _ in range(10):
        now += 60.0
        shell.retry_due(now)
    succeeded = [n for n in failures if n < 3]
    assert shell.entities[cmds[0].entity].state == (len(succeeded) or None)
    assert len(shell.dead) == len(failures) - len(succeeded)
    assert all(d[0] == CommandReason.HANDLER_FAILED and "RuntimeError" in d[2] for d in shell.dead)
    for c, n in zip(cmds, failures, strict=True):
        assert calls[c.message_id] == min(n + 1, 3)
        assert shell.receipt(c.message_id).status == ("COMPLETED" if n < 3 else "FAILED")
    assert RetryPolicy(base=1, cap=5).delay(1) == 1 and RetryPolicy(base=1, cap=5).delay(9) == 5


def test_expired_version_conflict_and_domain_failure_reply_and_change_nothing() -> None:
    shell = Shell()
    shell.offer(command("add", "AddStock", "a", {"quantity": 5}), 10.0)
    expired = command("old", "AddStock", "a", {"quantity": 5}, expiresAt=5_000)
    shell.offer(expired, 10.0)
    conflict = command("cas", "AddStock", "a", {"quantity": 5}, expectedVersion=0)
    shell.offer(conflict, 10.0)
    too_many = command("r", "ReserveInventory", "a", {"quantity": 9, "orderId": "o"})
    shell.offer(too_many, 10.0)
    entity = shell.entities[expired.entity]
    assert entity.version == 1 and entity.state == {"available": 5, "reserved": {}}
    statuses = {m: shell.receipt(m).status for m in ("old", "cas", "r")}
    assert statuses == {"old": "EXPIRED", "cas": "FAILED", "r": "FAILED"}
    answer = {m: orjson.loads(shell.sent(f"{m}:reply")[0]) for m in ("old", "cas", "r")}
    assert answer["old"]["message"] == "expired" and not answer["old"]["success"]
    assert "expected version 0" in answer["cas"]["message"]
    assert "version 1" in answer["cas"]["message"]
    assert answer["r"]["data"] == {"available": 5} and "insufficient" in answer["r"]["message"]
    assert shell.dead == []  # business outcomes are replies, not dead letters


def test_a_copy_after_dispatch_is_dropped_and_resends_the_stored_reply() -> None:
    shell = Shell()
    c = command("add", "AddStock", "a", {"quantity": 1})
    shell.offer(c, 1.0)
    shell.confirm_all(2.0)
    assert shell.receipt("add").dispatched and shell.entities[c.entity].outbox == ()
    shell.offer(c, 3.0)
    assert shell.applied == [c.receipt_id] and len(shell.sent("add:reply")) == 2
    assert len(shell.sent("add:1")) == 1  # events are not sent again
    no_reply = parse_command(b"a", envelope("add", "AddStock", "a", {"quantity": 1}, replyTo=None))
    shell.offer(no_reply, 4.0)
    assert len(shell.sent("add:reply")) == 2


def test_unknown_type_and_unsupported_version_are_dead_lettered() -> None:
    shell = Shell()
    shell.offer(command("u", "Teleport", "a", {}), 1.0)
    shell.offer(command("v", "AddStock", "a", {"quantity": 1}, schemaVersion=2), 1.0)
    assert [d[0] for d in shell.dead] == [
        CommandReason.UNKNOWN_COMMAND_TYPE,
        CommandReason.UNSUPPORTED_SCHEMA_VERSION,
    ]
    assert "supported: 1" in shell.dead[1][1]
    assert shell.entities[command("x", "AddStock", "a", {}).entity].version == 0


def test_tenants_are_isolated() -> None:
    shell = Shell()
    shell.offer(command("a1", "AddStock", "sku", {"quantity": 5}), 1.0)
    other = command("b1", "ReserveInventory", "sku", {"quantity": 5, "orderId": "o"}, tenantId="t2")
    shell.offer(other, 2.0)  # tenant t2's "sku" is another entity: no stock there
    assert shell.receipt("b1", "t2").status == "FAILED"
    assert shell.entities[command("x", "AddStock", "sku", {}).entity].state["available"] == 5
    with pytest.raises(InvalidMessage) as info:  # a gateway-set tenant header must match
        parse_command(b"sku", envelope("c", "AddStock", "sku", {}), tenant=b"t2")
    assert info.value.reason == CommandReason.TENANT_MISMATCH


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (b"a", None, CommandReason.INVALID_ENVELOPE),
        (b"a", b"{", CommandReason.INVALID_ENVELOPE),
        (b"a", b"[]", CommandReason.INVALID_ENVELOPE),
        (b"a", envelope("m", "AddStock", "a", {}, messageId=""), CommandReason.INVALID_ENVELOPE),
        (
            b"a",
            envelope("m", "AddStock", "a", {}, schemaVersion="1"),
            CommandReason.INVALID_ENVELOPE,
        ),
        (
            b"a",
            envelope("m", "AddStock", "a", {}, expiresAt="soon"),
            CommandReason.INVALID_ENVELOPE,
        ),
        (
            b"a",
            envelope("m", "AddStock", "a", {}, expectedVersion=-1),
            CommandReason.INVALID_ENVELOPE,
        ),
        (b"a", orjson.dumps({"messageId": "m"}), CommandReason.INVALID_ENVELOPE),
        (b"b", envelope("m", "AddStock", "a", {}), CommandReason.KEY_MISMATCH),
        (None, envelope("m", "AddStock", "a", {}), CommandReason.KEY_MISMATCH),
    ],
)
def test_invalid_envelopes(key: bytes | None, value: bytes | None, reason: str) -> None:
    with pytest.raises(InvalidMessage) as info:
        parse_command(key, value)
    assert info.value.reason == reason


def test_outgoing_round_trips() -> None:
    out = Outgoing(None, "k", "m:1", b'{"a":1}')
    assert Outgoing.from_json(orjson.loads(orjson.dumps(out.to_json()))) == out


def test_a_copy_before_dispatch_sends_the_stored_messages_again() -> None:
    shell = Shell()
    c = command("add", "AddStock", "a", {"quantity": 1})
    shell.offer(c, 1.0)
    shell.offer(c, 2.0)  # not yet confirmed: the outbox goes out again
    assert len(shell.sent("add:1")) == 2 and len(shell.sent("add:reply")) == 2
    del shell.receipts[c.receipt_id]  # a crash cut the receipt write after the entity write
    shell.offer(c, 3.0)
    assert shell.applied == [c.receipt_id] and len(shell.sent("add:1")) == 3
    assert shell.receipt("add").status == "COMPLETED"  # repaired
    shell.confirm_all(4.0)
    assert shell.receipt("add").dispatched and shell.entities[c.entity].outbox == ()


def test_an_expired_command_of_an_unknown_type_is_still_dead_lettered() -> None:
    shell = Shell()
    shell.offer(command("u", "Teleport", "a", {}, expiresAt=5_000), 10.0)
    assert [d[0] for d in shell.dead] == [CommandReason.UNKNOWN_COMMAND_TYPE]


class TransactionalShell(Shell):
    """The worker under exactly_once, in memory: decisions are made on the
    state in memory; a commit (a take: every outbox entry confirmed, then
    one transaction) makes that state, its outputs and the input position
    durable together; a kill -9 loses everything since the last commit, and
    the input is read again from the committed position."""

    def __init__(self) -> None:
        super().__init__()
        self.committed: list[tuple[str, bytes]] = []  # (messageId, bytes), as read_committed
        self.durable: tuple[dict[str, Entity], dict[str, Receipt], int] = ({}, {}, 0)
        self.position = 0

    def offer(
        self, cmd: Command, now: float, retrying: bool = False, transactional: bool = True
    ) -> None:
        before = {k: list(v) for k, v in self.dispatched.items()}
        super().offer(cmd, now, retrying, transactional)
        self.position += 1
        self.open = getattr(self, "open", [])
        for mid, values in self.dispatched.items():
            self.open += [(mid, v) for v in values[len(before.get(mid, [])) :]]

    def commit(self, now: float) -> None:
        self.confirm_all(now)
        self.committed += getattr(self, "open", [])
        self.open = []
        self.durable = (dict(self.entities), dict(self.receipts), self.position)

    def kill(self) -> None:
        entities, receipts, self.position = self.durable
        self.entities = defaultdict(Entity, entities)
        self.receipts = dict(receipts)
        self.open = []
        self.dispatched = defaultdict(list)  # (only self.committed counts from here)


@settings(max_examples=200)
@given(storms(), st.lists(st.sampled_from(["go", "go", "go", "commit", "kill"]), max_size=60))
def test_under_exactly_once_a_read_committed_consumer_sees_each_event_once(
    storm: tuple[list[Command], list[Command]], steps: list[str]
) -> None:
    """However often each command is delivered, wherever the worker commits
    and is killed: the committed events hold each messageId once, every
    command is answered (again only for a copy read after its answer was
    taken: at most once per delivery), and the state is the reference's."""
    commands, delivery = storm
    shell = TransactionalShell()
    now = 100.0
    for step in [*steps, *["go"] * len(delivery)]:  # (then the rest of the input)
        now += 1.0
        if step == "kill":
            shell.kill()
        elif step == "commit":
            shell.commit(now)
        elif shell.position < len(delivery):
            shell.offer(delivery[shell.position], now)
    assume(shell.position == len(delivery))
    shell.commit(now + 1.0)
    ids = [mid for mid, _ in shell.committed if not mid.endswith(":reply")]
    assert len(ids) == len(set(ids)), sorted(m for m in ids if ids.count(m) > 1)
    replies = Counter(mid for mid, _ in shell.committed if mid.endswith(":reply"))
    for c in commands:
        assert shell.receipts[c.receipt_id].dispatched
        asked = sum(1 for d in delivery if d.receipt_id == c.receipt_id)
        assert 1 <= replies[output_id(c.tenant_id, c.message_id, "reply")] <= asked
    expected = reference(commands, delivery)
    for key, entity in shell.entities.items():
        assert entity.outbox == ()
        state = entity.state or {"available": 0, "reserved": {}}
        assert state == (expected.get(key) or {"available": 0, "reserved": {}})


def test_under_exactly_once_a_copy_sends_only_a_reply_it_asks_for_after_the_answer() -> None:
    shell = Shell()
    c = command("add", "AddStock", "a", {"quantity": 1})
    shell.offer(c, 1.0, transactional=True)
    shell.offer(c, 2.0, transactional=True)  # before the take: in its transaction already
    assert len(shell.sent("add:1")) == 1 and len(shell.sent("add:reply")) == 1
    shell.confirm_all(3.0)
    shell.offer(c, 4.0, transactional=True)  # after: the stored reply, asked for again
    assert len(shell.sent("add:reply")) == 2 and len(shell.sent("add:1")) == 1
    assert shell.applied == [c.receipt_id]
    del shell.receipts[c.receipt_id]  # (the receipt write cut: repaired, still nothing sent)
    shell.entities[c.entity] = Entity(1, {"available": 1}, (("add", ()),))
    shell.offer(c, 5.0, transactional=True)
    assert shell.receipt("add").status == "COMPLETED" and len(shell.sent("add:1")) == 1
    assert len(shell.sent("add:reply")) == 2


@pytest.mark.parametrize("transactional", [False, True])
def test_a_quiet_command_keeps_an_empty_entry_until_marked_unless_transactional(
    transactional: bool,
) -> None:
    registry = Registry()
    registry.register("Touch")(lambda state, c: ({"touched": True}, []))  # no events
    quiet = command("q", "Touch", "a", {}, replyTo=None)  # and no reply
    d = decide(registry, Entity(2, {}), None, quiet, 1.0, transactional=transactional)
    assert d.applied and d.dispatch == () and d.receipt is not None
    assert d.receipt.status == "COMPLETED"
    if transactional:  # entity and receipt commit together: no trace needed
        assert d.entity == Entity(3, {"touched": True}) and d.receipt.dispatched
        assert not d.entry
        return
    # at_least_once: the entity is written before the receipt, the entry is
    # the command's trace if a crash cuts the receipt
    assert d.entity == Entity(3, {"touched": True}, (("q", ()),)) and d.entry
    assert not d.receipt.dispatched
    cut = decide(registry, d.entity, None, quiet, 2.0)  # a copy, the receipt lost
    assert cut.duplicate and cut.dispatch == () and not cut.applied and cut.entity is None
    assert cut.receipt is not None and cut.receipt.status == "COMPLETED"
    entity, receipt = mark_dispatched(d.entity, d.receipt, "q", 3.0)
    assert entity == Entity(3, {"touched": True}) and receipt is not None and receipt.dispatched
