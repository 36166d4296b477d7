"""``seqkeeper replay``: publish audited messages to a topic again, from the
audit Parquet, in their original order (global position: per key the
order of the source partition), with the original key, value and header
bytes, so messageIds are preserved (in the value or in a header) and
consumers deduplicate."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from seqkeeper.security import kafka_options
from seqkeeper.spark_sink.audit import HEADERS_TYPE, coordinates, header_context, read_audit
from seqkeeper.spark_sink.crypto import (
    KEY_ENV,
    PREFIX_STREAM,
    AuditKeyError,
    Sealer,
    StreamKeys,
    is_sealed,
)


@dataclass(frozen=True)
class Selection:
    """Which audited messages to replay (all given filters apply)."""

    category: str | None = None
    stream: str | None = None
    type: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    from_position: int | None = None
    to_position: int | None = None


def select(spark: Any, warehouse: Path, selection: Selection) -> Any:
    """The selected audit rows (a DataFrame, ordered by global position)."""
    from pyspark.sql import functions as F

    df = read_audit(spark, warehouse)
    if df is None:
        raise ValueError(f"no audit log under {warehouse}: run seqkeeper compact first")
    s = selection
    for column, value in (("category", s.category), ("stream_name", s.stream), ("type", s.type)):
        if value is not None:
            df = df.where(F.col(column) == value)
    if s.since is not None:
        df = df.where(F.col("time") >= F.lit(s.since))
    if s.until is not None:
        df = df.where(F.col("time") < F.lit(s.until))
    if s.from_position is not None:
        df = df.where(F.col("position") >= s.from_position)
    if s.to_position is not None:
        df = df.where(F.col("position") <= s.to_position)
    # (runs written before headers were kept have none)
    headers = "headers" if "headers" in df.columns else F.lit(None).cast(HEADERS_TYPE)
    return df.select(
        "global_position",
        "stream_name",
        "key",
        "value",
        F.col(headers) if isinstance(headers, str) else headers.alias("headers"),
        "topic",
        "partition",
        "offset",
    ).orderBy("global_position")


#: What :func:`_value` returns for a value of a forgotten stream.
ERASED_VALUE = object()


def _value(row: Any, sealer: Sealer | None, keys: StreamKeys | None = None) -> Any:
    """The row's value as it was written; :data:`ERASED_VALUE` when its
    stream was forgotten (its key destroyed)."""
    value = None if row.value is None else bytes(row.value)
    if not is_sealed(value):
        return value
    if sealer is None:
        raise AuditKeyError(f"the audit log is encrypted: set {KEY_ENV} to replay it")
    stream = _stream_key(row, value, keys)
    if value is not None and value.startswith(PREFIX_STREAM.encode()) and stream is None:
        return ERASED_VALUE
    return sealer.open_bytes(value, coordinates(row.topic, row.partition, row.offset), stream)


def _stream_key(row: Any, value: bytes | None, keys: StreamKeys | None) -> Sealer | None:
    if keys is None or value is None or not value.startswith(PREFIX_STREAM.encode()):
        return None
    return keys.load(row.stream_name)


def _headers(
    row: Any, sealer: Sealer | None, keys: StreamKeys | None = None
) -> list[tuple[str, bytes | None]]:
    """The row's headers as they were written (names are UTF-8 in Kafka's
    protocol; values opened when sealed)."""
    out = []
    for i, h in enumerate(row.headers or ()):
        value = None if h["value"] is None else bytes(h["value"])
        if is_sealed(value):
            if sealer is None:
                raise AuditKeyError(f"the audit log is encrypted: set {KEY_ENV} to replay it")
            ctx = header_context(row.topic, row.partition, row.offset, i)
            value = sealer.open_bytes(value, ctx, _stream_key(row, value, keys))
        out.append((bytes(h["key"]).decode("utf-8"), value))
    return out


async def _publish(
    bootstrap: str,
    topic: str,
    rows: Iterable[Any],
    advance: Callable[[int], None],
    sealer: Sealer | None,
    keys: StreamKeys | None = None,
) -> int:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, **kafka_options(), linger_ms=5, acks="all"
    )
    await producer.start()
    sent = 0
    try:
        pending = []
        for row in rows:
            key = None if row.key is None else bytes(row.key)
            value = _value(row, sealer, keys)
            if value is ERASED_VALUE:  # (a forgotten stream's message: nothing to send)
                advance(1)
                continue
            headers = _headers(row, sealer, keys)
            pending.append(await producer.send(topic, value, key=key, headers=headers))
            sent += 1
            if len(pending) >= 5_000:
                await asyncio.gather(*pending)
                advance(len(pending))
                pending.clear()
        await asyncio.gather(*pending)
        advance(len(pending))
    finally:
        await producer.stop()
    return sent


def replay(
    spark: Any,
    warehouse: Path,
    selection: Selection,
    bootstrap: str,
    topic: str,
    dry_run: bool = False,
    progress: Callable[[int | None, int], None] = lambda total, done: None,
    sealer: Sealer | None = None,
) -> int:
    """Publish the selection to ``topic`` (or only count it); how many
    (the messages of forgotten streams are skipped: nothing is left to send)."""
    df = select(spark, warehouse, selection)
    total = int(df.count())
    progress(total, 0)
    if dry_run or total == 0:
        return total
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        progress(total, done)

    keys = StreamKeys(warehouse, sealer) if sealer is not None else None
    return asyncio.run(_publish(bootstrap, topic, df.toLocalIterator(), advance, sealer, keys))
