"""Key retention: forget a sequence key that has stayed idle, so that state
grows with the keys alive, not with every key ever seen.

A key is *idle* when nothing of it is in flight: nothing waits in its
reorder buffer (``buffered == 0``, no gap deadline), all it emitted is
confirmed durable (``confirmed == next_expected``), and the shell says its
processor has nothing queued or unconfirmed. It is *forgettable* once it has
been idle longer than :attr:`KeyRetention.idle` since it last accepted a
message (:func:`last_active`), in stream time.

Forgetting deletes the key's state (key state, seen ids, processor record)
and keeps a small :class:`Forgotten` marker instead: the key's next expected
sequence and when it was forgotten. A message for a key that has no state
but a marker (:func:`admit`):

* ``seq < marker``: it was released or given up before; it is rejected as a
  late arrival (``late-arrival``, routed by the late policy, as a message
  arriving after its gap was given up), never emitted again;
* ``seq >= marker``: the key starts again at the marker, as if it had never
  been forgotten (a higher sequence waits for the gap, as usual). The
  processor's state of the key starts again empty.

The marker itself is dropped :attr:`KeyRetention.forgotten` seconds after
the key was forgotten (:func:`marker_expired`). After that the key is fully
gone: a message for it is a new key's (it starts at the first sequence, see
``SEQKEEPER_FIRST_SEQ``), so a copy older than both horizons could be
emitted again. Both horizons are far beyond any gap timeout, seen-id age
or producer retry.

Work is bounded: :func:`plan` deletes at most ``limit`` seen ids per call (a
key with more is trimmed over several sweeps before it is forgotten).

Invariants (checked by ``tests/processors/test_key_retention.py``):

* A key with anything in flight (buffered, a gap, output not confirmed) is
  never forgotten, nor one active within the retention.
* A forgotten key's marker is its ``next_expected``; no sequence below it
  is admitted, every sequence at or above it is, starting from it.
* A plan never deletes more than ``limit`` ids, and forgets the key only
  when it deletes all the ids left.
"""

from __future__ import annotations

import math

from seqkeeper.processors.deduplicator import SeenLog, SeenWindow
from seqkeeper.processors.envelope import Reason
from seqkeeper.processors.resequencer import KeyState, Policy, Rejection, Route
from seqkeeper.processors.values import value

DAY = 24 * 3600.0


@value
class KeyRetention:
    """How long an idle key is kept (``idle``) and how long its marker is
    kept once it is forgotten (``forgotten``), in seconds; ``inf``: never
    forgotten / never dropped."""

    idle: float = 7 * DAY
    forgotten: float = 30 * DAY

    @property
    def enabled(self) -> bool:
        return not math.isinf(self.idle)


@value
class Forgotten:
    """What is kept of a forgotten key: its next expected sequence and when
    (stream time) it was forgotten."""

    next_expected: int
    forgotten_at: float


@value
class Plan:
    """One sweep's work on a key: delete the seen ids ``forget`` (position,
    id) and keep ``window``; then, with ``marker``, forget the key."""

    window: SeenWindow
    forget: tuple[tuple[int, str], ...] = ()
    marker: Forgotten | None = None


def last_active(window: SeenWindow, seen: SeenLog) -> float | None:
    """When the key last accepted a message: the time of its newest seen id;
    for a key whose ids have all aged out, the time the window kept of the
    last one (``-inf`` when a state written before it did not keep it: the
    key has been idle at least the seen-id age). ``None``: not known (the
    newest id's entry is missing, a write cut by a crash): not idle yet."""
    if window.size == 0:
        return window.oldest
    newest = seen.at(window.tail - 1)
    return None if newest is None else newest[1]


def in_flight(state: KeyState) -> bool:
    """Whether the key has messages waiting or output not yet confirmed."""
    return (
        state.buffered > 0
        or state.gap_since is not None
        or state.next_expected is None
        or state.confirmed != state.next_expected
    )


def forgettable(state: KeyState, since: float | None, now: float, retention: KeyRetention) -> bool:
    """Whether the key may be forgotten now (``since``: :func:`last_active`)."""
    return (
        retention.enabled
        and not in_flight(state)
        and since is not None
        and now - since >= retention.idle
    )


def plan(
    state: KeyState,
    window: SeenWindow,
    seen: SeenLog,
    now: float,
    retention: KeyRetention,
    limit: int,
) -> Plan | None:
    """What a sweep does with an idle key (``None``: keep it as it is): delete
    up to ``limit`` of its seen ids, oldest first, and forget it (the
    marker) once none is left."""
    if not forgettable(state, last_active(window, seen), now, retention):
        return None
    assert state.next_expected is not None  # (not in flight)
    head, forget = window.head, list[tuple[int, str]]()
    while head < window.tail and len(forget) < limit:
        entry = seen.at(head)
        if entry is not None:
            forget.append((head, entry[0]))
        head += 1
    if head < window.tail:  # more ids than one sweep deletes: the rest next time
        return Plan(SeenWindow(head, window.tail, window.oldest, window.ids), tuple(forget))
    return Plan(
        SeenWindow(head, head, window.oldest, 0),
        tuple(forget),
        Forgotten(state.next_expected, now),
    )


def admit(marker: Forgotten, key: str, seq: int, policy: Policy) -> KeyState | Rejection:
    """A message with sequence ``seq`` for a key that was forgotten: the state
    it starts again from, or why it is rejected (see the module docstring)."""
    nxt = marker.next_expected
    if seq >= nxt:
        return KeyState(next_expected=nxt, confirmed=nxt)
    routes: dict[str, Route] = {"dlq": "dlq", "drop": "drop", "late-topic": "late"}
    return Rejection(
        Reason.LATE_ARRIVAL,
        f"key {key!r} seq {seq} arrived after the key was forgotten (idle past "
        f"SEQKEEPER_KEY_RETENTION) with next expected {nxt}: it was released or given up before",
        routes[policy.late],
    )


def marker_expired(marker: Forgotten, now: float, retention: KeyRetention) -> bool:
    """Whether the marker is past its horizon (then the key is fully gone)."""
    return now - marker.forgotten_at >= retention.forgotten
