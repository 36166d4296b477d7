"""Idempotent Receiver: accept each messageId once per sequence key, within a
bounded memory of seen ids.

Per key the seen ids form a FIFO (positions ``head .. tail-1`` of
:class:`SeenWindow`): each accepted id is appended with the time it was
accepted; the oldest are forgotten when the key remembers more than
``Retention.max_per_key`` ids or when they are older than
``Retention.max_age`` seconds (checked on every accept, a bounded number at a
time, and by :func:`sweep` for keys that went quiet). Time is an argument,
never read from a clock.

Reads: a new id is told apart from a remembered one by reading the store,
unless the window vouches that it is new: it keeps a 128-bit filter
(:attr:`SeenWindow.ids`, two bits per id, :func:`id_bits`) with the bits of
every id it remembers (and maybe of some it forgot), so an id with a bit
missing was never accepted within it. With a few dozen ids per key most new
ids need no read (a RocksDB lookup that misses, the most common read of the
hot path); a key that remembers many ids fills its filter and then reads
the store for every id, as without a filter.

Crash replays: each remembered id keeps the input position (``source``, the
offset in its partition) of the copy that was accepted. When that very
record comes again (the input is replayed from the last committed offset
after a crash), the decision says ``replay``: the shell emits its output
again (the same bytes, so a downstream idempotent receiver drops it) instead
of dropping it as a redelivery, because the first emission may not have
reached the broker.

What a forgotten id means: a redelivery that arrives after its id was
forgotten is no longer recognised here. The Resequencer still never releases
a sequence twice (it is below ``next_expected``), so such a copy is
dead-lettered as a conflict or late arrival instead of emitted again; only
the arrival-order (``deduped``) output would need the id itself.

Invariants (checked by ``tests/processors/test_deduplicator.py``):

* While an id is remembered, every further copy is dropped.
* The first arrival of every id is accepted.
* A key never remembers more than ``max_per_key`` ids, and an accept forgets
  at most ``EVICT_PER_ACCEPT`` ids because of age (bounded work per message).
"""

from __future__ import annotations

import math
import zlib
from typing import NamedTuple, Protocol

from seqkeeper.processors.envelope import Message
from seqkeeper.processors.values import value

#: Age evictions done per accepted message (the rest is left to sweeps).
EVICT_PER_ACCEPT = 2
#: :attr:`SeenWindow.oldest` when it is not known.
UNKNOWN = -math.inf
#: :attr:`SeenWindow.ids` when it is not known (every bit set: read always).
ALL_IDS = (1 << 128) - 1


def id_bits(message_id: str) -> int:
    """The two bits of ``message_id`` in :attr:`SeenWindow.ids` (from its
    CRC-32, the same in every process, as the filter is persisted)."""
    h = zlib.crc32(message_id.encode("utf-8"))
    return (1 << (h & 127)) | (1 << ((h >> 7) & 127))


@value
class Retention:
    #: Seconds an accepted id is remembered (default 7 days).
    max_age: float = 7 * 24 * 3600.0
    #: Ids remembered per key.
    max_per_key: int = 100_000


@value
class SeenWindow:
    """FIFO positions of a key's remembered ids: ``head`` is the oldest,
    ``tail`` the position the next accepted id gets. ``oldest``: when the id
    at ``head`` was accepted, as last read or written, so that an accept
    needs no read to know nothing is old enough to forget; a value at or
    below the age horizon (such as :data:`UNKNOWN`) means "read it".
    ``ids``: a filter holding the :func:`id_bits` of every remembered id (a
    superset: forgetting clears no bit); an id with a bit missing is not
    remembered. :data:`ALL_IDS` when not known."""

    head: int = 0
    tail: int = 0
    oldest: float = UNKNOWN
    ids: int = ALL_IDS

    @property
    def size(self) -> int:
        return self.tail - self.head


class Seen(NamedTuple):
    """A remembered id: FIFO position, when it was accepted, and the input
    position of the accepted copy (``-1`` when unknown)."""

    position: int
    accepted_at: float
    source: int


class SeenLog(Protocol):
    """Read access to one key's remembered ids."""

    def get(self, message_id: str, /) -> Seen | None: ...

    def at(self, position: int, /) -> tuple[str, float] | None:
        """``(messageId, accepted_at)`` at a FIFO position, if remembered."""
        ...


@value
class DedupDecision:
    """``accepted``: pass the message on; persist ``window``, store
    ``remember`` (id, :class:`Seen`) and delete ``forget`` (position, id).
    ``replay``: not accepted, but the very copy that was accepted, offered
    again (emit its output again)."""

    accepted: bool
    message_id: str
    window: SeenWindow
    remember: tuple[str, Seen] | None = None
    forget: tuple[tuple[int, str], ...] = ()
    replay: bool = False


def offer(
    seen: SeenLog,
    window: SeenWindow,
    message: Message,
    now: float,
    retention: Retention = Retention(),
    source: int = -1,
) -> DedupDecision:
    """Decide on ``message`` (read from input position ``source``) given the
    ids remembered for its key."""
    bits = id_bits(message.message_id)
    if window.ids & bits == bits and window.tail != window.head:  # (else new: no read)
        known = seen.get(message.message_id)
        if known is not None:
            replay = source >= 0 and known.source == source
            return DedupDecision(False, message.message_id, window, replay=replay)
    position = window.tail
    head, tail, oldest = window.head, window.tail + 1, window.oldest
    forget: list[tuple[int, str]] = []
    while tail - head > retention.max_per_key:
        entry = seen.at(head)
        if entry is not None:
            forget.append((head, entry[0]))
        head += 1
        oldest = UNKNOWN  # the new head's
    if oldest <= now - retention.max_age:  # (else nothing is old enough: no call)
        head, oldest, _ = _forget_aged(
            seen, head, position, oldest, now, retention, EVICT_PER_ACCEPT, forget
        )
    if head == position:  # the accepted id is the oldest now, and the only one
        oldest, ids = now, bits
    else:
        ids = window.ids | bits
    return DedupDecision(
        True,
        message.message_id,
        SeenWindow(head, tail, oldest, ids),
        remember=(message.message_id, Seen(position, now, source)),
        forget=tuple(forget),
    )


def sweep(
    seen: SeenLog, window: SeenWindow, now: float, retention: Retention, limit: int
) -> tuple[SeenWindow, tuple[tuple[int, str], ...]]:
    """Forget up to ``limit`` ids of a key that are past ``max_age``. A window
    left empty keeps in ``oldest`` when its last id was accepted (the key's
    last activity, for key retention: :mod:`processors.key_retention`)."""
    forget: list[tuple[int, str]] = []
    head, oldest, last = _forget_aged(
        seen, window.head, window.tail, window.oldest, now, retention, limit, forget
    )
    ids = window.ids if head < window.tail else 0  # (nothing remembered: no bit)
    if head == window.tail and last is not None:
        oldest = last
    return SeenWindow(head, window.tail, oldest, ids), tuple(forget)


def _forget_aged(
    seen: SeenLog,
    head: int,
    stop: int,
    oldest: float,
    now: float,
    retention: Retention,
    limit: int,
    forget: list[tuple[int, str]],
) -> tuple[int, float, float | None]:
    """Advance ``head`` over at most ``limit`` positions before ``stop`` that
    are past ``max_age`` (appending them to ``forget``); the new head and
    its ``oldest`` (see :class:`SeenWindow`: the id at ``head`` is read
    only when ``oldest`` does not show it is young), and when the last id
    forgotten was accepted (``None``: none was, or its entry was missing)."""
    horizon = now - retention.max_age
    last: float | None = None
    for _ in range(limit):
        if head >= stop or oldest > horizon:
            break
        entry = seen.at(head)
        last = None
        if entry is not None:
            if entry[1] > horizon:
                return head, entry[1], None
            forget.append((head, entry[0]))
            last = entry[1]
        head += 1
    return head, oldest, last
