"""``seqkeeper inspect``: look commands up in the Message Store (the command
worker's changelog topic, compacted here: latest value per key, tombstones
delete), by messageId or correlationId, with their entity's state and
outbox."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from seqkeeper.processors.command import Entity, Receipt
from seqkeeper.settings import Settings
from seqkeeper.state.commands import correlation_prefix, decode_entity, decode_receipt, entity_key
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


def lookup(
    table: dict[bytes, bytes], message_id: str | None = None, correlation_id: str | None = None
) -> list[dict[str, Any]]:
    """Each matching command: its receipt and its entity (state, outbox)."""
    ids: list[str] = []
    if message_id:
        ids.append(message_id)
    if correlation_id:
        prefix = correlation_prefix(correlation_id)
        ids += sorted(k[len(prefix) :].decode("utf-8") for k in table if k.startswith(prefix))
    found = []
    for mid in ids:
        receipt = decode_receipt(table.get(b"r" + mid.encode("utf-8")))
        if receipt is None:
            continue
        entity = decode_entity(table.get(entity_key(receipt.entity)))
        found.append(
            {"command": _receipt(receipt), "entity": {"id": receipt.entity, **_entity(entity)}}
        )
    return found
