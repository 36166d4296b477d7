"""``seqkeeper inspect``: look commands up in the Message Store (the command
worker's changelog topic, compacted here: latest value per key, tombstones
delete), by messageId or correlationId (of every tenant, or of one), with
their entity's state and outbox. Receipts of both layouts of
:mod:`state.commands` are found; a receipt id's receipt in the new layout
hides an old copy of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from seqkeeper.processors.command import Entity, Receipt, receipt_id, unscoped
from seqkeeper.settings import Settings
from seqkeeper.state.commands import (
    CORRELATION,
    RECEIPT,
    decode_entity,
    decode_receipt,
    entity_key,
    find_receipt,
    old_correlation_prefix,
    old_receipt_key,
)
from seqkeeper.topics import read_topic


def changelog_topic(settings: Settings) -> str:
    return f"{settings.with_overrides(topology='commands').group_id}-commands-changelog"


async def load(settings: Settings) -> dict[bytes, bytes]:
    """The command table as of now: the changelog compacted in memory."""
    table: dict[bytes, bytes] = {}
    for rec in sorted(
        await read_topic(settings.broker.bootstrap, changelog_topic(settings)),
        key=lambda r: (r.partition, r.offset),
    ):
        if rec.key is None:
            continue
        if rec.value is None:
            table.pop(rec.key, None)
        else:
            table[rec.key] = rec.value
    return table


def _receipt(r: Receipt) -> dict[str, Any]:
    doc = asdict(r)
    doc["reply"] = None if r.reply is None else r.reply.value.decode("utf-8", "replace")
    doc["value"] = None if r.value is None else r.value.decode("utf-8", "replace")
    return doc


def _entity(e: Entity) -> dict[str, Any]:
    return {
        "version": e.version,
        "state": e.state,
        "outbox": {
            cid: [m.value.decode("utf-8", "replace") for m in msgs] for cid, msgs in e.outbox
        },
    }


def _scoped(table: dict[bytes, bytes], family: bytes) -> Iterator[tuple[str, str, str]]:
    """The keys of a tenant-scoped ``family``: (tenant, name, what follows a
    NUL), e.g. (tenant, correlationId, messageId) for the correlation index."""
    for key in table:
        if key[:1] == family:
            head, _, tail = key[1:].partition(b"\x00")
            try:
                tenant, name = unscoped(head.decode("utf-8"))
            except ValueError:
                continue  # not a seqkeeper key
            yield tenant, name, tail.decode("utf-8")


def lookup(
    table: dict[bytes, bytes],
    message_id: str | None = None,
    correlation_id: str | None = None,
    tenant: str | None = None,
) -> list[dict[str, Any]]:
    """Each matching command (of ``tenant``, or of every tenant): its
    receipt and its entity (state, outbox)."""
    rids: list[str] = []
    if message_id:
        if tenant is not None:
            rids.append(receipt_id(tenant, message_id))
        else:
            mine = [receipt_id(t, m) for t, m, _ in _scoped(table, RECEIPT) if m == message_id]
            old = decode_receipt(table.get(old_receipt_key(message_id)))
            if old is not None:
                mine.append(old.receipt_id)
            rids += sorted(mine)
    if correlation_id:
        related = [
            receipt_id(t, mid)
            for t, c, mid in _scoped(table, CORRELATION)
            if c == correlation_id and tenant in (None, t)
        ]
        prefix = old_correlation_prefix(correlation_id)
        for key in table:
            if key.startswith(prefix):
                old = decode_receipt(table.get(old_receipt_key(key[len(prefix) :].decode())))
                if old is not None and tenant in (None, old.tenant):
                    related.append(old.receipt_id)
        rids += sorted(related)
    found = []
    for rid in dict.fromkeys(rids):  # a receipt in both layouts: the new one
        hit = find_receipt(table.get, rid)
        if hit is None:
            continue
        receipt = hit[0]
        entity = decode_entity(table.get(entity_key(receipt.entity)))
        found.append(
            {"command": _receipt(receipt), "entity": {"id": receipt.entity, **_entity(entity)}}
        )
    return found
