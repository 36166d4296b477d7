"""The command worker's table: entities, receipts and their indexes.

Everything is kept per tenant: an entity key
(:func:`processors.command.entity_key`) is the partitionKey within its
tenant, a receipt id (:func:`processors.command.receipt_id`) the messageId
within its tenant, both ``<len(tenant)>:<tenant>/<name>``
(:func:`processors.command.scoped`); so two tenants' commands with the same
messageId on one partition have a receipt each.

Layout (one changelogged table, so a crash leaves a prefix of the writes;
text UTF-8, times big-endian IEEE doubles, so that keys sort by time):

* ``e`` + entity key -> ``[version, state, [[commandId, [outgoing...]]...]]``
* ``R`` + receipt id -> the receipt (JSON)
* ``o`` + entity key -> ``""`` while the entity has undispatched messages
* ``W`` + receipt id -> ``""`` while the command waits for a retry
* ``C`` + scoped correlationId + NUL + messageId -> ``""`` (look-ups by a
  tenant's correlationId)
* ``T`` + 8-byte time + receipt id -> ``""``: dispatched receipts by age

An entity record that holds nothing (:attr:`processors.command.Entity.empty`:
never applied a command, or ended by its handler, with its outbox
dispatched) is deleted rather than written, so the changelog carries its
tombstone and a restore forgets it; reading an absent record gives the empty
entity. Receipts are not the entity's: they age out as any other.

Write order, so that any prefix is safe: an index that makes a timer or an
assignment sweep look at something is written before the thing (``o``
before the entity, ``W`` before the receipt) and deleted after it; the
entity (state and outbox in one record) before the receipt; on dispatch,
the receipt before the entity. What such a sweep finds stale it ignores and
deletes. So a command's decision is always remembered by its outbox entry
or its receipt: a crash between the entity and the receipt leaves the entry
alone, and the dispatch writes the receipt the entry tells
(:func:`processors.command.recovered_receipt`) before it drops the entry
(an entry holding nothing, a quiet command's, tells no correlationId: it
waits for the command, read again, to write its receipt).

The layout without tenants is read, never written: ``r`` + messageId ->
the receipt, ``w`` + messageId, ``c`` + correlationId + NUL + messageId,
``t`` + 8-byte time + messageId (the same values). Its receipt names its
tenant (``entity``), so it is moved on read: a receipt id missing under
``R`` is looked up under ``r`` + its messageId, and a receipt found there
of the same tenant is moved in one write: its new index entries, the
receipt under ``R``, then the deletion of the old receipt and of its old
index entries. A cut move leaves the old receipt (moved on the next read),
or the new one beside an old copy or old index entries: ``R`` is read
first, and what is left of the old layout is deleted when a sweep meets it
(the retry index at an assignment, the age index, or the forgetting of the
new receipt). The retry and age sweeps list both layouts. A partition that
held no key of the old layout when it was assigned skips all of this (a
first-seen command would otherwise cost a second read). Since state
formats (:mod:`state.formats`), a partition is migrated whole at its
assignment (:func:`migrate_old_layout`, state format 2), so a worker finds
no old key there; the readers stay for changelogs read as they are
(``seqkeeper inspect``) and for a cut migration's leftovers.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from typing import Any

import orjson

from seqkeeper.processors.command import Entity, Outgoing, Receipt, scoped, unscoped
from seqkeeper.state.base import FORMAT_MARKER, Change, PartitionStore
from seqkeeper.state.codecs import compact_json

_TIME = struct.Struct(">d")

ENTITY, PENDING = b"e", b"o"
RECEIPT, RETRY, CORRELATION, AGE = b"R", b"W", b"C", b"T"
#: The families of the layout without tenants.
OLD_RECEIPT, OLD_RETRY, OLD_CORRELATION, OLD_AGE = b"r", b"w", b"c", b"t"
OLD_FAMILIES = (OLD_RECEIPT, OLD_RETRY, OLD_CORRELATION, OLD_AGE)


def entity_key(entity: str) -> bytes:
    return ENTITY + entity.encode("utf-8")


def receipt_key(receipt_id: str) -> bytes:
    return RECEIPT + receipt_id.encode("utf-8")


def retry_key(receipt_id: str) -> bytes:
    return RETRY + receipt_id.encode("utf-8")


def pending_key(entity: str) -> bytes:
    return PENDING + entity.encode("utf-8")


def correlation_prefix(correlation: str) -> bytes:
    """The index entries of a tenant-scoped correlationId
    (``scoped(tenant, correlationId)``)."""
    return CORRELATION + correlation.encode("utf-8") + b"\x00"


def correlation_key(tenant: str, correlation_id: str, message_id: str) -> bytes:
    return correlation_prefix(scoped(tenant, correlation_id)) + message_id.encode("utf-8")


def age_key(at: float, receipt_id: str) -> bytes:
    return AGE + _TIME.pack(at) + receipt_id.encode("utf-8")


def old_receipt_key(message_id: str) -> bytes:
    return OLD_RECEIPT + message_id.encode("utf-8")


def old_retry_key(message_id: str) -> bytes:
    return OLD_RETRY + message_id.encode("utf-8")


def old_correlation_prefix(correlation_id: str) -> bytes:
    return OLD_CORRELATION + correlation_id.encode("utf-8") + b"\x00"


def old_correlation_key(receipt: Receipt) -> bytes:
    return old_correlation_prefix(receipt.correlation_id) + receipt.message_id.encode("utf-8")


def old_age_key(at: float, message_id: str) -> bytes:
    return OLD_AGE + _TIME.pack(at) + message_id.encode("utf-8")


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
    doc["trace"] = tuple(tuple(pair) for pair in doc.get("trace", ()))  # (absent before)
    return Receipt(**doc)


def find_receipt(
    get: Callable[[bytes], bytes | None], receipt_id: str
) -> tuple[Receipt, bool] | None:
    """A receipt in either layout, read with ``get(store key)``: the receipt
    and whether it is under its old key; ``None`` if neither layout holds
    one of its tenant."""
    new = decode_receipt(get(receipt_key(receipt_id)))
    if new is not None:
        return new, False
    tenant, message_id = unscoped(receipt_id)
    old = decode_receipt(get(old_receipt_key(message_id)))
    if old is None or old.tenant != tenant:  # none, or another tenant's command
        return None
    return old, True


def _old_entries(receipt: Receipt) -> list[Change]:
    """The deletion of an old-layout receipt and of its index entries (the
    receipt first: an index is deleted after what it points to)."""
    changes: list[Change] = [
        (old_receipt_key(receipt.message_id), None, ()),
        (old_correlation_key(receipt), None, ()),
    ]
    if receipt.status == "PROCESSING":
        changes.append((old_retry_key(receipt.message_id), None, ()))
    if receipt.dispatched:
        changes.append((old_age_key(receipt.updated_at, receipt.message_id), None, ()))
    return changes


class CommandStore:
    """Typed reads and ordered writes over one :class:`PartitionStore`."""

    def __init__(self, store: PartitionStore) -> None:
        self.store = store
        #: partitions that held no key of the old layout when assigned
        self._tenanted: set[int] = set()

    def assigned(self, partitions: Iterable[int]) -> None:
        """Note which of ``partitions`` (their state restored) hold keys of
        the old layout; the others skip the old layout's look-ups."""
        seek = self.store.seek
        self._tenanted = {p for p in partitions if all(seek(p, f, f) is None for f in OLD_FAMILIES)}

    def entity(self, partition: int, entity: str) -> Entity:
        return decode_entity(self.store.get(partition, entity_key(entity)))

    def receipt(self, partition: int, receipt_id: str) -> Receipt | None:
        """A command's receipt by its receipt id; one under its old key is
        moved first (module docstring)."""
        if partition in self._tenanted:
            return decode_receipt(self.store.get(partition, receipt_key(receipt_id)))
        found = find_receipt(lambda key: self.store.get(partition, key), receipt_id)
        if found is None:
            return None
        receipt, old = found
        if old:
            self._move(partition, receipt_id, receipt)
        return receipt

    def _move(self, partition: int, receipt_id: str, receipt: Receipt) -> None:
        """Write an old-layout receipt under its receipt id, in one write:
        the new index entries, the receipt, the old entries' deletion."""
        changes: list[Change] = []
        if receipt.status == "PROCESSING":
            changes.append((retry_key(receipt_id), b"", ()))
        changes.append(
            (correlation_key(receipt.tenant, receipt.correlation_id, receipt.message_id), b"", ())
        )
        if receipt.dispatched:
            changes.append((age_key(receipt.updated_at, receipt_id), b"", ()))
        changes.append((receipt_key(receipt_id), encode_receipt(receipt), ()))
        changes += _old_entries(receipt)
        self.store.write(partition, changes)

    def _lift(self, partition: int, message_id: str) -> Receipt | None:
        """The old-layout receipt an old index entry points to, moved (or
        deleted, when its receipt id has a receipt already: what a cut move
        left behind); ``None`` if there is none."""
        receipt = decode_receipt(self.store.get(partition, old_receipt_key(message_id)))
        if receipt is None:
            return None
        receipt_id = receipt.receipt_id
        if self.store.get(partition, receipt_key(receipt_id)) is None:
            self._move(partition, receipt_id, receipt)
        else:
            self.store.write(partition, _old_entries(receipt))
        return receipt

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
        if receipt is not None:
            tenant = receipt.tenant
            rid = scoped(tenant, receipt.message_id)
            if receipt.status == "PROCESSING":
                s.put(partition, retry_key(rid), b"")
        if entity is not None:
            if entity.outbox:
                s.put(partition, pending_key(entity_id), b"")
            self._put_entity(partition, entity_id, entity)
        if receipt is not None:
            s.put(partition, receipt_key(rid), encode_receipt(receipt))
            if before is None:
                key = correlation_key(tenant, receipt.correlation_id, receipt.message_id)
                s.put(partition, key, b"")
            if receipt.status != "PROCESSING" and before is not None:
                s.delete(partition, retry_key(rid))
            if receipt.dispatched:
                s.put(partition, age_key(receipt.updated_at, rid), b"")

    def dispatched(
        self, partition: int, entity_id: str, entity: Entity, receipt: Receipt | None
    ) -> None:
        """Persist :func:`processors.command.mark_dispatched`."""
        if receipt is not None:
            rid = receipt.receipt_id
            self.store.put(partition, receipt_key(rid), encode_receipt(receipt))
            self.store.put(partition, age_key(receipt.updated_at, rid), b"")
        self._put_entity(partition, entity_id, entity)
        if not entity.outbox:
            self.drop_pending(partition, entity_id)

    def _put_entity(self, partition: int, entity_id: str, entity: Entity) -> None:
        """Write an entity record, or delete it when it holds nothing (an
        ended entity whose messages are out: module docstring)."""
        if entity.empty:
            self.store.delete(partition, entity_key(entity_id))
        else:
            self.store.put(partition, entity_key(entity_id), encode_entity(entity))

    def pending_entities(self, partition: int) -> Iterator[str]:
        for key, _ in self.store.items(partition, PENDING):
            yield key[1:].decode("utf-8")

    def waiting_retries(self, partition: int) -> list[str]:
        """The receipt ids in the retry index (old-layout entries moved)."""
        found = dict.fromkeys(
            key[1:].decode("utf-8") for key, _ in self.store.items(partition, RETRY)
        )
        if partition not in self._tenanted:
            for key, _ in list(self.store.items(partition, OLD_RETRY)):
                receipt = self._lift(partition, key[1:].decode("utf-8"))
                if receipt is None or receipt.status != "PROCESSING":
                    self.store.delete(partition, key)  # stale (a move took a waiting one's)
                else:
                    found[receipt.receipt_id] = None
        return list(found)

    def drop_retry(self, partition: int, receipt_id: str) -> None:
        """Forget a stale retry index entry (its receipt is not PROCESSING)."""
        self.store.delete(partition, retry_key(receipt_id))

    def drop_pending(self, partition: int, entity: str) -> None:
        """Forget a pending-outbox index entry (the entity's outbox is empty)."""
        self.store.delete(partition, pending_key(entity))

    def forget_aged(self, partition: int, before: float, limit: int) -> int:
        """Delete up to ``limit`` dispatched receipts last updated before
        ``before`` (and their index entries), of both layouts; how many
        age entries were done."""
        s = self.store
        done = 0
        for key, _ in list(itertools.islice(s.items(partition, AGE), limit)):
            at = float(_TIME.unpack(key[1:9])[0])
            if at >= before:
                break
            rid = key[9:].decode("utf-8")
            receipt = self.receipt(partition, rid)
            if receipt is not None and receipt.updated_at <= at:
                tenant, mid = receipt.tenant, receipt.message_id
                s.delete(partition, correlation_key(tenant, receipt.correlation_id, mid))
                s.delete(partition, receipt_key(rid))
                if partition not in self._tenanted:  # what a cut move left behind
                    old = decode_receipt(s.get(partition, old_receipt_key(mid)))
                    if old is not None and old.tenant == tenant:
                        s.write(partition, _old_entries(old))
                    elif old is None:
                        stale = old_correlation_key(receipt)
                        if s.get(partition, stale) is not None:
                            s.delete(partition, stale)
            s.delete(partition, key)
            done += 1
        if partition in self._tenanted:
            return done
        for key, _ in list(itertools.islice(s.items(partition, OLD_AGE), limit - done)):
            at = float(_TIME.unpack(key[1:9])[0])
            if at >= before:
                break
            old = decode_receipt(s.get(partition, old_receipt_key(key[9:].decode("utf-8"))))
            changes = [] if old is None or old.updated_at > at else _old_entries(old)
            if (key, None, ()) not in changes:
                changes.append((key, None, ()))
            s.write(partition, changes)
            done += 1
        return done


#: Old-layout receipts moved per listing (each listing reads the writes not
#: yet committed once: a migration of many receipts must not list them all
#: again after each move).
MIGRATION_BATCH = 1000


def migrate_old_layout(store: PartitionStore, partition: int) -> int:
    """Move every receipt of the layout without tenants to its receipt id
    (as a read would: :meth:`CommandStore._move`), then delete what is left
    of the old layout (index entries a cut move left behind): the migration
    to state format 2 (:mod:`state.formats`). Idempotent: what a crash
    leaves is moved or deleted by the next run. How many receipts moved.
    A table without the old families (the ordered worker's) is untouched."""
    commands = CommandStore(store)
    moved = 0
    while True:
        batch = [
            k for k, _ in itertools.islice(store.items(partition, OLD_RECEIPT), MIGRATION_BATCH)
        ]
        if not batch:
            break
        for key in batch:
            if commands._lift(partition, key[1:].decode("utf-8")) is not None:
                moved += 1
    for family in OLD_FAMILIES:
        while True:
            batch = [
                k for k, _ in itertools.islice(store.items(partition, family), MIGRATION_BATCH)
            ]
            if not batch:
                break
            store.write(partition, [(k, None, ()) for k in batch])
    return moved


_INDEXES = {PENDING: "pending_outbox", RETRY: "retry", OLD_RETRY: "retry"}


def describe(store_key: bytes, value: bytes) -> tuple[str, str, str | None, str | None]:
    """A command table entry in words: (family, subject, item, value as JSON
    text). Subjects are entity keys, receipt ids and scoped correlationIds
    (bare messageIds and correlationIds in the old layout); a correlation
    entry's item is the messageId. Both layouts have the same family names.
    The state format marker (:data:`state.base.FORMAT_MARKER`) is family
    ``state_format``, no subject."""
    if store_key == FORMAT_MARKER:
        return "state_format", "", None, orjson.dumps(value.decode("ascii", "replace")).decode()
    family, rest = store_key[:1], store_key[1:]
    if family == ENTITY:
        return "entity", rest.decode("utf-8"), None, value.decode("utf-8")
    if family in (RECEIPT, OLD_RECEIPT):
        return "receipt", rest.decode("utf-8"), None, value.decode("utf-8")
    if family in _INDEXES:
        return _INDEXES[family], rest.decode("utf-8"), None, None
    if family in (CORRELATION, OLD_CORRELATION):
        correlation, _, mid = rest.partition(b"\x00")
        return "correlation", correlation.decode("utf-8"), mid.decode("utf-8"), None
    if family in (AGE, OLD_AGE):
        at = float(_TIME.unpack(rest[:8])[0])
        return "receipt_age", rest[8:].decode("utf-8"), None, orjson.dumps(at).decode()
    raise ValueError(f"unknown command table family {family!r}")
