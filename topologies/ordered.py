"""The ordered/deduplicated topology.

``events.in`` -> parse -> Idempotent Receiver -> Resequencer ->
``events.deduped`` (each accepted message at once) and ``events.ordered``
(per key in sequence order, with ``seqkeeper.GapSkipped`` markers); rejected
records go to ``events.dlq`` (or ``events.late``) with the reason in
headers. A timer gives up gaps that blocked longer than the gap timeout, for
the partitions this worker owns. All per-key state is one changelogged table
(layout: :mod:`state.codecs`).

Crash consistency is write-ahead, as with a Transactional Outbox: the
runtime's commit protocol (:mod:`seqkeeper.runtime.task`) takes this
topology's outbox (:meth:`OrderedTopology.take`), makes the state writes
behind it durable, produces it, and hands it back to
:meth:`OrderedTopology.confirm`, which records per key how far the ordered
output is durable (and deletes the messages the batch released); an input
offset is committed only after that.

So no output is ever durable before the state that produced it, and after a
crash (``kill -9`` anywhere) or a partition move the new owner, with a state
that is a prefix of the old owner's writes, emits again what was not
confirmed: per key ``confirmed .. next_expected-1`` of the ordered output
(:func:`processors.resequencer.pending`), and the deduplicated copy of every
replayed input record whose own copy was the one accepted. Re-emissions are
byte-identical (same messageId) and counted (``seqkeeper_reemitted``).

With an ordered processor, every released item also goes to the user's
function (:mod:`seqkeeper.topologies.processing`), before the step that
released it is written.
"""

from __future__ import annotations

import collections
import datetime
import itertools
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from operator import itemgetter
from typing import Any

from seqkeeper.processors import deduplicator, key_retention, resequencer
from seqkeeper.processors.clock import StreamClock, too_far_ahead
from seqkeeper.processors.dead_letter import dead_letter_headers
from seqkeeper.processors.envelope import (
    DEFAULT_SHAPE,
    Codec,
    Headers,
    InvalidMessage,
    Message,
    Reason,
    Shape,
    parse,
)
from seqkeeper.processors.processor import PROCESSOR_FAILED, TOPIC_ROLE, Processor
from seqkeeper.processors.resequencer import Emission, GapSkipped, KeyState, Rejection, Step
from seqkeeper.runtime.protocol import Batch, InputRecord, OutboxOwner, Wiring, seconds
from seqkeeper.settings import Settings
from seqkeeper.state import codecs
from seqkeeper.state.stores import Stores
from seqkeeper.state.timers import GapTimers
from seqkeeper.topologies.metrics import Metrics
from seqkeeper.topologies.processing import ProcessorStage
from seqkeeper.topologies.state_queries import ORDERED

log = logging.getLogger("seqkeeper.ordered")

#: A partition's clock before its first record (a value: shared).
_NO_CLOCK = StreamClock()
#: Keys whose seen ids the timer checks for age per partition and tick; it
#: walks all keys round-robin, so quiet keys forget old ids too.
SWEEP_KEYS_PER_TICK = 64
#: Ids forgotten per key and sweep (more on the next round).
SWEEP_IDS_PER_KEY = 64
#: Forgotten keys' markers the timer checks for their horizon per partition
#: and tick (round-robin, as the keys).
SWEEP_MARKERS_PER_TICK = 64


#: What producing a batch confirms for one key: its ordered output is
#: durable below the first item; the others are the sequences of the
#: messages it released (each stays in the buffer until confirmed). One
#: list (an object holding a list was one more object per key and batch
#: for the garbage collector to examine).
Confirm = list[int]


class OrderedTopology(OutboxOwner):
    """Calls the cores for each input record and timer tick, persists, and
    queues outputs in the outbox (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        stores: Stores,
        processor: Processor | None = None,
        shape: Shape = DEFAULT_SHAPE,
        source_topic: str | None = None,
    ) -> None:
        # first: emit reads it per output, and CPython 3.11 reads an
        # instance's first 30 attributes (its shared keys) fastest
        self.stamp = None
        self.settings = settings
        self.policy = settings.ordered.resequencer_policy()
        self.retention = settings.ordered.retention()
        self.key_retention = settings.ordered.key_retention_policy()
        self.time_field = settings.ordered.time_field()
        self.max_skew = settings.ordered.max_clock_skew
        self.shape = shape
        #: how gap markers are written: the value codec's encode (``None``:
        #: JSON); a released message goes on as its input's bytes
        self.encode: Callable[[Any], bytes] | None = (
            None if shape.codec is None else shape.codec.encode
        )
        #: the topic read (named in dead letters): the input, or its repartition
        self.source_topic = source_topic or settings.ordered.input_topic
        self.stores = stores
        self.timers = GapTimers()
        self.clocks: dict[int, StreamClock] = {}  # stream time per input partition
        self.processed: dict[int, int] = {}  # last input offset processed per partition
        self.positions: dict[int, int] = {}
        self.buffered: dict[int, int] = {}
        self.total_buffered = 0  # sum of ``buffered``
        self.arrived = 0  # input records not yet counted in the metrics
        self.owned: set[int] = set()
        self.sweep_after: dict[int, str | None] = {}  # sweep cursor per partition
        self.marker_after: dict[int, str | None] = {}  # marker sweep cursor per partition
        #: per partition, the earliest time a marker may be past its horizon
        #: (none: not known, sweep): an empty or young set of markers is not
        #: read every tick (a RocksDB scan over the markers' range also
        #: skips the tombstones of those dropped, until they are compacted)
        self.markers_due: dict[int, float] = {}
        self.markers_oldest: dict[int, float] = {}  # oldest kept in this marker round
        self.live_counting: dict[int, int] = {}  # keys kept so far in this sweep round
        self.live: dict[int, int] = {}  # keys kept in the last full sweep round
        self.generation = 0
        self.in_flight: dict[int, Batch] = {}  # taken, not yet confirmed (by id)
        self.outbox = Batch()
        self.on_output: Callable[[], None] = lambda: None  # wakes the outbox cycle
        self.metrics = Metrics()
        #: start-up without a clean stop's index: read every key's state
        #: rather than the keys with reorder-buffer entries (:meth:`on_assigned`)
        self.scan_every_key = False
        self.stage: ProcessorStage | None = None
        if processor is not None:
            self.stage = ProcessorStage(
                processor,
                settings,
                stores.state,
                self.emit_processed,
                self.note_stored,
                self.offset_of,
                self.metrics,
                codec=shape.codec,
                input_topic=self.source_topic,
                topics=settings.ordered.output_topics((f"{settings.group_id}-",)),
            )

    # -- input -------------------------------------------------------------
    def on_records(
        self, partition: int, records: Iterable[InputRecord], wall: float
    ) -> Awaitable[None] | None:
        """Fetched input records of one partition, in offset order; what the
        processor still has to run for them, if anything."""
        on_record = self.on_record
        r = None
        for r in records:
            headers = r.headers
            on_record(
                partition,
                r.offset,
                r.key,
                r.value,
                seconds(r.timestamp),
                wall,
                tuple(headers) if headers else (),
            )
        if r is not None:  # (each record is complete: the processor's runs are queued)
            self.positions[partition] = r.offset + 1
        return None if self.stage is None else self.stage.pending()

    def on_record(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: float | None,
        wall: float,
        headers: Headers = (),
    ) -> None:
        """One input record; ``timestamp`` is the record's time in seconds
        (the stream clock follows it, or the configured event-time field).
        Its ``headers`` go with it to every output, as they are."""
        self.arrived += 1
        self.processed[partition] = offset
        clock = self.clocks.get(partition, _NO_CLOCK)
        try:
            message = parse(key, value, self.time_field, self.shape, headers)
        except InvalidMessage as exc:
            self.clocks[partition] = clock.observe(timestamp, wall, self.max_skew)
            self.dead_letter(
                "dlq", key, value, exc.reason, exc.detail, partition, offset, timestamp, headers
            )
            return
        event_time = timestamp if message.event_time is None else message.event_time
        if too_far_ahead(event_time, wall, self.max_skew):  # (its clock stays as it was)
            self.future(
                message, event_time, wall, key, value, partition, offset, timestamp, headers
            )
            return
        clock = self.clocks[partition] = clock.observe(event_time, wall)
        now = clock.now(wall)
        stores = self.stores
        state, window = stores.load(partition, message.key)
        decision = deduplicator.offer(
            stores.seen(partition, message.key, window),
            window,
            message,
            now,
            self.retention,
            source=offset,
        )
        if not decision.accepted:
            if decision.replay:  # this very record was accepted before a crash
                self.emit(partition, "deduped", key, value, headers or None)
                self.metrics.reemitted.labels("deduped").inc()
            else:
                self.metrics.duplicates.inc()
            return
        revived = False
        if state.next_expected is None:
            # A key without state may have been forgotten: its marker says
            # where it stood (one lookup per new key, none per message;
            # also with retention turned off since: markers stay valid).
            marker = stores.marker(partition, message.key)
            if marker is not None:
                admitted = key_retention.admit(marker, message.key, message.seq, self.policy)
                if isinstance(admitted, Rejection):
                    self.rejected(
                        admitted, message, key, value, partition, offset, timestamp, headers
                    )
                    return
                state, revived = admitted, True
        step = resequencer.offer(
            state,
            stores.buffer(partition, message.key),
            message,
            now,
            self.policy,
            self.total_buffered,
        )
        if step.rejected is not None:
            self.rejected(step.rejected, message, key, value, partition, offset, timestamp, headers)
            return
        if step.emitted:
            if isinstance(step.emitted[0], GapSkipped):
                self.metrics.gaps_overflow.inc()
            if self.stage is not None:  # (its writes go first)
                self.stage.released(partition, message.key, step.emitted, wall)
        stores.save(partition, message.key, step, decision.window, decision, revived)
        self.emit(partition, "deduped", key, value, headers or None)
        self.after(partition, message.key, step, state)

    def rejected(
        self,
        r: Rejection,
        message: Message,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        timestamp: float | None,
        headers: Headers,
    ) -> None:
        """A message the Resequencer (or a forgotten key's marker) refused."""
        if r.reason == resequencer.DUPLICATE:
            self.metrics.duplicates.inc()
            return
        if r.reason == Reason.LATE_ARRIVAL:
            self.metrics.late.labels(r.route).inc()
            log.warning("late arrival key=%s seq=%s route=%s", message.key, message.seq, r.route)
        if r.route != "drop":
            self.dead_letter(
                r.route, key, value, r.reason, r.detail, partition, offset, timestamp, headers
            )

    def future(
        self,
        message: Message,
        event_time: float | None,
        wall: float,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        timestamp: float | None,
        headers: Headers,
    ) -> None:
        """Dead-letter a message whose event time is too far ahead: were it
        processed, its partition's stream time would jump and give up every
        gap waiting there (:mod:`processors.clock`)."""
        assert event_time is not None
        where = "its event-time field" if message.event_time is not None else "its record timestamp"
        detail = (
            f"key {message.key!r} seq {message.seq}: {where} "
            f"({_iso(event_time)}) is {event_time - wall:.0f} s ahead of the worker's clock "
            f"({_iso(wall)}), more than SEQKEEPER_MAX_CLOCK_SKEW={self.max_skew:g} s; "
            "correct the producer's clock or the time, then send it again"
        )
        log.warning("event time too far ahead: %s", detail)
        self.dead_letter(
            "dlq",
            key,
            value,
            Reason.FUTURE_EVENT_TIME,
            detail,
            partition,
            offset,
            timestamp,
            headers,
        )

    # -- timers ------------------------------------------------------------
    def on_tick(
        self, positions: dict[int, tuple[int | None, int | None]], wall: float
    ) -> Awaitable[None] | None:
        """Timer. ``positions``: for each owned input partition, its end as
        last fetched and the offset the consumer last read. A partition
        processed up to its end is caught up, and only then does its stream
        time follow the wall clock. Until this worker processes a record of a
        partition, it counts as far as the consumer's position (the committed
        offset after an assignment)."""
        for partition, (highwater, read) in positions.items():
            if partition not in self.processed and read is not None:
                self.processed[partition] = read - 1
            if highwater is not None:
                lag = highwater - (self.processed.get(partition, -1) + 1)
                self.metrics.lag.labels(str(partition)).set(max(0, lag))
            clock = self.clocks.get(partition, _NO_CLOCK)
            if highwater is not None and highwater <= self.processed.get(partition, -1) + 1:
                clock = self.clocks[partition] = clock.idle(wall)
            now = clock.now(wall)
            for key in self.timers.due(partition, now):
                state, window = self.stores.load(partition, key)
                step = resequencer.expire(
                    key, state, self.stores.buffer(partition, key), now, self.policy
                )
                if step.state != state:
                    if step.emitted:
                        self.metrics.gap_timeouts.inc()
                        if self.stage is not None:  # (its writes go first)
                            self.stage.released(partition, key, step.emitted, wall)
                    self.stores.save(partition, key, step, window)
                self.after(partition, key, step)  # popped: always re-arm
            self.sweep(partition, now)
        return None if self.stage is None else self.stage.on_tick(wall)

    def sweep(self, partition: int, now: float) -> None:
        """Forget aged seen ids of the next :data:`SWEEP_KEYS_PER_TICK` keys
        (accepts forget a few on busy keys; this reaches the quiet ones),
        forget those keys idle past the key retention
        (:mod:`processors.key_retention`), and drop the markers of the next
        :data:`SWEEP_MARKERS_PER_TICK` forgotten keys past their horizon.
        Bounded work per tick; what it writes starts an outbox cycle, so
        its deletions reach the changelog (tombstones) in the commit
        protocol, as any step's writes."""
        batch = list(
            itertools.islice(
                self.stores.key_states(partition, self.sweep_after.get(partition)),
                SWEEP_KEYS_PER_TICK,
            )
        )
        round_over = len(batch) < SWEEP_KEYS_PER_TICK
        self.sweep_after[partition] = None if round_over else batch[-1][0]
        kept = forgotten = 0
        for key, state, window in batch:
            if window.size:
                seen = self.stores.seen(partition, key, window)
                swept, forget = deduplicator.sweep(
                    seen, window, now, self.retention, SWEEP_IDS_PER_KEY
                )
                if swept.head != window.head:  # (not for a newly read ``oldest`` alone)
                    self.stores.forget(partition, key, state, swept, forget)
                    self.metrics.seen_forgotten.inc(len(forget))
                    window = swept
            if self.retire(partition, key, state, window, now):
                forgotten += 1
            else:
                kept += 1
        counted = self.live_counting[partition] = self.live_counting.get(partition, 0) + kept
        if round_over:
            self.live[partition] = counted
            self.live_counting[partition] = 0
            self.metrics.keys_live.set(sum(self.live.values()))
        dropped = self.sweep_markers(partition, now)
        if forgotten:
            self.metrics.keys_forgotten.inc(forgotten)
        if forgotten or dropped:
            self.on_output()  # (a cycle takes the writes: tombstones in the changelog)

    def retire(self, partition: int, key: str, state: KeyState, window: Any, now: float) -> bool:
        """Apply key retention to one key; whether it was forgotten."""
        if not self.key_retention.enabled or key_retention.in_flight(state):
            return False
        if self.stage is not None:
            assert state.next_expected is not None  # (not in flight)
            if not self.stage.idle(partition, key, state.next_expected):
                return False
        plan = key_retention.plan(
            state,
            window,
            self.stores.seen(partition, key, window),
            now,
            self.key_retention,
            SWEEP_IDS_PER_KEY,
        )
        if plan is None:
            return False
        self.stores.retire(partition, key, state, plan, self.stage is not None)
        if plan.forget:
            self.metrics.seen_forgotten.inc(len(plan.forget))
        if plan.marker is None:
            return False
        if self.stage is not None:
            self.stage.forget(partition, key)
        at = plan.marker.forgotten_at  # (a new marker: due no earlier than those kept)
        self.markers_oldest[partition] = min(self.markers_oldest.get(partition, math.inf), at)
        if partition in self.markers_due:
            self.markers_due[partition] = min(
                self.markers_due[partition], at + self.key_retention.forgotten
            )
        log.debug("key=%s forgotten at next_expected=%s", key, plan.marker.next_expected)
        return True

    def sweep_markers(self, partition: int, now: float) -> int:
        """Drop the markers past their horizon among the next
        :data:`SWEEP_MARKERS_PER_TICK`; how many were dropped."""
        horizon = self.key_retention.forgotten
        after = self.marker_after.get(partition)
        if math.isinf(horizon) or (after is None and now < self.markers_due.get(partition, -1.0)):
            return 0
        batch = list(
            itertools.islice(self.stores.markers(partition, after), SWEEP_MARKERS_PER_TICK)
        )
        done = len(batch) < SWEEP_MARKERS_PER_TICK
        self.marker_after[partition] = None if done else batch[-1][0]
        expired = []
        oldest = self.markers_oldest.get(partition, math.inf)
        for key, marker in batch:
            if key_retention.marker_expired(marker, now, self.key_retention):
                expired.append(key)
            else:
                oldest = min(oldest, marker.forgotten_at)
        if done:  # a full round: none is due before the oldest kept
            self.markers_due[partition] = oldest + horizon
            self.markers_oldest.pop(partition, None)
        else:
            self.markers_oldest[partition] = oldest
        if expired:
            self.stores.drop_markers(partition, expired)
            self.metrics.markers_dropped.inc(len(expired))
        return len(expired)

    def on_assigned(self, partitions: set[int]) -> None:
        """After every assignment (start, restart, rebalance): rebuild the
        timer index and buffer counts from the key states, and emit again
        what the previous owner (or this worker before a crash) emitted but
        never confirmed. Stream clocks and progress start afresh.

        The keys looked at: after a clean stop, those it named
        (:meth:`save_index`); otherwise (a crash, a move) those with
        reorder-buffer entries, which are all the keys with work
        (:mod:`processors.resequencer`, "Start-up"): a key without one has
        nothing waiting, so no gap deadline and a buffered count of 0, and
        nothing to emit again (when a confirmation's new ``confirmed`` was
        lost after it deleted the key's released messages, the gap markers
        of that range are durable already, and :func:`resequencer.pending`
        leaves them out). Reading every key's state (:attr:`scan_every_key`)
        finds the same."""
        self.generation += 1
        self.owned = set(partitions)
        self.stores.settle(partitions)  # kept: this worker's writes, in order
        self.stores.forget_cached()  # recovered partitions may have changed under it
        self.clocks.clear()
        self.processed.clear()
        self.positions.clear()
        self.sweep_after.clear()
        self.marker_after.clear()
        self.markers_due.clear()
        self.markers_oldest.clear()
        self.live_counting.clear()
        self.live = {p: n for p, n in self.live.items() if p in partitions}
        for partition in set(self.timers.partitions()) | set(self.buffered):
            if partition not in partitions:
                self.timers.drop(partition)
                self.buffered.pop(partition, None)
        again = 0
        for partition in sorted(partitions):
            self.timers.drop(partition)
            index = self.stores.take_index(partition)
            states: Iterable[tuple[str, KeyState, Any]]
            if index is not None:  # after a clean stop: the keys it named
                states = ((k, *self.stores.load(partition, k)) for k in index[0])
                how = "the keys named at the clean stop"
            elif self.scan_every_key:  # O(keys)
                states = self.stores.key_states(partition)
                how = "every key's state"
            else:  # after an unclean stop or a move: O(buffer entries)
                keys = self.stores.buffered_keys(partition)
                states = ((k, *self.stores.load(partition, k)) for k in keys)
                how = "keys with reorder-buffer entries"
            total = looked = 0
            for key, state, _ in states:
                looked += 1
                total += state.buffered
                deadline = resequencer.gap_deadline(state, self.policy)
                if deadline is not None:
                    self.timers.arm(partition, key, deadline)
                if state.confirmed is not None and state.confirmed != state.next_expected:
                    again += self.emit_again(partition, key, state)
            self.buffered[partition] = total if index is None else index[1]
            log.info("partition %d: looked at %d keys (%s)", partition, looked, how)
        self.total_buffered = sum(self.buffered.values())
        self.metrics.buffered.set(self.total_buffered)
        if again:
            log.warning("emitting %d unconfirmed ordered records again", again)
        if self.stage is not None:
            self.stage.on_assigned(partitions)

    def on_revoked(self) -> None:
        if self.stage is not None:
            self.stage.on_revoked()

    def emit_again(self, partition: int, key: str, state: KeyState) -> int:
        items, missing = resequencer.pending(key, state, self.stores.buffer(partition, key))
        if missing:  # durable already (see resequencer.pending)
            log.debug("key=%s: confirmed before the crash: %s", key, missing)
        kbytes = key.encode("utf-8")
        for item in items:
            self.emit(partition, "ordered", kbytes, _value(item, self.encode), _headers(item))
        self.metrics.reemitted.labels("ordered").inc(len(items))
        if state.next_expected is not None:
            self.to_confirm(partition, key, state.next_expected, items)
        return len(items)

    def to_confirm(self, partition: int, key: str, upto: int, emitted: Iterable[Emission]) -> None:
        """Note in the outbox what its production will confirm for ``key``:
        output durable up to ``upto``, and the messages released."""
        confirms = self.outbox.confirms
        slot = (partition, key)
        noted: Confirm | None = confirms.get(slot)
        if noted is None:
            noted = confirms[slot] = [upto]
        else:
            noted[0] = upto
        noted.extend([e.seq for e in emitted if type(e) is Message])

    def emit_processed(
        self, partition: int, role: str, key: bytes, value: bytes, headers: Any
    ) -> None:
        """Queue a processor's output (or dead letter). One to a topic it
        named (:data:`TOPIC_ROLE`) is addressed: the runtime asks the broker
        whether that topic takes the worker's writes before producing it
        (a pattern's topic is not created at start), and hands one it would
        not take to :meth:`undeliverable`."""
        if role.startswith(TOPIC_ROLE):
            self.outbox.addressed.add(role)
        self.emit(partition, role, key, value, headers)

    def undeliverable(self, partition: int, record: Any, topic: str, problem: str) -> Any:
        """A processor's output the broker would not take in ``topic``
        (``problem``: its answer) is dead-lettered in its place, as it is,
        the topic named in the detail: the input it came from was
        processed (its state is stored), so only the output is lost."""
        _, key, value, headers = record
        detail = (
            f"the processor's output could not be written to {topic!r}: {problem} "
            "(create the topic or grant the worker Write on it)"
        )
        reasons = dead_letter_headers(
            PROCESSOR_FAILED, detail, self.source_topic, partition, None,
            exception_class="seqkeeper.OutputUndeliverable",
        )  # fmt: skip
        self.metrics.dead_lettered.labels(PROCESSOR_FAILED).inc()
        log.warning("processor output dead-lettered: %s", detail)
        return ("dlq", key, value, [*(headers or ()), *reasons])

    def note_stored(self, partition: int, key: str, seq: int) -> None:
        """The outbox now holds the processor's stored outputs of ``seq``."""
        self.outbox.stored.append((partition, key, seq))
        self.on_output()

    def offset_of(self, partition: int, key: str, message_id: str) -> int:
        """The input offset of an accepted message (``-1``: forgotten)."""
        _, window = self.stores.load(partition, key)
        seen = self.stores.seen(partition, key, window).get(message_id)
        return -1 if seen is None else seen.source

    def on_stop(self) -> None:
        """A clean stop: the confirmations still in memory are written."""
        self.stores.settle()
        if self.stage is not None:
            self.stage.write_queued()

    def settle(self) -> None:
        self.stores.settle()

    def describe(self) -> None:
        self.save_index()

    def save_index(self) -> None:
        """At a clean stop, once the outputs are confirmed: name per owned
        partition the keys the next start-up must look at (waiting for a gap,
        or with output not yet confirmed), so it need not read every key's
        state (:meth:`on_assigned`). Any later write voids it."""
        for partition in self.owned:
            keys = self.timers.keys(partition)
            for batch in [self.outbox, *self.in_flight.values()]:
                keys.update(k for p, k in batch.confirms if p == partition)
            self.stores.save_index(partition, sorted(keys), self.buffered.get(partition, 0))

    # -- outbox ------------------------------------------------------------
    def taken(self, batch: Batch) -> None:
        """A cycle takes ``batch``: publish the metrics counted per record."""
        self.metrics.messages_in.inc(self.arrived)
        self.arrived = 0
        if self.stage is not None:
            self.stage.publish()
            self.stage.write_queued()  # (before the runtime takes the store's writes)
        self.metrics.buffered.set(self.total_buffered)
        if batch:  # an empty one is never confirmed
            self.in_flight[id(batch)] = batch
        for topic, n in collections.Counter(map(itemgetter(0), batch.records)).items():
            self.metrics.messages_out.labels(topic).inc(n)

    def confirm(self, batch: Batch) -> None:
        """``batch`` was produced and acknowledged: record how far each key's
        ordered output is durable. Skipped for partitions reassigned since."""
        self.in_flight.pop(id(batch), None)
        if batch.generation != self.generation:
            return
        if batch.stored and self.stage is not None:
            self.stage.confirm(batch.stored)
        noted: Confirm
        for (partition, key), noted in batch.confirms.items():
            if partition not in self.owned:
                continue
            state, window = self.stores.load(partition, key)
            step = resequencer.confirm(state, noted[1:], noted[0], self.policy)
            # (confirm returns this very state when it changes nothing)
            if step.buffer_deletes or step.state is not state:
                self.stores.confirm(partition, key, step, window)

    # -- shared ------------------------------------------------------------
    def after(self, partition: int, key: str, step: Step, before: KeyState | None = None) -> None:
        """Queue a persisted step's ordered records and (re-)arm its timer
        when its deadline changed (so the timer heap holds one live entry per
        waiting key, not one per message)."""
        if step.emitted:
            kbytes = key.encode("utf-8")
            emit = self.emit
            for item in step.emitted:  # (one type test per item: the hot path)
                if isinstance(item, GapSkipped):  # its marker, in the value codec, no headers
                    emit(partition, "ordered", kbytes, item.encoded(self.encode), None)
                    self.metrics.skipped.inc(item.last - item.first + 1)
                    log.warning("gap skipped key=%s from=%s to=%s", key, item.first, item.last)
                else:  # the input's bytes and headers, as they came
                    emit(partition, "ordered", kbytes, item.value, item.headers or None)
            if step.state.next_expected is not None:
                self.to_confirm(partition, key, step.state.next_expected, step.emitted)
        if step.buffered_delta:
            self.buffered[partition] = self.buffered.get(partition, 0) + step.buffered_delta
            self.total_buffered += step.buffered_delta
        deadline = resequencer.gap_deadline(step.state, self.policy)
        if deadline is not None and (
            before is None or deadline != resequencer.gap_deadline(before, self.policy)
        ):
            self.timers.arm(partition, key, deadline)

    def dead_letter(
        self,
        route: str,
        key: bytes | None,
        value: bytes | None,
        reason: str,
        detail: str,
        partition: int,
        offset: int,
        timestamp: float | None,
        headers: Headers = (),
    ) -> None:
        """The record as it came (its headers first, as they were), with
        the reason in headers of its own."""
        millis = None if timestamp is None else int(timestamp * 1000)
        reasons = dead_letter_headers(reason, detail, self.source_topic, partition, offset, millis)
        self.emit(partition, "late" if route == "late" else "dlq", key, value, [*headers, *reasons])
        self.metrics.dead_lettered.labels(reason).inc()
        log.info("dead-lettered partition=%s offset=%s reason=%s", partition, offset, reason)


def _iso(t: float) -> str:
    """An epoch time in seconds as ISO-8601 UTC (any float: never raises)."""
    try:
        return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return f"{t:g} s after the epoch"


def _value(item: Emission, encode: Callable[[Any], bytes] | None) -> bytes:
    """An ordered output's value: the input's bytes, or the gap marker's
    in the value codec."""
    return item.encoded(encode) if type(item) is GapSkipped else item.value


def _headers(item: Emission) -> Headers | None:
    """An ordered output's headers: the input's (a gap marker has none)."""
    return item.headers or None if type(item) is Message else None


def wiring(
    settings: Settings, processor: Processor | None = None, codec: Codec | None = None
) -> Wiring:
    """How the runtime wires the ordered topology for ``settings``, with the
    user's ordered ``processor`` and value ``codec`` if any."""
    shape = settings.ordered.shape(codec)
    topics = {
        "processed": settings.ordered.processed_topic,
        "ordered": settings.ordered.ordered_topic,
        "deduped": settings.ordered.deduped_topic,
        "dlq": settings.ordered.dlq_topic,
        "late": settings.ordered.late_topic,
    }

    def probe(topology: Any) -> dict[str, Any]:
        return {
            "outbox records": len(topology.outbox.records),
            "owned": topology.owned,
            "processed": topology.processed,
            "generation": topology.generation,
        }

    # a key taken from the value: read the repartitioned input
    source = settings.repartition_topic() or settings.ordered.input_topic
    return Wiring(
        input_topic=source,
        table="state",
        build=lambda store: OrderedTopology(
            settings, Stores(store, packed=shape is not DEFAULT_SHAPE), processor, shape, source
        ),
        output_topic=lambda role: (
            role[len(TOPIC_ROLE) :] if role.startswith(TOPIC_ROLE) else topics[role]
        ),
        # The reorder buffer's local writes wait in memory: most entries are
        # deleted (confirmed) before they would reach RocksDB.
        deferred=codecs.BUFFER,
        registry=lambda topology: topology.metrics.registry,
        probe=probe,
        queries=ORDERED,
    )
