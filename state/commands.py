"""The command worker's table: entities, receipts and their indexes.

Layout (one changelogged table, so a crash leaves a prefix of the writes):

* ``e`` + entity key -> ``[version, state, [[commandId, [outgoing...]]...]]``
* ``r`` + messageId -> the receipt (JSON)
* ``o`` + entity key -> ``""`` while the entity has undispatched messages
* ``w`` + messageId -> ``""`` while the command waits for a retry
* ``c`` + correlationId + NUL + messageId -> ``""`` (look-ups by correlation)
* ``t`` + 8-byte time + messageId -> ``""``: dispatched receipts by age

Write order, so that any prefix is safe: an index that makes a timer or an
assignment sweep look at something is written before the thing (``o``
before the entity, ``w`` before the receipt) and deleted after it; the
entity (state and outbox in one record) before the receipt; on dispatch,
the receipt before the entity. What such a sweep finds stale it ignores and
deletes.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import orjson

from seqkeeper.processors.command import Entity, Outgoing, Receipt
from seqkeeper.state.base import PartitionStore
from seqkeeper.state.codecs import compact_json

_TIME = struct.Struct(">d")


def entity_key(entity: str) -> bytes:
    return b"e" + entity.encode("utf-8")


def receipt_key(message_id: str) -> bytes:
    return b"r" + message_id.encode("utf-8")


def retry_key(message_id: str) -> bytes:
    return b"w" + message_id.encode("utf-8")


def pending_key(entity: str) -> bytes:
    return b"o" + entity.encode("utf-8")


def encode_entity(entity: Entity) -> bytes:
    return compact_json(
        [
            entity.version,
            entity.state,
            [[cid, [m.to_json() for m in msgs]] for cid, msgs in entity.outbox],
        ]
    )


def decode_entity(raw: bytes | None) -> Entity:
    if raw is None:
        return Entity()
    version, state, outbox = orjson.loads(raw)
    return Entity(
        version,
        state,
        tuple((cid, tuple(Outgoing.from_json(m) for m in msgs)) for cid, msgs in outbox),
    )


def encode_receipt(receipt: Receipt) -> bytes:
    doc: dict[str, Any] = asdict(receipt)
    doc["reply"] = None if receipt.reply is None else receipt.reply.to_json()
    doc["value"] = None if receipt.value is None else receipt.value.decode("utf-8")
    return compact_json(doc)


def decode_receipt(raw: bytes | None) -> Receipt | None:
    if raw is None:
        return None
    doc = orjson.loads(raw)
    doc["reply"] = None if doc["reply"] is None else Outgoing.from_json(doc["reply"])
    doc["value"] = None if doc["value"] is None else doc["value"].encode("utf-8")
    doc["origin"] = None if doc["origin"] is None else tuple(doc["origin"])
    return Receipt(**doc)


def correlation_prefix(correlation_id: str) -> bytes:
    return b"c" + correlation_id.encode("utf-8") + b"\x00"


class CommandStore:
    """Typed reads and ordered writes over one :class:`PartitionStore`."""

    def __init__(self, store: PartitionStore) -> None:
        self.store = store

    def entity(self, partition: int, entity: str) -> Entity:
        return decode_entity(self.store.get(partition, entity_key(entity)))

    def receipt(self, partition: int, message_id: str) -> Receipt | None:
        return decode_receipt(self.store.get(partition, receipt_key(message_id)))

    def save(
        self,
        partition: int,
        entity_id: str,
        entity: Entity | None,
        receipt: Receipt | None,
        before: Receipt | None,
    ) -> None:
        """Persist a decision (write order: module docstring)."""
        s = self.store
        if receipt is not None and receipt.status == "PROCESSING":
            s.put(partition, retry_key(receipt.message_id), b"")
        if entity is not None:
            if entity.outbox:
                s.put(partition, pending_key(entity_id), b"")
            s.put(partition, entity_key(entity_id), encode_entity(entity))
        if receipt is not None:
            s.put(partition, receipt_key(receipt.message_id), encode_receipt(receipt))
            if before is None:
                s.put(
                    partition,
                    correlation_prefix(receipt.correlation_id) + receipt.message_id.encode("utf-8"),
                    b"",
                )
            if receipt.status != "PROCESSING" and before is not None:
                s.delete(partition, retry_key(receipt.message_id))
            if receipt.dispatched:
                self._aged(partition, receipt)

    def dispatched(
        self, partition: int, entity_id: str, entity: Entity, receipt: Receipt | None
    ) -> None:
        """Persist :func:`processors.command.mark_dispatched`."""
        if receipt is not None:
            self.store.put(partition, receipt_key(receipt.message_id), encode_receipt(receipt))
            self._aged(partition, receipt)
        self.store.put(partition, entity_key(entity_id), encode_entity(entity))
        if not entity.outbox:
            self.drop_pending(partition, entity_id)

    def _aged(self, partition: int, receipt: Receipt) -> None:
        key = b"t" + _TIME.pack(receipt.updated_at) + receipt.message_id.encode("utf-8")
        self.store.put(partition, key, b"")

    def pending_entities(self, partition: int) -> Iterator[str]:
        for key, _ in self.store.items(partition, b"o"):
            yield key[1:].decode("utf-8")

    def waiting_retries(self, partition: int) -> Iterator[str]:
        for key, _ in self.store.items(partition, b"w"):
            yield key[1:].decode("utf-8")

    def drop_retry(self, partition: int, message_id: str) -> None:
        """Forget a stale retry index entry (its receipt is not PROCESSING)."""
        self.store.delete(partition, retry_key(message_id))

    def drop_pending(self, partition: int, entity: str) -> None:
        """Forget a pending-outbox index entry (the entity's outbox is empty)."""
        self.store.delete(partition, pending_key(entity))

    def forget_aged(self, partition: int, before: float, limit: int) -> int:
        """Delete up to ``limit`` dispatched receipts last updated before
        ``before`` (and their index entries); how many were deleted."""
        done = 0
        for key, _ in list(itertools.islice(self.store.items(partition, b"t"), limit)):
            at = float(_TIME.unpack(key[1:9])[0])
            if at >= before:
                break
            mid = key[9:].decode("utf-8")
            receipt = self.receipt(partition, mid)
            if receipt is not None and receipt.updated_at <= at:
                self.store.delete(
                    partition, correlation_prefix(receipt.correlation_id) + mid.encode("utf-8")
                )
                self.store.delete(partition, receipt_key(mid))
            self.store.delete(partition, key)
            done += 1
        return done


_INDEXES = {b"o": "pending_outbox", b"w": "retry"}


def describe(store_key: bytes, value: bytes) -> tuple[str, str, str | None, str | None]:
    """A command table entry in words: (family, subject, item, value as JSON
    text); subjects are entity keys or messageIds."""
    family, rest = store_key[:1], store_key[1:]
    if family == b"e":
        return "entity", rest.decode("utf-8"), None, value.decode("utf-8")
    if family == b"r":
        return "receipt", rest.decode("utf-8"), None, value.decode("utf-8")
    if family in _INDEXES:
        return _INDEXES[family], rest.decode("utf-8"), None, None
    if family == b"c":
        correlation, _, mid = rest.partition(b"\x00")
        return "correlation", correlation.decode("utf-8"), mid.decode("utf-8"), None
    if family == b"t":
        at = float(_TIME.unpack(rest[:8])[0])
        return "receipt_age", rest[8:].decode("utf-8"), None, orjson.dumps(at).decode()
    raise ValueError(f"unknown command table family {family!r}")
