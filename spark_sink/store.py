"""Reading the audit log like message-db's read functions (no Spark:
pyiceberg scans the audit table's committed snapshot, pruned by the
``category`` partition; ``as_of`` reads an older snapshot).

==========================================  ==================================
message-db                                  here
==========================================  ==================================
``get_stream_messages(stream, position)``   :meth:`MessageStore.stream`
``get_category_messages(category, ...)``    :meth:`MessageStore.category`
``get_last_stream_message(stream, type)``   :meth:`MessageStore.last`
``stream_version(stream)``                  :meth:`MessageStore.version`
==========================================  ==================================

Semantics follow message-db: a stream is ``<category>-<id>``; the cardinal
id is the id up to the first ``+``; a consumer group member reads the
streams whose ``abs(hash_64(cardinal id)) % size == member``, with
message-db's ``hash_64`` (the first 64 bits of the MD5 of the text, as a
signed integer), so a member here reads the same streams as in message-db;
``correlation`` keeps messages whose ``metadata.correlationStreamName`` is in
that category. ``correlation_id`` (an addition) keeps messages whose
``metadata.correlationId`` equals it. ``data`` and ``metadata`` come back
decoded; encrypted fields are opened with the key (:mod:`spark_sink.crypto`);
a field of a forgotten stream (``seqkeeper store forget``) reads
:data:`~spark_sink.crypto.ERASED`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.crypto import PREFIX_STREAM, AuditKeyError, Sealer, StreamKeys, is_sealed

COLUMNS = [
    "id",
    "stream_name",
    "type",
    "position",
    "global_position",
    "data",
    "metadata",
    "time",
    "topic",
    "partition",
    "offset",
]


@dataclass(frozen=True)
class Message:
    """One row of message-db's ``messages`` (plus its Kafka coordinates)."""

    id: str
    stream_name: str
    type: str
    position: int
    global_position: int
    data: Any
    metadata: Any
    time: datetime
    topic: str
    partition: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        doc = dict(self.__dict__)
        doc["time"] = self.time.isoformat()
        return doc


def category_of(stream_name: str) -> str:
    return stream_name.split("-", 1)[0]


def cardinal_id(stream_name: str) -> str:
    """The id part of a stream name up to the first ``+`` (message-db)."""
    _, _, ident = stream_name.partition("-")
    return ident.split("+", 1)[0]


def hash_64(text: str) -> int:
    """message-db's ``hash_64``: the first 64 bits of MD5, signed."""
    return int.from_bytes(hashlib.md5(text.encode("utf-8")).digest()[:8], "big", signed=True)


def member_of(stream_name: str, size: int) -> int:
    """The consumer group member (of ``size``) that reads this stream."""
    return abs(hash_64(cardinal_id(stream_name))) % size


def _expressions() -> Any:
    """pyiceberg's row filters (its pydantic constructors do not type-check
    with positional arguments)."""
    import pyiceberg.expressions

    return pyiceberg.expressions


class MessageStore:
    """The committed audit log under a warehouse, read-only."""

    def __init__(
        self, warehouse: Path, sealer: Sealer | None = None, as_of: str | None = None
    ) -> None:
        """``as_of``: a run number or an ISO time (the snapshot current
        then, :func:`spark_sink.tables.snapshot_at`); default the latest."""
        table = tables.load(warehouse, "audit")
        if table is None or table.current_snapshot() is None:
            raise FileNotFoundError(f"no audit log under {warehouse}: run seqkeeper compact first")
        self.table: Any = table
        snap = (
            self.table.current_snapshot()
            if as_of is None
            else tables.snapshot_at(self.table, as_of)
        )
        self.snapshot_id: int = snap.snapshot_id
        self.run = tables.committed(self.table, snap).run
        self.sealer = sealer
        self.keys = StreamKeys(warehouse, sealer)

    def _table(self, category: str, where: Any = None) -> Any:
        E = _expressions()

        row_filter = E.EqualTo("category", category)
        if where is not None:
            row_filter = E.And(row_filter, where)
        scan = self.table.scan(
            row_filter=row_filter, selected_fields=tuple(COLUMNS), snapshot_id=self.snapshot_id
        )
        table = scan.to_arrow()
        return table if table.num_rows else None

    def _messages(self, table: Any, order: str, limit: int | None) -> list[Message]:
        if table is None or table.num_rows == 0:
            return []
        table = table.sort_by(order)
        if limit is not None:
            table = table.slice(0, limit)
        return [self._message(row) for row in table.to_pylist()]

    def _message(self, row: dict[str, Any]) -> Message:
        for part in ("data", "metadata"):
            text = row[part]
            row[part] = None if text is None else orjson.loads(text)
        if any(self._has_sealed(row["data"])):
            if self.sealer is None:
                raise AuditKeyError(
                    "this audit log has encrypted fields: set SEQKEEPER_AUDIT_KEY to read them"
                )
            ctx = f"{row['topic']}:{row['partition']}:{row['offset']}"
            stream = None
            if any(self._has_sealed(row["data"], PREFIX_STREAM)):
                stream = self.keys.load(row["stream_name"])  # None: forgotten
            row["data"] = self.sealer.open_fields(row["data"], ctx, stream)
        if row["time"].tzinfo is None:  # Parquet holds UTC instants
            row["time"] = row["time"].replace(tzinfo=UTC)
        return Message(**row)

    def _has_sealed(self, node: Any, prefix: str = "") -> Iterator[bool]:
        if isinstance(node, dict):
            for v in node.values():
                yield from self._has_sealed(v, prefix)
        elif isinstance(node, str):
            yield is_sealed(node) and node.startswith(prefix)

    def stream(
        self, stream_name: str, position: int = 0, batch_size: int | None = 1000
    ) -> list[Message]:
        """The stream's messages from ``position`` on, in position order."""
        E = _expressions()

        where = E.And(
            E.EqualTo("stream_name", stream_name), E.GreaterThanOrEqual("position", position)
        )
        return self._messages(self._table(category_of(stream_name), where), "position", batch_size)

    def category(
        self,
        category: str,
        position: int = 1,
        batch_size: int | None = 1000,
        correlation: str | None = None,
        consumer_group_member: int | None = None,
        consumer_group_size: int | None = None,
        correlation_id: str | None = None,
    ) -> list[Message]:
        """The category's messages from global ``position`` on, in global order."""
        E = _expressions()

        if (consumer_group_member is None) != (consumer_group_size is None):
            raise ValueError("consumer group member and size go together")
        if (
            consumer_group_size is not None
            and consumer_group_member is not None
            and not 0 <= consumer_group_member < consumer_group_size
        ):
            raise ValueError(
                f"consumer group member {consumer_group_member} is not in "
                f"0..{consumer_group_size - 1}"
            )
        if "-" in category:
            raise ValueError(f"{category!r} is a stream name, not a category")
        table = self._table(category, E.GreaterThanOrEqual("global_position", position))
        if table is None:
            return []
        table = table.sort_by("global_position")
        out: list[Message] = []
        for row in table.to_pylist():
            if consumer_group_size is not None and (
                member_of(row["stream_name"], consumer_group_size) != consumer_group_member
            ):
                continue
            if correlation is not None or correlation_id is not None:
                meta = orjson.loads(row["metadata"]) if row["metadata"] else {}
                meta = meta if isinstance(meta, dict) else {}
                if correlation is not None and (
                    category_of(str(meta.get("correlationStreamName", ""))) != correlation
                ):
                    continue
                if correlation_id is not None and meta.get("correlationId") != correlation_id:
                    continue
            out.append(self._message(row))
            if batch_size is not None and len(out) >= batch_size:
                break
        return out

    def last(self, stream_name: str, type: str | None = None) -> Message | None:
        """The stream's last message (of ``type``, when given)."""
        E = _expressions()

        where: Any = E.EqualTo("stream_name", stream_name)
        if type is not None:
            where = E.And(where, E.EqualTo("type", type))
        table = self._table(category_of(stream_name), where)
        if table is None or table.num_rows == 0:
            return None
        top = table.sort_by([("position", "descending")]).slice(0, 1)
        return self._message(top.to_pylist()[0])

    def version(self, stream_name: str) -> int | None:
        """The position of the stream's last message (``None``: no stream)."""
        import pyarrow.compute as pc

        E = _expressions()

        table = self._table(category_of(stream_name), E.EqualTo("stream_name", stream_name))
        if table is None or table.num_rows == 0:
            return None
        return int(pc.max(table["position"]).as_py())
