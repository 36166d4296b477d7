"""The ordered processor's shell: runs the user's function on what the
Resequencer releases, stores its state and outputs, and queues the outputs.

Per key, each released item (a message, or a gap given up) reaches ``fn``
once, in sequence order (:mod:`processors.processor`). The key's record
(``P``: the cursor, the last sequence processed, and ``fn``'s state) is the
commit record of a processing step, and what one step writes goes out in
one write, in this order: the outputs (``O``, the processor's outbox),
the key's record, the deletion of the queued item (``Q``). A crash that
cuts a step leaves a prefix: without the record, the item is processed
again (its outputs never left: they are produced only after the state
behind them is durable; an output entry past the key's cursor is such a
cut step's, and is deleted, not produced); with it, the item counts as
processed, whatever the replayed input says.

Where the Resequencer's step and the processor meet:

* Released items are queued, and their entries (``Q``) belong before the
  Resequencer's writes that released them, so that a released message is
  never without its processing or its queue entry. They are *placed* there
  (:meth:`state.base.PartitionStore.write_placed`), not written at once:
  an item whose result comes before the cycle is taken has its result's
  writes placed there instead, and its entry is never written nor deleted;
  the entries of the items still without a result are placed when the
  cycle is taken (:meth:`ProcessorStage.write_queued`). Either way a crash
  keeps a prefix of the changelog in which the item's entry or result
  stands before its release. :meth:`ProcessorStage.drain` runs the queue: the runtime awaits it before
  the next fetch. An async ``fn`` is awaited; a sync one runs in a worker
  thread (:mod:`.user_calls`: one hop per round of calls, so that the
  consumer's heartbeats go on while it blocks). Each result is written in
  one synchronous block after the await, so an outbox take never sees half
  of one.

A failure (an exception, a result that cannot be stored, a call past the
handler timeout) holds the key back and is retried on the timer with
the command handlers' attempts and backoff; the key's later messages wait
in its queue, other keys go on. After the last attempt the message goes to
the dead-letter topic with the error in headers (stored in ``O`` like an
output, so it too is produced once and identically), and the key goes on.

After an assignment, queued items are run and stored outputs not confirmed
are produced again (:meth:`ProcessorStage.on_assigned`), byte for byte.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson
from prometheus_client import Counter

from seqkeeper.processors.command import RetryPolicy
from seqkeeper.processors.envelope import Codec
from seqkeeper.processors.processor import (
    NO_TOPICS,
    PROCESSOR_FAILED,
    InvalidResult,
    Message,
    OutputTopics,
    Processor,
    TopicNotAllowed,
    dead_letter,
    describe_error,
    first_seq,
    is_done,
    last_seq,
    message_of,
    results,
)
from seqkeeper.processors.resequencer import Emission, GapSkipped
from seqkeeper.settings import Settings
from seqkeeper.state import codecs
from seqkeeper.state.base import Change, PartitionStore
from seqkeeper.state.timers import Deadlines
from seqkeeper.topologies.metrics import Metrics
from seqkeeper.topologies.user_calls import UserCalls

log = logging.getLogger("seqkeeper.processor")

Slot = tuple[int, str]
#: A stored output to delete once produced: partition, key, sequence.
Stored = tuple[int, str, int]
#: Keys processed at the same time by one drain (each key in order).
CONCURRENT_KEYS = 64
#: Keys' records kept in memory (when there are more, all are dropped).
RECORDS_KEPT = 100_000


class ProcessorStage:
    """Runs ``fn`` for one topology (see the module docstring).

    ``emit(partition, role, key, value, headers)`` queues an output in the topology's
    outbox, ``stored(partition, key, seq)`` notes that the next take
    produces a stored output entry (to delete once confirmed), and
    ``offset_of(partition, key, message_id)`` finds the input offset of an
    accepted message (``-1``: not known) for dead-letter headers."""

    def __init__(
        self,
        fn: Processor,
        settings: Settings,
        store: PartitionStore,
        emit: Callable[[int, str, bytes, bytes, Any], None],
        stored: Callable[[int, str, int], None],
        offset_of: Callable[[int, str, str], int],
        metrics: Metrics,
        clock: Callable[[], float] = time.time,
        codec: Codec | None = None,
        input_topic: str | None = None,
        topics: OutputTopics = NO_TOPICS,
    ) -> None:
        self.fn = fn
        self.topics = topics  # where outputs may go besides the processed topic
        self.is_async = inspect.iscoroutinefunction(fn)
        timeout = settings.commands.handler_timeout
        self.timeout = None if math.isinf(timeout) else timeout
        self.retry = RetryPolicy(
            settings.commands.command_attempts, settings.commands.command_retry_delay
        )
        self.input_topic = input_topic or settings.ordered.input_topic  # (for dead letters)
        self.decode: Callable[[bytes], Any] = orjson.loads if codec is None else codec.decode
        #: how outputs are written: the codec's encode (``None``: JSON)
        self.encode: Callable[[Any], bytes] | None = None if codec is None else codec.encode
        self.store = store
        self.emit = emit
        self.stored = stored
        self.offset_of = offset_of
        self.clock = clock
        self.queues: dict[Slot, collections.deque[Emission]] = {}
        #: queued items whose entries (``Q``) are not written yet, with the
        #: place in the store's writes where they belong
        self.unwritten: dict[tuple[int, str, int], tuple[object, Emission]] = {}
        #: keys with a result appended (not placed) since the last take:
        #: their later results are appended too
        self.appended: set[Slot] = set()
        self.attempts: dict[Slot, int] = {}
        self.waiting: set[Slot] = set()  # a retry is armed, not yet due
        self.retries = Deadlines()
        self.runnable: set[Slot] = set()
        self.busy: set[Slot] = set()
        #: keys not run while a call of theirs (or too many calls) ran past the timeout
        self.held: set[Slot] = set()
        self.calls = UserCalls(self.timeout, self.freed)
        self.owned: set[int] = set()
        self.epoch = 0  # moves on every revocation and assignment
        #: the keys' records as last written or read (only this stage writes
        #: them; dropped at every assignment, when the store may change)
        self.key_records: dict[Slot, tuple[int, bytes | None]] = {}
        self.counted = 0
        r = metrics.registry
        self.processed = Counter(
            "seqkeeper_processor_messages", "Messages the ordered processor processed", registry=r
        )
        self.failures = Counter(
            "seqkeeper_processor_failures",
            "Failed ordered processor attempts (retried, or dead-lettered at the last)",
            registry=r,
        )
        self.dead_lettered = metrics.dead_lettered
        self.reemitted = metrics.reemitted

    # -- from the Resequencer's steps --------------------------------------
    def released(self, partition: int, key: str, items: Sequence[Emission], wall: float) -> None:
        """``items`` were released for ``key``; called before the step that
        released them is written: they are queued (``Q``) for :meth:`drain`."""
        slot = (partition, key)
        self.enqueue(slot, items)
        if slot not in self.waiting:
            self.runnable.add(slot)

    def enqueue(self, slot: Slot, items: Iterable[Emission]) -> None:
        """Queue ``items``; their entries are placed here, before the
        Resequencer's writes that released them, and written there only if
        a cycle is taken before their results (:meth:`write_queued`)."""
        partition, key = slot
        queue = self.queues.get(slot)
        if queue is None:
            queue = self.queues[slot] = collections.deque()
        place = self.store.place(partition)
        unwritten = self.unwritten
        for item in items:
            queue.append(item)
            unwritten[(partition, key, first_seq(item))] = (place, item)

    def write_queued(self) -> None:
        """Before a cycle is taken (and before a revocation or a clean
        stop): write the entries of the queued items that have no result
        yet, each at its place. An item whose result came first never has
        its entry written, nor deleted: its release and its result are in
        the same cycle."""
        if not self.unwritten:
            self.appended.clear()
            return
        by_partition: dict[int, list[tuple[object, Sequence[Change]]]] = {}
        for (partition, key, seq), (place, item) in self.unwritten.items():
            by_partition.setdefault(partition, []).append((place, (_entry(key, seq, item),)))
        self.unwritten = {}
        self.appended.clear()
        for partition, placed in by_partition.items():
            self.store.write_placed(partition, placed)

    def dequeued(self, partition: int, key: str, seq: int) -> list[Change]:
        """The write that deletes a queued item's entry (none if it was
        never written)."""
        if self.unwritten.pop((partition, key, seq), None) is not None:
            return []
        return [(codecs.queued_key(key, seq), None, ())]

    def load(self, partition: int, key: str) -> tuple[int, bytes | None]:
        """The key's record: its cursor and ``fn``'s state as stored (as
        last written here, or read)."""
        slot = (partition, key)
        found = self.key_records.get(slot)
        if found is None:
            if len(self.key_records) >= RECORDS_KEPT:
                self.key_records.clear()
            raw = self.store.get(partition, codecs.processed_key(key))
            found = self.key_records[slot] = codecs.decode_processed(raw)
        return found

    def publish(self) -> None:
        """Publish the count of messages processed (counted per message,
        published per outbox cycle: a counter's increment costs more)."""
        if self.counted:
            self.processed.inc(self.counted)
            self.counted = 0

    # -- running fn ----------------------------------------------------------
    def call_sync(self, state: Any, message: Any) -> tuple[bool, Any]:
        try:
            result = self.fn(state, message)
        except Exception as exc:  # noqa: BLE001 - the user's failure, retried
            return False, exc
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()
            return False, InvalidResult("the processor returned an awaitable: make it async def")
        return True, result

    async def call(self, state: Any, message: Any) -> tuple[bool, Any]:
        if not self.is_async:
            return self.call_sync(state, message)
        try:
            result = await asyncio.wait_for(self.fn(state, message), self.timeout)  # type: ignore[arg-type]
        except TimeoutError:
            return False, TimeoutError(
                f"the processor ran past SEQKEEPER_HANDLER_TIMEOUT ({self.timeout:g} s)"
            )
        except Exception as exc:  # noqa: BLE001 - the user's failure, retried
            return False, exc
        return True, result

    def settle(
        self,
        partition: int,
        key: str,
        item: Emission,
        message: Message,
        record: tuple[int, bytes | None],
        ok: bool,
        result: Any,
        queued: bool,
        wall: float,
    ) -> tuple[int, bytes] | None:
        """Write and queue what one run of ``fn`` on ``item`` (as
        ``message``, with the key's ``record`` before it) came to, in one
        block; the key's new record, or ``None`` when a retry is armed."""
        slot = (partition, key)
        cursor = record[0]
        if ok:
            try:
                state, records = results(message, result, self.topics, self.encode)
            except InvalidResult as exc:
                ok, result = False, exc
        if not ok:
            self.failures.inc()
            attempts = self.attempts.get(slot, 0) + 1
            cls, error = describe_error(result)
            # (a topic not allowed: the settings decide, no retry helps)
            if attempts < self.retry.attempts and not isinstance(result, TopicNotAllowed):
                self.attempts[slot] = attempts
                self.waiting.add(slot)
                self.retries.arm(partition, key, wall + self.retry.delay(attempts))
                log.warning(
                    "processor failed on key=%s seq=%s (attempt %d of %d): %s",
                    key, first_seq(item), attempts, self.retry.attempts, error,
                )  # fmt: skip
                return None
            offset = (
                -1
                if isinstance(item, GapSkipped)
                else self.offset_of(partition, key, item.message_id)
            )
            records = [
                dead_letter(
                    key,
                    item,
                    error,
                    cls,
                    attempts,
                    (self.input_topic, partition, offset),
                    self.encode,
                )
            ]
            state = record[1] or b"null"
            self.dead_lettered.labels(PROCESSOR_FAILED).inc()
            log.error(
                "processor gave up on key=%s seq=%s: dead-lettered: %s", key, first_seq(item), error
            )
        self.attempts.pop(slot, None)
        seq = first_seq(item)
        changes: list[Change] = []
        if records:
            changes.append((codecs.outputs_key(key, seq), codecs.encode_outs(records), ()))
        cursor = max(cursor, last_seq(item))
        changes.append((codecs.processed_key(key), codecs.encode_processed(cursor, state), ()))
        entry = self.unwritten.pop((partition, key, seq), None) if queued else None
        if entry is not None and slot not in self.appended:
            # The item's entry was never written: its result stands where
            # the entry would, before the Resequencer's writes that released
            # it, and a crash keeps both, or the result alone (the item is
            # released again, and found processed), or neither.
            self.store.write_placed(partition, ((entry[0], changes),))
        else:
            if entry is not None:  # (a result of the key's was appended after the place)
                self.store.write_placed(partition, ((entry[0], (_entry(key, seq, item),)),))
            if queued:
                changes.append((codecs.queued_key(key, seq), None, ()))
            self.store.write(partition, changes)
            self.appended.add(slot)
        for role, kbytes, value, headers in records:
            self.emit(partition, role, kbytes, value, headers)
        if records:
            self.stored(partition, key, seq)
        self.counted += 1
        self.key_records[slot] = (cursor, state)
        return cursor, state

    # -- the queue -------------------------------------------------------------
    def pending(self) -> Any:
        """The awaitable that runs the queued items now runnable, if any."""
        return self.drain() if self.runnable - self.busy else None

    async def drain(self) -> None:
        """Run the runnable keys' queues (each key in order, up to
        :data:`CONCURRENT_KEYS` keys at a time) until none is left."""
        epoch = self.epoch
        while self.epoch == epoch:
            slots = sorted(self.runnable - self.busy)
            if not slots:
                return
            self.runnable.difference_update(slots)
            if not self.is_async:
                await self.run_sync(slots, epoch)
                continue
            for start in range(0, len(slots), CONCURRENT_KEYS):
                await asyncio.gather(
                    *(self.run_key(slot, epoch) for slot in slots[start : start + CONCURRENT_KEYS])
                )
                if self.epoch != epoch:
                    return

    async def run_key(self, slot: Slot, epoch: int) -> None:
        partition, key = slot
        self.busy.add(slot)
        try:
            while slot not in self.waiting:
                queue = self.queues.get(slot)
                if not queue:
                    self.queues.pop(slot, None)
                    return
                item = queue[0]
                record = self.load(partition, key)
                if is_done(item, record[0]):  # processed before a crash cut its deletion
                    self.store.write(partition, self.dequeued(partition, key, first_seq(item)))
                    queue.popleft()
                    continue
                message = message_of(key, item, self.decode)
                ok, result = await self.call(_state(record[1]), message)
                if self.epoch != epoch or partition not in self.owned:
                    return  # reassigned meanwhile: the queue entry is still stored
                wall = self.clock()
                if (
                    self.settle(partition, key, item, message, record, ok, result, True, wall)
                    is None
                ):
                    return
                queue.popleft()
        finally:
            self.busy.discard(slot)

    async def run_sync(self, slots: list[Slot], epoch: int) -> None:
        """Run the queues of ``slots`` with a sync ``fn``, in rounds: a
        round is one batch in a worker thread (:mod:`.user_calls`) with
        the next item of every key, each key in order. A key whose earlier
        call still runs past its timeout, or every key while too many do,
        is held until one returns."""
        self.busy.update(slots)
        try:
            pending = slots
            while pending and self.epoch == epoch:
                pending = await self.sync_round(pending, epoch)
        finally:
            self.busy.difference_update(slots)

    async def sync_round(self, slots: list[Slot], epoch: int) -> list[Slot]:
        """One round of :meth:`run_sync`; the keys with more to run."""
        ran: list[Slot] = []
        calls: list[Callable[[], tuple[bool, Any]]] = []
        items: list[tuple[Emission, Message, tuple[int, bytes | None]]] = []
        waiting, stuck = self.waiting, self.calls.stuck
        for slot in slots:
            if slot in waiting:
                continue
            if stuck and slot in stuck:  # (UserCalls.blocked)
                self.held.add(slot)
                continue
            found = self.head(slot)
            if found is None:
                continue
            item, record = found
            message = message_of(slot[1], item, self.decode)
            ran.append(slot)
            calls.append(functools.partial(self.call_sync, _state(record[1]), message))
            items.append((item, message, record))
        if not calls:
            return []
        if self.calls.full():
            self.held.update(ran)
            return []
        outcomes, late = await self.calls.run(ran, calls)
        if self.epoch != epoch:
            return []  # reassigned meanwhile: the queue entries are still stored
        wall = self.clock()
        more: list[Slot] = []
        if late is not None:
            limit = self.timeout or 0.0
            timed_out = TimeoutError(
                f"the processor ran past SEQKEEPER_HANDLER_TIMEOUT ({limit:g} s)"
            )
            outcomes = [*outcomes, (False, timed_out)]
            more = ran[len(outcomes) :]  # not run: offered again
        n = len(outcomes)
        for slot, (item, message, record), (ok, result) in zip(
            ran[:n], items[:n], outcomes, strict=True
        ):
            partition, key = slot
            if partition not in self.owned:
                continue
            if self.settle(partition, key, item, message, record, ok, result, True, wall):
                queue = self.queues[slot]
                queue.popleft()
                if queue:
                    more.append(slot)
                else:  # (an item released meanwhile makes the key runnable again)
                    del self.queues[slot]
        return more

    def head(self, slot: Slot) -> tuple[Emission, tuple[int, bytes | None]] | None:
        """The key's next item to run and its record (items processed
        before a crash cut their deletion are deleted on the way)."""
        partition, key = slot
        queue = self.queues.get(slot)
        while queue:
            item = queue[0]
            record = self.load(partition, key)
            if not is_done(item, record[0]):
                return item, record
            self.store.write(partition, self.dequeued(partition, key, first_seq(item)))
            queue.popleft()
        self.queues.pop(slot, None)
        return None

    def idle(self, partition: int, key: str, next_expected: int) -> bool:
        """Whether ``key`` has nothing in the processor: nothing queued,
        running or retried, every released sequence processed (below
        ``next_expected``) and no stored output left unconfirmed. Not kept
        in memory: the sweep asks for every key."""
        slot = (partition, key)
        if (
            slot in self.queues
            or slot in self.busy
            or slot in self.waiting
            or slot in self.held
            or slot in self.attempts
            or slot in self.runnable
        ):
            return False
        record = self.key_records.get(slot)
        if record is None:
            record = codecs.decode_processed(self.store.get(partition, codecs.processed_key(key)))
        if record[0] < next_expected - 1:
            return False
        prefix = codecs.outputs_prefix(key)
        return self.store.seek(partition, prefix, prefix) is None

    def forget(self, partition: int, key: str) -> None:
        """The key was forgotten (its record deleted with its state)."""
        self.key_records.pop((partition, key), None)

    def freed(self, slot: object) -> None:
        """A call past its timeout returned: the keys held run again."""
        self.runnable.update(self.held)
        self.held.clear()

    # -- timers and assignments ------------------------------------------------
    def on_tick(self, wall: float) -> Any:
        """Retries that are due; the awaitable that runs them, if any."""
        for partition in sorted(self.owned):
            for key in self.retries.due(partition, wall):
                slot = (partition, key)
                if slot in self.waiting:
                    self.waiting.discard(slot)
                    self.runnable.add(slot)
        return self.pending()

    def on_revoked(self) -> None:
        self.write_queued()  # (the queue is rebuilt from the store at the next assignment)
        self.epoch += 1  # a drain under way stops at its next await
        self.key_records.clear()
        self.held.clear()

    def on_assigned(self, partitions: set[int]) -> int:
        """Rebuild the queues from ``Q``; produce again the stored outputs
        (``O``) not confirmed. How many outputs are produced again."""
        self.write_queued()
        self.epoch += 1
        self.owned = set(partitions)
        self.key_records.clear()
        self.queues.clear()
        self.attempts.clear()
        self.waiting.clear()
        self.retries = Deadlines()
        self.runnable.clear()
        self.busy.clear()
        self.held.clear()
        again = 0
        for partition in sorted(partitions):
            for store_key, raw in self.store.items(partition, codecs.QUEUED):
                key = codecs.key_of(store_key)
                slot = (partition, key)
                self.queues.setdefault(slot, collections.deque()).append(
                    codecs.decode_queued(key, raw)
                )
                self.runnable.add(slot)
            stale: list[Change] = []
            for store_key, raw in self.store.items(partition, codecs.OUTPUTS):
                key, seq = codecs.key_of(store_key), codecs.buffer_seq(store_key)
                if seq > self.load(partition, key)[0]:  # its step was cut before its record
                    stale.append((store_key, None, ()))
                    continue
                for role, kbytes, value, headers in codecs.decode_outs(raw):
                    self.emit(partition, role, kbytes, value, headers)
                    again += 1
                self.stored(partition, key, seq)
            if stale:
                self.store.write(partition, stale)
        if again:
            self.reemitted.labels("processed").inc(again)
            log.warning("emitting %d unconfirmed processor outputs again", again)
        return again

    def confirm(self, stored: Iterable[Stored]) -> None:
        """Stored outputs are durable downstream: delete them."""
        by_partition: dict[int, list[Change]] = {}
        for partition, key, seq in stored:
            if partition in self.owned:
                by_partition.setdefault(partition, []).append(
                    (codecs.outputs_key(key, seq), None, ())
                )
        for partition, changes in by_partition.items():
            self.store.write(partition, changes)


def _entry(key: str, seq: int, item: Emission) -> Change:
    """The write of a queued item's entry (``Q``)."""
    return (codecs.queued_key(key, seq), codecs.encode_queued(item, packed=True), ())


def _state(raw: bytes | None) -> Any:
    """``fn``'s state, decoded afresh for each call (``fn`` may change the
    object it is given; what counts is what it returns)."""
    return None if raw is None else orjson.loads(raw)
