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
between dispatch and mark), and its mark first writes the receipt a crash
between the entity and the receipt cut (:meth:`CommandTopology.confirm`). Retries of transient handler failures and the
cleanup of old receipts run on a timer.

Async handlers (``async def``): the command's run is awaited first, stopped
after ``settings.commands.handler_timeout`` seconds (a transient failure,
retried like any other), and then the decision is made and persisted in
one synchronous block, on the entity and receipt as they are after the
await (:meth:`CommandTopology.attempt`). ``on_records`` and ``on_tick`` then
return a coroutine that goes on with the rest in order. A sync handler goes
the same way, run in a worker thread (:mod:`.user_calls`), so that the
consumer's heartbeats go on while it runs and the timeout applies to it.

With ``SEQKEEPER_COMMAND_AUTH=jwt`` a command is authorized before
anything else is read or written for it: its ``authorization`` header's
token must verify with a trusted key (:class:`state.tokens.TokenKeys`) and
its claims allow the command at the wall clock's ``now``
(:func:`processors.authorization.authorize`); else it is dead-lettered
``unauthorized`` (its headers, the token among them, are not copied) and
nothing else happens: no receipt, no entity change, no events, no reply. A
retry on the timer is the command authorized on arrival.

Entities and receipts are kept per tenant (the command's ``tenantId``, which
a ``tenant`` header must equal): another tenant's command with the same
messageId is a command of its own, never a duplicate. Receipts, retries and
ages are addressed by receipt id (:func:`processors.command.receipt_id`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter

from seqkeeper.processors.authorization import Unauthorized, authorize, bearer
from seqkeeper.processors.command import (
    DEAD_LETTER,
    Command,
    CommandReason,
    Decision,
    Entity,
    Handler,
    Origin,
    Outcome,
    Outgoing,
    Raised,
    Receipt,
    Registry,
    RetryPolicy,
    decide,
    handler_to_call,
    mark_dispatched,
    parse_command,
    receipt_id,
    recovered_receipt,
    returned,
    tenant_header,
    timed_out,
    unscoped,
)
from seqkeeper.processors.command import (
    run as run_handler,
)
from seqkeeper.processors.dead_letter import dead_letter_headers
from seqkeeper.processors.envelope import InvalidMessage, trace_of
from seqkeeper.processors.return_address import (
    ReplyTopics,
    is_reply,
    refusal,
    undeliverable_letter,
)
from seqkeeper.runtime.protocol import (
    Batch,
    InputRecord,
    OutboxOwner,
    Positions,
    Wiring,
    seconds,
)
from seqkeeper.settings import VARS, Guarantee, Settings
from seqkeeper.state.base import Out
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.timers import Deadlines
from seqkeeper.state.tokens import TokenKeys, load_keys
from seqkeeper.topologies.state_queries import COMMANDS
from seqkeeper.topologies.user_calls import UserCalls

log = logging.getLogger("seqkeeper.commands")

#: Old receipts deleted per partition and tick.
CLEANUP_PER_TICK = 256
#: Reply topics whose check is remembered (then it starts over).
REPLY_TOPICS_REMEMBERED = 10_000


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
            "Messages dispatched again (a copy's, or a sweep's)",
            registry=r,
        )
        self.dead_lettered = Counter(
            "seqkeeper_command_dead_lettered", "Commands dead-lettered", ["reason"], registry=r
        )
        self.entities_ended = Counter(
            "seqkeeper_command_entities_ended",
            "Entities their handler ended (seqkeeper.End)",
            registry=r,
        )
        self.receipts_forgotten = Counter(
            "seqkeeper_receipts_forgotten", "Receipts past retention deleted", registry=r
        )


class CommandTopology(OutboxOwner):
    def __init__(
        self,
        settings: Settings,
        store: CommandStore,
        registry: Registry,
        keys: TokenKeys | None = None,
        threads: bool = False,
    ) -> None:
        """``threads``: run sync handlers in worker threads, as the worker
        does (else inline, as a test driver does: it never blocks)."""
        # first: emit reads it per output, and CPython 3.11 reads an
        # instance's first 30 attributes (its shared keys) fastest
        self.stamp = None
        self.threads = threads
        self.settings = settings
        #: with SEQKEEPER_COMMAND_AUTH=jwt, the keys that verify command
        #: tokens (``keys``, else read from SEQKEEPER_JWT_KEYS); else None
        self.keys = None
        if settings.commands.command_auth == "jwt":
            self.keys = keys or token_keys(settings)
        self.token_policy = settings.commands.token_policy()
        #: exactly_once: a decision's messages commit in one transaction with
        #: the entity that holds them (the runtime's E2-E4), so a copy of a
        #: command dispatches nothing again (:func:`decide`'s ``transactional``)
        self.transactional = settings.runtime.guarantee is Guarantee.EXACTLY_ONCE
        self.store = store
        self.registry = registry
        self.retry = RetryPolicy(
            settings.commands.command_attempts, settings.commands.command_retry_delay
        )
        self.retries = Deadlines()  # receipt ids by the time their retry is due
        self.timeout = settings.commands.handler_timeout
        self.calls = UserCalls(None if math.isinf(self.timeout) else self.timeout)
        self.owned: set[int] = set()
        self.generation = 0
        #: moves at every revocation and assignment (so ``owned`` never
        #: changes under one epoch): a run awaited across a move writes
        #: nothing (the next owner reads its records again)
        self.epoch = 0
        self.revoked = False
        self.asyncs: dict[Handler, bool] = {}  # whether a handler is awaited
        self.outbox = Batch()
        self.on_output: Callable[[], None] = lambda: None
        self.positions: dict[int, int] = {}
        self.metrics = CommandMetrics()
        #: where replies may go: never the worker's own topics (its input,
        #: outputs, and everything under its group id's prefix: changelog,
        #: leader topic), whatever the setting allows
        self.reply_topics = ReplyTopics(
            settings.commands.reply_topics,
            own=tuple(settings.commands.topics()),
            own_prefixes=(f"{settings.group_id}-",),
            setting=VARS["reply_topics"].env,
        )
        self.reply_refusals: dict[str, str | None] = {}

    # -- input -------------------------------------------------------------
    def on_records(
        self, partition: int, records: Iterable[InputRecord], wall: float
    ) -> Awaitable[None] | None:
        """Fetched commands of one partition, in offset order: from the first
        whose async handler must run, the rest are handled by the coroutine
        returned, still one after the other in offset order."""
        if self.revoked:  # a rebalance began while an earlier partition's run was awaited
            return None
        on_record = self.on_record
        rest = iter(records)
        r = None
        for r in rest:
            waiting = on_record(
                partition, r.offset, r.key, r.value, r.headers, seconds(r.timestamp), wall
            )
            if waiting is not None:
                return self._records_in_order(
                    partition, r.offset, waiting, rest, wall, self.epoch, time.monotonic()
                )
        if r is not None:
            self.positions[partition] = r.offset + 1
        return None

    async def _records_in_order(
        self,
        partition: int,
        offset: int,
        first: Awaitable[None],
        rest: Iterator[InputRecord],
        wall: float,
        epoch: int,
        start: float,
    ) -> None:
        positions = self.positions
        await first
        for r in rest:
            if epoch != self.epoch:
                return  # (nothing of it was written: the position stays)
            positions[partition] = offset + 1  # the record before is complete
            offset = r.offset
            now = wall + (time.monotonic() - start)
            waiting = self.on_record(
                partition, r.offset, r.key, r.value, r.headers, seconds(r.timestamp), now
            )
            if waiting is not None:
                await waiting
        if epoch == self.epoch:
            positions[partition] = offset + 1

    def on_record(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
        timestamp: float | None,
        now: float,
    ) -> Awaitable[None] | None:
        """One command; a coroutine to await when its async handler must run
        (see :meth:`attempt`)."""
        self.metrics.commands.inc()
        pairs = headers.items() if isinstance(headers, dict) else headers or ()
        tenants = [v for k, v in pairs if k == "tenant"]
        try:
            command = parse_command(key, value, tenant_header(tenants), trace_of(pairs))
        except InvalidMessage as exc:
            self.dead_letter(key, value, exc.reason, exc.detail, partition, offset, timestamp)
            return None
        refused = self.refusal(pairs, command, now)
        if refused is not None:  # before anything of it is read or written
            why, cls = CommandReason.UNAUTHORIZED, "seqkeeper.Unauthorized"
            self.dead_letter(key, value, why, refused, partition, offset, timestamp, cls)
            return None
        refused = None if command.reply_to is None else self.refused_reply(command.reply_to)
        if refused is not None:  # before anything is read or written: nothing applied
            reason, cls = CommandReason.INVALID_REPLY_TO, "seqkeeper.InvalidReplyTo"
            self.dead_letter(key, value, reason, refused, partition, offset, timestamp, cls)
            return None
        entity = self.store.entity(partition, command.entity)
        receipt = self.store.receipt(partition, command.receipt_id)
        millis = None if timestamp is None else int(timestamp * 1000)
        origin = (self.settings.commands.command_topic, partition, offset, millis)
        if self.awaited(command, entity, receipt, now, False):
            return self.attempt(partition, command, now, False, origin, self.epoch)
        decision = decide(
            self.registry,
            entity,
            receipt,
            command,
            now,
            self.retry,
            origin=origin,
            transactional=self.transactional,
        )
        self.apply(partition, command.entity, decision, entity, receipt)
        return None

    def refusal(self, headers: Any, command: Command, now: float) -> str | None:
        """Why ``command``'s token (in record ``headers``) does not allow it
        at ``now``; None when it does, or when no token is asked for."""
        if self.keys is None:
            return None
        try:
            claims = self.keys.verify(bearer(headers))
            authorize(
                claims,
                command.tenant_id,
                command.command_type,
                now,
                self.token_policy,
                command.value,
            )
        except Unauthorized as exc:
            return exc.detail
        return None

    # -- async handlers ------------------------------------------------------
    def is_async(self, handler: Handler) -> bool:
        """Whether ``handler`` is an ``async def`` function (or an object
        whose ``__call__`` is one)."""
        known = self.asyncs.get(handler)
        if known is None:
            call = type(handler).__call__
            known = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)
            self.asyncs[handler] = known
        return known

    def awaited(
        self,
        command: Command,
        entity: Entity,
        receipt: Receipt | None,
        now: float,
        retrying: bool,
    ) -> bool:
        """Whether deciding on ``command`` runs a handler: awaited when
        async, else in a worker thread (:mod:`.user_calls`)."""
        handler = self.registry.handlers.get((command.command_type, command.schema_version))
        if handler is None or not (self.threads or self.is_async(handler)):
            return False
        return handler_to_call(self.registry, entity, receipt, command, now, retrying) is not None

    async def attempt(
        self,
        partition: int,
        command: Command,
        now: float,
        retrying: bool,
        origin: Origin | None,
        epoch: int,
    ) -> None:
        """Run ``command``'s async handler, then decide on its outcome and
        persist the decision in one synchronous block after the await.

        The entity can change while the handler runs: another command of it
        applied (a retry on the timer, or a command with a sync handler),
        or the confirm of a produced batch dropping dispatched messages from
        its outbox. So after the await the entity and the receipt are read
        again and the decision is made on them: the outcome stands when the
        entity is at the version the handler was given (its state is then
        the same; the outbox is no input of the handler), and the handler
        runs again on the new state otherwise (a handler may run more than
        once; only the outcome decided on is persisted). When the assignment
        moved meanwhile (``epoch``, taken when the command was read, is no
        longer the topology's: a revocation, and the partitions assigned
        next, owned or not), nothing is written: the next owner reads the
        command again. ``now`` moves on with the time awaited (receipt
        times, the retry's backoff, expiry).
        """
        start = time.monotonic()
        outcome: Outcome | None = None
        # the handler, version and state it ran on (an entity ended and begun
        # again meanwhile may be at the same version with another state)
        ran: tuple[Handler, int, Any] | None = None
        while True:
            if epoch != self.epoch:
                return
            at = now + (time.monotonic() - start)
            entity = self.store.entity(partition, command.entity)
            receipt = self.store.receipt(partition, command.receipt_id)
            handler = handler_to_call(self.registry, entity, receipt, command, at, retrying)
            if handler is None or not (self.threads or self.is_async(handler)):
                outcome = None  # decided without awaiting a run
                break
            if ran == (handler, entity.version, entity.state):
                break
            ran = (handler, entity.version, entity.state)
            outcome = await self.run(handler, entity.state, command, (partition, command.entity))
        decision = decide(
            self.registry,
            entity,
            receipt,
            command,
            at,
            self.retry,
            retrying,
            origin,
            outcome,
            transactional=self.transactional,
        )
        self.apply(partition, command.entity, decision, entity, receipt)

    async def run(
        self, handler: Handler, state: Any, command: Command, slot: Any = None
    ) -> Outcome:
        """One run of a handler, stopped after the handler timeout (a
        timeout is a transient failure naming the limit); a sync one in a
        worker thread, never beside a call on the same entity (``slot``)
        still running past its timeout (:mod:`.user_calls`)."""
        limit = self.timeout
        if not self.is_async(handler):
            if self.calls.blocked(slot) or self.calls.full():
                return Raised(RuntimeError("an earlier call of the handler is still running"))
            outcomes, late = await self.calls.run(
                [slot], [lambda: run_handler(handler, state, command)]
            )
            return timed_out(limit) if late is not None else outcomes[0]
        scope = asyncio.timeout(limit)
        try:
            async with scope:
                result = handler(state, command)
                if inspect.isawaitable(result):
                    return returned(await result)
            return returned(result)
        except Exception as exc:  # noqa: BLE001 - every failure is an outcome
            if scope.expired():
                return timed_out(limit)
            return Raised(exc)

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
        if d.ended:
            self.metrics.entities_ended.inc()
        if d.dead_letter is not None:
            self.metrics.dead_lettered.labels(d.dead_letter[0]).inc()
            log.info("command dead-lettered: %s", d.dead_letter[1])
        for out in d.dispatch:
            self.dispatch(partition, out)
        if d.receipt is not None and d.receipt.status == "PROCESSING":
            assert d.receipt.retry_at is not None
            self.retries.arm(partition, d.receipt.receipt_id, d.receipt.retry_at)
            self.metrics.retries.inc()
            log.warning(
                "handler failed on command %s (attempt %d of %d, retried): %s",
                d.receipt.message_id,
                d.receipt.attempts,
                self.retry.attempts,
                d.receipt.error,
            )
        stored = entity if d.entity is None else d.entity  # as persisted now
        # (an entry may hold nothing; a copy may write the receipt it lacked)
        if (d.dispatch or d.entry or (d.duplicate and d.receipt)) and stored.outbox:
            pending = self.outbox.confirms.setdefault((partition, entity_id), set())
            pending.update(cid for cid, _ in stored.outbox)

    # -- timers ------------------------------------------------------------
    def on_tick(self, positions: Positions, now: float) -> Awaitable[None] | None:
        """Retries that are due, and receipts past retention (the input's
        positions do not matter here). From the first retry whose async
        handler must run, the due retries are made by the coroutine
        returned, one after the other."""
        due = iter(self.due_retries(now))
        waiting = None
        for partition, rid in due:
            waiting = self.retry_one(partition, rid, now)
            if waiting is not None:
                break
        self.forget_old_receipts(now)
        if waiting is None:
            return None
        return self._retries_in_order(waiting, due, now, self.epoch, time.monotonic())

    async def _retries_in_order(
        self,
        first: Awaitable[None],
        rest: Iterator[tuple[int, str]],
        now: float,
        epoch: int,
        start: float,
    ) -> None:
        await first
        for partition, rid in rest:
            if epoch != self.epoch:
                return  # (the next assignment rebuilds the retry index)
            waiting = self.retry_one(partition, rid, now + (time.monotonic() - start))
            if waiting is not None:
                await waiting

    def retry_one(self, partition: int, rid: str, now: float) -> Awaitable[None] | None:
        """The retry of receipt ``rid``, taken from the index as due; a
        coroutine to await when its async handler must run."""
        receipt = self.store.receipt(partition, rid)
        if receipt is None or receipt.status != "PROCESSING" or receipt.value is None:
            self.store.drop_retry(partition, rid)
            return None
        if receipt.retry_at is not None and receipt.retry_at > now:
            self.retries.arm(partition, rid, receipt.retry_at)
            return None
        trace = tuple((k, v.encode("latin-1")) for k, v in receipt.trace)
        command = parse_command(command_key(receipt.value), receipt.value, trace=trace)
        if self.calls.blocked((partition, command.entity)):  # its last call still runs
            self.retries.arm(partition, rid, now + self.retry.base)
            return None
        entity = self.store.entity(partition, command.entity)
        if self.awaited(command, entity, receipt, now, True):
            return self.attempt(partition, command, now, True, receipt.origin, self.epoch)
        decision = decide(
            self.registry,
            entity,
            receipt,
            command,
            now,
            self.retry,
            retrying=True,
            origin=receipt.origin,
            transactional=self.transactional,
        )
        self.apply(partition, command.entity, decision, entity, receipt)
        return None

    def forget_old_receipts(self, now: float) -> None:
        """Delete receipts past retention, a batch per partition."""
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

    def on_revoked(self) -> None:
        """A rebalance began: a run awaited now writes nothing after it."""
        self.epoch += 1
        self.revoked = True

    def on_assigned(self, partitions: set[int]) -> None:
        """Dispatch again what entities still hold; rebuild the retry index."""
        self.generation += 1
        self.epoch += 1
        self.revoked = False
        self.owned = set(partitions)
        self.positions.clear()
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
                        self.dispatch(partition, out)
                        again += 1
                pending = self.outbox.confirms.setdefault((partition, entity_id), set())
                pending.update(cid for cid, _ in entity.outbox)
        if again:
            self.metrics.redispatched.inc(again)
            log.warning("dispatching %d undispatched outbox messages again", again)

    # -- outbox ------------------------------------------------------------
    def refused_reply(self, topic: str) -> str | None:
        """Why a reply may not go to ``topic`` (``None``: it may), remembered."""
        known = self.reply_refusals
        if topic in known:
            return known[topic]
        if len(known) >= REPLY_TOPICS_REMEMBERED:
            known.clear()
        why = known[topic] = refusal(topic, self.reply_topics)
        return why

    def dispatch(self, partition: int, out: Outgoing) -> None:
        topic = {
            None: self.settings.commands.events_topic,
            DEAD_LETTER: self.settings.commands.command_dlq_topic,
        }
        name = topic.get(out.topic, out.topic)
        assert name is not None
        key = out.key.encode("utf-8")
        if is_reply(out):
            # A reply stored before the allowed topics changed (an outbox
            # swept at assignment, a retry, a stored reply sent again) goes
            # where a command's replyTo may point now, or to the dead letters.
            refused = self.refused_reply(name)
            if refused is not None:
                record = (name, key, out.value, out.headers)
                self.emit(partition, *self.undeliverable(partition, record, name, refused))
                return
            # the runtime checks the topic exists and takes our writes first
            self.outbox.addressed.add(name)
        self.emit(partition, name, key, out.value, list(out.headers) or None)

    def undeliverable(self, partition: int, record: Out, topic: str, problem: str) -> Out:
        """The dead letter taking the place of ``record``, a reply of input
        partition ``partition`` that may not go to ``topic`` (``problem``:
        why): the reply's key and value, the reason in headers."""
        _, key, value, headers = record
        letter = undeliverable_letter(
            tuple(headers or ()), topic, problem, self.settings.commands.command_topic, partition
        )
        self.metrics.dead_lettered.labels(CommandReason.REPLY_UNDELIVERABLE).inc()
        log.warning("reply dead-lettered (%s): %s", CommandReason.REPLY_UNDELIVERABLE, problem)
        return (self.settings.commands.command_dlq_topic, key, value, letter)

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
                messages = entity.pending(cid)
                if messages is None:
                    continue
                receipt = self.store.receipt(partition, receipt_id(tenant, cid))
                if receipt is None and not messages:
                    # A quiet command's entry (nothing to send) tells no
                    # correlationId or type. The crash that cut its receipt
                    # came before its input offset was committed, so the
                    # command is read again: that copy writes the receipt
                    # (decide) and its confirm marks the entry.
                    continue
                # The entity (with this outbox entry) is written before the
                # command's receipt, so a crash between the two leaves the
                # entry alone (or beside the PROCESSING receipt of the attempt
                # before), and the assignment sweep dispatches and confirms it.
                # The entry must not leave the entity before a finished
                # receipt is written, or a copy of the command, finding
                # neither, is applied again. So: 1. the receipt the entry
                # tells (with its correlation entry); 2. the mark (receipt
                # dispatched, then the entity without the entry). A crash
                # after 1 leaves entry and receipt: a copy is a duplicate
                # (the entry is dispatched again), the next sweep marks it.
                if receipt is None or receipt.status == "PROCESSING":
                    repaired = recovered_receipt(entity_id, cid, messages, now, receipt)
                    self.store.save(partition, entity_id, None, repaired, receipt)
                    receipt = repaired
                entity, receipt = mark_dispatched(entity, receipt, cid, now)
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
        self.emit(partition, self.settings.commands.command_dlq_topic, key, value, headers)
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


def token_keys(settings: Settings) -> TokenKeys | None:
    """The keys that verify command tokens when ``settings`` ask for them
    (``SEQKEEPER_COMMAND_AUTH=jwt``), else None; a missing or bad key file
    is a :class:`~seqkeeper.settings.SettingError` in one line."""
    if settings.commands.command_auth != "jwt":
        return None
    return load_keys(settings.commands.jwt_keys)


def wiring(settings: Settings, registry: Registry, keys: TokenKeys | None = None) -> Wiring:
    """How the runtime wires the command topology over ``registry``'s
    handlers (``keys``: the command tokens' keys, read at start)."""
    return Wiring(
        input_topic=settings.commands.command_topic,
        table="commands",
        build=lambda store: CommandTopology(
            settings, CommandStore(store), registry, keys, threads=True
        ),
        output_topic=_topic_name,
        registry=lambda topology: topology.metrics.registry,
        probe=lambda topology: {"owned": topology.owned},
        queries=COMMANDS,
    )
