"""Dead-letter records: the original bytes, and the reason in headers.

Headers follow both common conventions so existing tooling reads them:
Spring Kafka (``kafka_dlt-*``) and Kafka Connect (``__connect.errors.*``),
plus ``seqkeeper.reason`` (a stable code) and ``seqkeeper.detail`` (prose).
"""

from __future__ import annotations

REASON = "seqkeeper.reason"
DETAIL = "seqkeeper.detail"


def dead_letter_headers(
    reason: str,
    detail: str,
    topic: str,
    partition: int,
    offset: int | None,
    timestamp: int | None = None,
    exception_class: str = "seqkeeper.InvalidMessage",
) -> list[tuple[str, bytes]]:
    """Headers for a dead-lettered record from ``topic``/``partition``/``offset``
    (``offset`` ``None``: not known, its headers left out)."""
    at = [] if offset is None else [str(offset).encode()]
    headers = [
        (REASON, reason.encode()),
        (DETAIL, detail.encode()),
        ("kafka_dlt-original-topic", topic.encode()),
        ("kafka_dlt-original-partition", str(partition).encode()),
        *(("kafka_dlt-original-offset", o) for o in at),
        ("kafka_dlt-exception-fqcn", exception_class.encode()),
        ("kafka_dlt-exception-message", detail.encode()),
        ("__connect.errors.topic", topic.encode()),
        ("__connect.errors.partition", str(partition).encode()),
        *(("__connect.errors.offset", o) for o in at),
        ("__connect.errors.exception.class.name", exception_class.encode()),
        ("__connect.errors.exception.message", detail.encode()),
    ]
    if timestamp is not None:
        headers.append(("kafka_dlt-original-timestamp", str(timestamp).encode()))
    return headers
