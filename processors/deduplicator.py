"""Idempotent Receiver: accept each messageId once per sequence key.

Invariants (checked by ``tests/processors/test_deduplicator.py``):

* A messageId is accepted at most once per key, however often it arrives.
* The first arrival of every messageId is accepted.
* The decision depends only on the seen-ids state and the message, never on
  the clock (the time is recorded, for retention, not consulted here).
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from processors.envelope import Message


@dataclass(frozen=True, slots=True)
class DedupDecision:
    """``accepted``: pass the message on and remember ``message_id`` at ``seen_at``."""

    accepted: bool
    message_id: str
    seen_at: float


def offer(seen_ids: Container[str], message: Message, now: float) -> DedupDecision:
    """Decide on ``message`` given the ids already accepted for its key."""
    duplicate = message.message_id in seen_ids
    return DedupDecision(accepted=not duplicate, message_id=message.message_id, seen_at=now)
