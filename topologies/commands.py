"""The command topology: ``commands.in`` -> idempotent handler with a
Transactional Outbox -> ``commands.events``, ``replyTo`` topics,
``commands.dlq``.

Per command, in one synchronous block: parse, read the entity and the
receipt, decide (:func:`processors.command.decide`), persist (entity with
its outbox in one record, then the receipt), queue the messages to dispatch
in the topology's outbox. The runtime's commit protocol
(:mod:`seqkeeper.runtime.task`) produces them once the state is durable and then marks them dispatched (drops them from the
entity, keeps the receipt). On every assignment the worker dispatches again
whatever an entity still holds (a crash between persist and dispatch, or
between dispatch and mark). Retries of transient handler failures and the
cleanup of old receipts run on a timer.

Entities and receipts are kept per tenant (the command's ``tenantId``, which
a ``tenant`` header must equal): another tenant's command with the same
messageId is a command of its own, never a duplicate. Receipts, retries and
ages are addressed by receipt id (:func:`processors.command.receipt_id`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter

from seqkeeper.processors.command import (
    DEAD_LETTER,
    Decision,
    Entity,
    Outgoing,
    Receipt,
    Registry,
    RetryPolicy,
    decide,
    mark_dispatched,
    parse_command,
    receipt_id,
    unscoped,
)
from seqkeeper.processors.dead_letter import dead_letter_headers
from seqkeeper.processors.envelope import InvalidMessage
from seqkeeper.runtime.protocol import (
    Batch,
    InputRecord,
    OutboxOwner,
    Positions,
    Wiring,
    seconds,
)
from seqkeeper.settings import Settings
from seqkeeper.state.commands import CommandStore
from seqkeeper.state.timers import Deadlines

log = logging.getLogger("seqkeeper.commands")

#: Old receipts deleted per partition and tick.
CLEANUP_PER_TICK = 256


class CommandMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.commands = Counter("seqkeeper_commands", "Commands consumed", registry=r)
        self.outcomes = Counter(
            "seqkeeper_command_outcomes", "Commands decided, by status", ["status"], registry=r
        )
        self.duplicates = Counter(
            "seqkeeper_command_duplicates", "Command copies not executed again", registry=r
        )
        self.retries = Counter("seqkeeper_command_retries", "Handler retries", registry=r)
        self.redispatched = Counter(
            "seqkeeper_redispatched",
            "Messages dispatched again (duplicate before the mark, or a sweep)",
            registry=r,
        )
        self.dead_lettered = Counter(
            "seqkeeper_command_dead_lettered", "Commands dead-lettered", ["reason"], registry=r
        )
        self.receipts_forgotten = Counter(
            "seqkeeper_receipts_forgotten", "Receipts past retention deleted", registry=r
        )


class CommandTopology(OutboxOwner):
    def __init__(self, settings: Settings, store: CommandStore, registry: Registry) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        self.retry = RetryPolicy(
            settings.commands.command_attempts, settings.commands.command_retry_delay
        )
        self.retries = Deadlines()  # receipt ids by the time their retry is due
        self.owned: set[int] = set()
        self.generation = 0
        self.outbox = Batch()
        self.on_output: Callable[[], None] = lambda: None
        self.metrics = CommandMetrics()

    # -- input -------------------------------------------------------------
    def on_records(self, partition: int, records: Iterable[InputRecord], wall: float) -> None:
        """Fetched commands of one partition, in offset order."""
        on_record = self.on_record
        for r in records:
            on_record(partition, r.offset, r.key, r.value, r.headers, seconds(r.timestamp), wall)

    def on_record(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
        timestamp: float | None,
        now: float,
    ) -> None:
        self.metrics.commands.inc()
        pairs = headers.items() if isinstance(headers, dict) else headers or ()
        tenant = next((v for k, v in pairs if k == "tenant"), None)
        try:
            command = parse_command(key, value, tenant)
        except InvalidMessage as exc:
            self.dead_letter(key, value, exc.reason, exc.detail, partition, offset, timestamp)
            return
        entity = self.store.entity(partition, command.entity)
        receipt = self.store.receipt(partition, command.receipt_id)
        millis = None if timestamp is None else int(timestamp * 1000)
        origin = (self.settings.commands.command_topic, partition, offset, millis)
        decision = decide(self.registry, entity, receipt, command, now, self.retry, origin=origin)
        self.apply(partition, command.entity, decision, entity, receipt)

    def apply(
        self, partition: int, entity_id: str, d: Decision, entity: Entity, before: Receipt | None
    ) -> None:
        """Persist and queue a decision made on ``entity`` and ``before``."""
        self.store.save(partition, entity_id, d.entity, d.receipt, before)
        if d.duplicate:
            self.metrics.duplicates.inc()
            if d.dispatch:
                self.metrics.redispatched.inc(len(d.dispatch))
        elif d.receipt is not None:
            self.metrics.outcomes.labels(d.receipt.status).inc()
        if d.dead_letter is not None:
            self.metrics.dead_lettered.labels(d.dead_letter[0]).inc()
            log.info("command dead-lettered: %s", d.dead_letter[1])
        for out in d.dispatch:
            self.dispatch(out)
        if d.receipt is not None and d.receipt.status == "PROCESSING":
            assert d.receipt.retry_at is not None
            self.retries.arm(partition, d.receipt.receipt_id, d.receipt.retry_at)
            self.metrics.retries.inc()
        stored = entity if d.entity is None else d.entity  # as persisted now
        if d.dispatch and stored.outbox:
            pending = self.outbox.confirms.setdefault((partition, entity_id), set())
            pending.update(cid for cid, _ in stored.outbox)

    # -- timers ------------------------------------------------------------
    def on_tick(self, positions: Positions, now: float) -> None:
        """Retries that are due, and receipts past retention (the input's
        positions do not matter here)."""
        for partition, rid in self.due_retries(now):
            receipt = self.store.receipt(partition, rid)
            if receipt is None or receipt.status != "PROCESSING" or receipt.value is None:
                self.store.drop_retry(partition, rid)
                continue
            if receipt.retry_at is not None and receipt.retry_at > now:
                self.retries.arm(partition, rid, receipt.retry_at)
                continue
            command = parse_command(command_key(receipt.value), receipt.value)
            entity = self.store.entity(partition, command.entity)
            decision = decide(
                self.registry,
                entity,
                receipt,
                command,
                now,
                self.retry,
                retrying=True,
                origin=receipt.origin,
            )
            self.apply(partition, command.entity, decision, entity, receipt)
        for partition in sorted(self.owned):
            n = self.store.forget_aged(
                partition, now - self.settings.commands.receipt_max_age, CLEANUP_PER_TICK
            )
            if n:
                self.metrics.receipts_forgotten.inc(n)

    def due_retries(self, now: float) -> list[tuple[int, str]]:
        """(partition, receipt id) of the retries due by ``now`` in owned
        partitions, taken from the index (re-armed if not due after all)."""
        return [
            (partition, rid)
            for partition in sorted(self.owned)
            for rid in self.retries.due(partition, now)
        ]

    def on_assigned(self, partitions: set[int]) -> None:
        """Dispatch again what entities still hold; rebuild the retry index."""
        self.generation += 1
        self.owned = set(partitions)
        self.retries = Deadlines()
        self.store.assigned(partitions)
        again = 0
        for partition in sorted(partitions):
            for rid in self.store.waiting_retries(partition):
                receipt = self.store.receipt(partition, rid)
                if receipt is None or receipt.status != "PROCESSING":
                    self.store.drop_retry(partition, rid)
                else:
                    self.retries.arm(partition, rid, receipt.retry_at or 0.0)
            for entity_id in list(self.store.pending_entities(partition)):
                entity = self.store.entity(partition, entity_id)
                if not entity.outbox:
                    self.store.drop_pending(partition, entity_id)
                    continue
                for _cid, messages in entity.outbox:
                    for out in messages:
                        self.dispatch(out)
                        again += 1
                pending = self.outbox.confirms.setdefault((partition, entity_id), set())
                pending.update(cid for cid, _ in entity.outbox)
        if again:
            self.metrics.redispatched.inc(again)
            log.warning("dispatching %d undispatched outbox messages again", again)

    # -- outbox ------------------------------------------------------------
    def dispatch(self, out: Outgoing) -> None:
        topic = {
            None: self.settings.commands.events_topic,
            DEAD_LETTER: self.settings.commands.command_dlq_topic,
        }
        name = topic.get(out.topic, out.topic)
        assert name is not None
        self.emit(name, out.key.encode("utf-8"), out.value, list(out.headers) or None)

    def confirm(self, batch: Batch, now: float | None = None) -> None:
        """Mark the batch's commands dispatched (at ``now``, default: the clock)."""
        if batch.generation != self.generation:
            return
        now = time.time() if now is None else now
        for (partition, entity_id), command_ids in batch.confirms.items():
            if partition not in self.owned:
                continue
            entity = self.store.entity(partition, entity_id)
            tenant = unscoped(entity_id)[0]
            for cid in command_ids:
                if entity.pending(cid) is None:
                    continue
                entity, receipt = mark_dispatched(
                    entity, self.store.receipt(partition, receipt_id(tenant, cid)), cid, now
                )
                self.store.dispatched(partition, entity_id, entity, receipt)

    def dead_letter(
        self,
        key: bytes | None,
        value: bytes | None,
        reason: str,
        detail: str,
        partition: int,
        offset: int,
        timestamp: float | None,
        exception_class: str = "seqkeeper.InvalidCommand",
        attempts: int | None = None,
    ) -> None:
        millis = None if timestamp is None else int(timestamp * 1000)
        headers = dead_letter_headers(
            reason,
            detail,
            self.settings.commands.command_topic,
            partition,
            max(offset, 0),
            millis,
            exception_class,
        )
        if attempts is not None:
            headers.append(("seqkeeper.attempts", str(attempts).encode()))
        self.emit(self.settings.commands.command_dlq_topic, key, value, headers)
        self.metrics.dead_lettered.labels(reason).inc()
        log.info(
            "command dead-lettered partition=%s offset=%s reason=%s", partition, offset, reason
        )


def command_key(value: bytes) -> bytes:
    """The Kafka key of a stored command (its ``partitionKey``)."""
    return str(orjson.loads(value)["partitionKey"]).encode("utf-8")


def _topic_name(name: str) -> str:
    """Command outputs are addressed by topic name (events, dead letters,
    each command's ``replyTo``)."""
    return name


def wiring(settings: Settings, registry: Registry) -> Wiring:
    """How the runtime wires the command topology over ``registry``'s handlers."""
    return Wiring(
        input_topic=settings.commands.command_topic,
        table="commands",
        build=lambda store: CommandTopology(settings, CommandStore(store), registry),
        output_topic=_topic_name,
        registry=lambda topology: topology.metrics.registry,
        probe=lambda topology: {"owned": topology.owned},
    )
