"""The AddStock command the reply-address tests send (the example domain's
``seqkeeper.processors.inventory``), as a record's key and value."""

from __future__ import annotations

import orjson


def add_stock(mid: str, reply_to: str | None, quantity: int = 3) -> tuple[bytes, bytes]:
    """Tenant ``t1``'s AddStock of ``quantity`` on ``sku-1``, replying to ``reply_to``."""
    return b"sku-1", orjson.dumps(
        {
            "messageId": mid,
            "commandType": "AddStock",
            "schemaVersion": 1,
            "correlationId": f"c-{mid}",
            "partitionKey": "sku-1",
            "tenantId": "t1",
            "replyTo": reply_to,
            "payload": {"quantity": quantity},
        }
    )
