"""Resequencer: release each key's messages in sequence order.

State per key: ``next_expected`` (the next sequence to release) and the
``reorder_buffer`` (sequence -> message, for sequences above it). A message
with ``seq == next_expected`` is released, then its contiguous successors are
drained from the buffer; a message above it is buffered.

Invariants (checked by ``tests/processors/test_resequencer.py``):

* Per key, released sequences are strictly increasing and contiguous from the
  first expected sequence: no sequence is released twice or out of order.
* Every offered message is accounted for exactly once: released (now or
  later from the buffer), still buffered, or rejected with a reason.
* Cost per offer is proportional to what it releases, never to buffer size:
  the buffer is only read by exact sequence, and changes are returned as a
  delta (puts and deletes) for the store to apply, not as a new buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from processors.envelope import Message, Reason

#: The sequence a key starts at.
FIRST_SEQ = 1


class BufferLookup(Protocol):
    """Read access to one key's reorder buffer (a ``dict`` will do)."""

    def get(self, seq: int, /) -> Message | None: ...


@dataclass(frozen=True, slots=True)
class Rejection:
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Step:
    """The outcome of one offer: a delta to persist, and what to emit in order."""

    next_expected: int
    released: tuple[Message, ...] = ()
    buffer_put: Message | None = None
    buffer_deletes: tuple[int, ...] = field(default=())
    rejected: Rejection | None = None


def offer(next_expected: int, reorder_buffer: BufferLookup, message: Message) -> Step:
    """Offer a (deduplicated) message to its key's resequencer state."""
    seq = message.seq
    if seq < next_expected:
        return Step(
            next_expected,
            rejected=Rejection(
                Reason.SEQUENCE_CONFLICT,
                f"key {message.key!r} seq {seq} was already released under another "
                f"messageId (next expected is {next_expected}); the first one wins",
            ),
        )
    if seq > next_expected:
        held = reorder_buffer.get(seq)
        if held is not None:
            return Step(
                next_expected,
                rejected=Rejection(
                    Reason.SEQUENCE_CONFLICT,
                    f"key {message.key!r} seq {seq} is already buffered as messageId "
                    f"{held.message_id!r}; the first one wins",
                ),
            )
        return Step(next_expected, buffer_put=message)
    released = [message]
    deletes: list[int] = []
    nxt = seq + 1
    while (held := reorder_buffer.get(nxt)) is not None:
        released.append(held)
        deletes.append(nxt)
        nxt += 1
    return Step(nxt, released=tuple(released), buffer_deletes=tuple(deletes))
