"""Resequencer: release each key's messages in sequence order, with explicit
policies for gaps, capacity and late arrivals.

State per key (:class:`KeyState`): ``next_expected`` (the next sequence to
release), how many messages wait in the reorder buffer, since when the head
gap has blocked them (``gap_since``), the sequence ranges given up
(``skipped``) and ``confirmed``: every emission below it is known to be
durable downstream. The buffer itself (sequence -> message) is read through
:class:`BufferLookup` by exact sequence or by "first buffered sequence
after", never as a whole.

Crash consistency (write-ahead, like an outbox): every accepted message is
put in the buffer, and a released one stays there until :func:`confirm`
(called once its emission is durable) deletes it. So ``confirmed ..
next_expected - 1`` can always be emitted again, byte for byte and in order,
by :func:`pending` (ranges given up there are kept unmerged for the same
reason: a re-emitted marker is identical to the first one). A message
missing from the buffer in that range was deleted by a confirmation whose
new ``confirmed`` a crash kept from being stored (the shell stores the
deletions first): its emission is durable, and it is not emitted again.
The caller names the sequences to delete (those it saw released), so a
confirmation never scans the buffer.

Start-up: after a crash or a move the shell looks only at the keys with
buffer entries (``OrderedTopology.on_assigned``), because every key with
work has one:

* a gap deadline needs ``buffered > 0``, and each waiting message has its
  entry (written before the state that counts it; a confirmation deletes
  only released sequences, below ``next_expected``); so the keys without
  entries add 0 to the buffered count;
* of ``confirmed .. next_expected - 1``, each message is in the buffer or
  durable (its confirmation deleted it), and each gap marker is emitted by
  the step that releases the message right after its range (or, skipping
  onto an uncounted entry on overflow, leaves that entry waiting): a key
  with no entry at all emitted nothing there that is not durable, since
  the batch holding a marker was produced no later than the one whose
  confirmation deleted the message after it. Such a key's ``confirmed`` is
  older than those deletions (a crash or a move lost it, see
  ``state.stores``); :func:`pending` knows those markers for durable by the
  missing message after them, on this key and on any key whose stale
  ``confirmed`` outlives its next entries.

The count stays within the entries as long as a waiting message's id is
remembered while it waits (by default ids are kept 7 days and 100,000 per
key; a gap holds messages 5 s of stream time, 10,000 per key). If a
redelivery outlives its id, :func:`offer` counts the message a second
time, and once its entries are released the key may keep ``buffered > 0``
with no entry: the start-up then arms no timer for it and leaves its count
out of the partition's total, until the key's next step arms one and
:func:`expire` sets the count to 0 (taking it off a total that never held
it: the total is that much low until the next assignment).

Rules:

* ``seq == next_expected``: released, then contiguous successors are drained.
* ``seq > next_expected``: buffered. When the buffer is full (per key or in
  total) the overflow policy either skips the gap at once (``skip``) or
  dead-letters the message (``dlq``).
* Gap timeout: once the head gap has blocked buffered messages for
  ``gap_timeout`` seconds, :func:`expire` gives up the missing range: a
  ``seqkeeper.GapSkipped`` marker with ``{"from": a, "to": b}`` is emitted in
  its place and the buffer drains.
* ``seq < next_expected`` with a new messageId: a late arrival if the
  sequence lies in a range given up (routed by the late policy: ``dlq``,
  ``drop`` or ``late-topic``), otherwise a sequence conflict (dead letter:
  the first message of a sequence wins). Ranges given up are remembered per
  key up to ``remembered_skips`` (and all of those not yet confirmed);
  older ones count as conflicts.

Invariants (checked by ``tests/processors/test_resequencer.py``):

* Per key, released sequences and skipped ranges together are strictly
  increasing and contiguous from the key's first sequence: no sequence is
  released twice, out of order, or both released and skipped.
* Every offered message is accounted for exactly once: released (now or
  later), still waiting, or rejected with a reason and a route.
* The messages waiting never exceed the capacity (released messages kept
  until confirmed do not count: :func:`confirm` bounds them).
* Cost per call is proportional to what it releases, plus at most one
  "first after" lookup; never to the buffer size. State changes come back as
  a delta (puts, deletes, the new small key state), never as a new buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import field
from typing import Any, Literal, Protocol

import orjson

from seqkeeper.processors.envelope import Message, Reason
from seqkeeper.processors.values import value

#: The default first sequence of a key.
FIRST_SEQ = 1
#: ``type`` of the marker emitted in place of a skipped range.
GAP_SKIPPED = "seqkeeper.GapSkipped"

Route = Literal["dlq", "late", "drop"]
#: Rejection reason (route ``drop``, never dead-lettered) of a copy of a
#: released message whose id the Idempotent Receiver no longer remembered.
DUPLICATE = "duplicate"


class BufferLookup(Protocol):
    """Read access to one key's reorder buffer."""

    def get(self, seq: int, /) -> Message | None: ...

    def first_after(self, seq: int, /) -> int | None:
        """The lowest buffered sequence greater than ``seq``, if any."""
        ...


class DictBuffer(dict[int, Message]):
    """A :class:`BufferLookup` over a plain dict (tests, in-memory store)."""

    def first_after(self, seq: int, /) -> int | None:
        return min((s for s in self if s > seq), default=None)


@value
class Policy:
    """Resequencing policy; see the module docstring for the meaning."""

    first_seq: Literal["one", "first-seen"] = "one"
    gap_timeout: float = 5.0
    max_buffered_per_key: int = 10_000
    max_buffered_total: int = 1_000_000
    overflow: Literal["skip", "dlq"] = "skip"
    late: Literal["dlq", "drop", "late-topic"] = "dlq"
    remembered_skips: int = 32


@value
class KeyState:
    """The small per-key record; the buffer entries are stored apart.
    ``buffered`` counts the messages waiting (``seq >= next_expected``)."""

    next_expected: int | None = None
    buffered: int = 0
    gap_since: float | None = None
    skipped: tuple[tuple[int, int], ...] = ()
    confirmed: int | None = None


@value
class GapSkipped:
    """The marker emitted in place of the given-up range ``first..last``."""

    key: str
    first: int
    last: int

    @property
    def message_id(self) -> str:
        # Deterministic: a marker re-emitted after a crash is byte-identical.
        return f"seqkeeper.gap:{self.key}:{self.first}-{self.last}"

    @property
    def document(self) -> dict[str, Any]:
        """The marker as a document, for the value codec to write."""
        return {
            "messageId": self.message_id,
            "seq": self.first,
            "type": GAP_SKIPPED,
            "data": {"from": self.first, "to": self.last},
        }

    @property
    def value(self) -> bytes:
        """The marker in JSON (the default codec)."""
        return orjson.dumps(self.document)

    def encoded(self, encode: Callable[[Any], bytes] | None) -> bytes:
        """The marker's value in the codec whose ``encode`` is given
        (``None``: JSON)."""
        return orjson.dumps(self.document) if encode is None else encode(self.document)


Emission = Message | GapSkipped


@value
class Rejection:
    reason: str
    detail: str
    route: Route = "dlq"


@value
class Step:
    """The outcome of one call: the new key state, buffer changes to persist,
    what to emit on the ordered topic (in order), and the change of the
    number of waiting messages (for the total count)."""

    state: KeyState
    emitted: tuple[Emission, ...] = ()
    buffer_put: Message | None = None
    buffer_deletes: tuple[int, ...] = field(default=())
    rejected: Rejection | None = None
    buffered_delta: int = 0

    @property
    def released(self) -> tuple[Message, ...]:
        return tuple(e for e in self.emitted if isinstance(e, Message))


def _start(state: KeyState, seq: int, policy: Policy) -> int:
    if state.next_expected is not None:
        return state.next_expected
    return seq if policy.first_seq == "first-seen" else FIRST_SEQ


def _prune(
    skipped: tuple[tuple[int, int], ...], confirmed: int, keep: int
) -> tuple[tuple[int, int], ...]:
    """Keep the ``keep`` most recent ranges given up and every range not yet
    confirmed (it may have to be emitted again)."""
    drop = 0
    while len(skipped) - drop > keep and skipped[drop][1] < confirmed:
        drop += 1
    return skipped[drop:]


class _Run:
    """Accumulates one call's emissions."""

    def __init__(self, key: str, buffer: BufferLookup, nxt: int, state: KeyState) -> None:
        self.key = key
        self.buffer = buffer
        self.next = nxt
        self.confirmed = nxt if state.confirmed is None else state.confirmed
        self.buffered = state.buffered
        self.skipped = state.skipped
        self.emitted: list[Emission] = []

    def release(self, message: Message) -> None:
        self.emitted.append(message)
        self.next = message.seq + 1

    def drain(self) -> None:
        # Nothing waits when the count is 0: no lookup (the common in-order case).
        while self.buffered > 0 and (held := self.buffer.get(self.next)) is not None:
            self.buffered -= 1
            self.release(held)

    def skip_to(self, seq: int, policy: Policy) -> None:
        """Give up ``next .. seq-1`` (emit the marker); ``seq`` is next."""
        if seq > self.next:
            self.emitted.append(GapSkipped(self.key, self.next, seq - 1))
            self.skipped = _prune(
                (*self.skipped, (self.next, seq - 1)), self.confirmed, policy.remembered_skips
            )
            self.next = seq

    def state(self, now: float, before: KeyState) -> KeyState:
        if self.buffered == 0:
            gap_since = None
        elif before.buffered == 0 or self.emitted:
            gap_since = now  # a new head gap starts blocking now
        else:
            gap_since = before.gap_since
        return KeyState(self.next, self.buffered, gap_since, self.skipped, self.confirmed)

    def step(self, now: float, before: KeyState, put: Message | None = None) -> Step:
        state = self.state(now, before)
        return Step(
            state,
            tuple(self.emitted),
            buffer_put=put,
            buffered_delta=state.buffered - before.buffered,
        )


def offer(
    state: KeyState,
    buffer: BufferLookup,
    message: Message,
    now: float,
    policy: Policy = Policy(),
    total_buffered: int = 0,
) -> Step:
    """Offer a (deduplicated) message to its key's resequencer state.

    ``total_buffered`` is the number of messages buffered over all keys the
    caller owns, for the total capacity bound.
    """
    seq = message.seq
    nxt = _start(state, seq, policy)
    if seq == nxt and state.buffered == 0:  # in order, nothing waits (the common case)
        confirmed = nxt if state.confirmed is None else state.confirmed
        return Step(
            KeyState(seq + 1, 0, None, state.skipped, confirmed), (message,), buffer_put=message
        )
    if seq < nxt:
        held = buffer.get(seq)
        if held is not None and held.message_id == message.message_id:
            return Step(
                state,
                rejected=Rejection(
                    DUPLICATE,
                    f"key {message.key!r} seq {seq}: messageId {message.message_id!r} "
                    "was already released",
                    "drop",
                ),
            )
        return Step(state, rejected=_late_or_conflict(state, message, nxt, policy))
    if seq > nxt:
        held = buffer.get(seq)
        if held is not None and held.message_id != message.message_id:
            return Step(
                state,
                rejected=Rejection(
                    Reason.SEQUENCE_CONFLICT,
                    f"key {message.key!r} seq {seq} is already buffered as messageId "
                    f"{held.message_id!r}; the first one wins",
                ),
            )
        # The same messageId held but not counted (a write cut short by a
        # crash): buffer it again, it takes no new room.
        full = held is None and (
            state.buffered >= policy.max_buffered_per_key
            or total_buffered >= policy.max_buffered_total
        )
        if not full:  # buffered (what _Run.step makes of it, without a _Run)
            confirmed = nxt if state.confirmed is None else state.confirmed
            gap_since = now if state.buffered == 0 else state.gap_since
            waiting = KeyState(nxt, state.buffered + 1, gap_since, state.skipped, confirmed)
            return Step(waiting, buffer_put=message, buffered_delta=1)
        if policy.overflow == "dlq":
            return Step(
                state,
                rejected=Rejection(
                    Reason.BUFFER_OVERFLOW,
                    f"key {message.key!r} seq {seq}: the reorder buffer is full "
                    f"({state.buffered} buffered for this key, {total_buffered} in total; "
                    f"limits {policy.max_buffered_per_key} and {policy.max_buffered_total}) "
                    f"while waiting for seq {nxt}",
                ),
            )
        # Overflow policy "skip": give up the head gap now, as a timeout would.
        run = _Run(message.key, buffer, nxt, state)
        lowest = buffer.first_after(nxt - 1)
        if lowest is None or seq < lowest:
            run.skip_to(seq, policy)
        else:
            run.skip_to(lowest, policy)
            run.drain()
            if seq != run.next:
                run.buffered += 1
                return run.step(now, state, message)
    else:  # seq == nxt, with messages waiting behind it
        run = _Run(message.key, buffer, nxt, state)
    run.release(message)
    run.drain()
    return run.step(now, state, message)


def gap_deadline(state: KeyState, policy: Policy) -> float | None:
    """When :func:`expire` will act on this key, or ``None`` if nothing waits."""
    if state.buffered == 0 or state.gap_since is None:
        return None
    return state.gap_since + policy.gap_timeout


def expire(
    key: str, state: KeyState, buffer: BufferLookup, now: float, policy: Policy = Policy()
) -> Step:
    """Apply the gap timeout: skip the head gap if it has blocked too long."""
    deadline = gap_deadline(state, policy)
    if deadline is None or now < deadline or state.next_expected is None:
        return Step(state)
    lowest = buffer.first_after(state.next_expected - 1)
    run = _Run(key, buffer, state.next_expected, state)
    if lowest is None:  # the count said otherwise: trust the buffer
        run.buffered = 0
        return run.step(now, state)
    run.skip_to(lowest, policy)
    run.drain()
    return run.step(now, state)


def pending(key: str, state: KeyState, buffer: BufferLookup) -> tuple[list[Emission], list[int]]:
    """What was emitted but is not confirmed (``confirmed .. next_expected-1``),
    in the original order and byte for byte, to emit again after a crash or
    when another worker takes the key over; and the sequences known to be
    durable already: messages not in the buffer (deleted by a confirmation
    whose new ``confirmed`` a crash lost), and the first sequence of each
    gap marker whose next message is such a one."""
    if state.next_expected is None or state.confirmed is None:
        return [], []
    starts = dict(state.skipped)
    out: list[Emission] = []
    missing: list[int] = []
    seq = state.confirmed
    while seq < state.next_expected:
        last = starts.get(seq)
        if last is not None:
            # A marker goes out no later than the message right after its
            # range (the first one not given up): when that message's
            # confirmation deleted it, the marker is durable too.
            after = last + 1
            while after in starts:
                after = starts[after] + 1
            if after < state.next_expected and buffer.get(after) is None:
                missing.append(seq)
            else:
                out.append(GapSkipped(key, seq, last))
            seq = last + 1
            continue
        held = buffer.get(seq)
        if held is None:
            missing.append(seq)
        else:
            out.append(held)
        seq += 1
    return out, missing


def confirm(state: KeyState, released: Iterable[int], upto: int, policy: Policy = Policy()) -> Step:
    """Everything emitted below ``upto`` is durable: advance ``confirmed``
    and delete the released messages ``released`` (the sequences the caller
    saw emitted since its last confirmation) below it from the buffer."""
    if state.next_expected is None:
        return Step(state)
    upto = min(upto, state.next_expected)
    deletes = [seq for seq in released if seq < upto]
    confirmed = max(upto, state.confirmed or 0)
    if confirmed == state.confirmed and not deletes:
        return Step(state)
    skipped = _prune(state.skipped, confirmed, policy.remembered_skips)
    new = KeyState(state.next_expected, state.buffered, state.gap_since, skipped, confirmed)
    return Step(new, buffer_deletes=tuple(deletes))


def _late_or_conflict(state: KeyState, message: Message, nxt: int, policy: Policy) -> Rejection:
    seq = message.seq
    for first, last in state.skipped:
        if first <= seq <= last:
            routes: dict[str, Route] = {"dlq": "dlq", "drop": "drop", "late-topic": "late"}
            route = routes[policy.late]
            return Rejection(
                Reason.LATE_ARRIVAL,
                f"key {message.key!r} seq {seq} arrived after the range {first}..{last} "
                f"was given up (next expected is {nxt})",
                route,
            )
    return Rejection(
        Reason.SEQUENCE_CONFLICT,
        f"key {message.key!r} seq {seq} was already released under another "
        f"messageId (next expected is {nxt}); the first one wins",
    )
