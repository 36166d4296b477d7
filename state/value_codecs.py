"""The built-in value codecs (``SEQKEEPER_CODEC``): JSON, and Avro with one
schema, optionally in the Confluent wire format.

A value codec turns a record value into a document and back
(:class:`~seqkeeper.processors.envelope.Codec`). The worker reads its input
with ``decode`` and writes every value it makes itself (gap markers,
processor outputs) with ``encode``, so a topic in Avro never gets a JSON
record; records it passes on (the ordered and deduplicated copies of an
input, dead letters) keep their bytes. See docs/codecs.md.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

#: The Confluent wire format: magic byte 0, then the schema id (4 bytes,
#: big-endian), then the Avro binary encoding.
MAGIC = b"\x00"
HEADER_SIZE = 5
#: Schema ids are Java ints in Confluent's registry (non-negative).
MAX_SCHEMA_ID = 2**31 - 1


class JsonCodec:
    """JSON values (the default; what ``SEQKEEPER_CODEC=json`` means). The
    worker uses ``orjson`` directly for it: this class is for users who
    wrap or compare codecs."""

    def decode(self, value: bytes) -> Any:
        return orjson.loads(value)

    def encode(self, document: Any) -> bytes:
        return orjson.dumps(document)


def confluent_header(schema_id: int) -> bytes:
    """The 5 bytes that start a value in the Confluent wire format."""
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"a schema id is from 0 to {MAX_SCHEMA_ID}, got {schema_id}")
    return MAGIC + schema_id.to_bytes(4, "big")


def unframe(value: bytes, schema_id: int) -> int:
    """Where the Avro binary of a Confluent-framed ``value`` starts;
    ``ValueError`` naming what is wrong when the magic byte or the schema
    id is not the expected one."""
    if len(value) < HEADER_SIZE:
        raise ValueError(
            f"the value has {len(value)} bytes, too short for the Confluent wire format "
            f"(magic byte 0 and a 4-byte schema id)"
        )
    if value[0] != 0:
        raise ValueError(f"magic byte 0x{value[0]:02x}, expected 0x00 (the Confluent wire format)")
    found = int.from_bytes(value[1:HEADER_SIZE], "big")
    if found != schema_id:
        raise ValueError(f"schema id {found}, expected {schema_id} (SEQKEEPER_AVRO_SCHEMA_ID)")
    return HEADER_SIZE


class AvroCodec:
    """Avro binary values of one schema (``fastavro``). With ``schema_id``,
    in the Confluent wire format: a value without its magic byte or with
    another schema id is refused (``ValueError``: a dead letter naming
    it). ``encode`` is strict: a document with a field the schema does not
    have, or without one that has no default, is refused rather than
    written without it."""

    def __init__(self, schema: Any, schema_id: int | None = None) -> None:
        # (imported here: fastavro is an optional extra, seqkeeper[avro])
        import fastavro

        self._reader = fastavro.schemaless_reader
        self._writer = fastavro.schemaless_writer
        self.source = schema  # (as given: how the codec is pickled, to a Spark worker)
        self.schema = fastavro.parse_schema(schema)
        self.schema_id = schema_id
        self.header = b"" if schema_id is None else confluent_header(schema_id)

    @classmethod
    def from_file(cls, path: str | Path, schema_id: int | None = None) -> AvroCodec:
        """The codec of the schema in the ``.avsc`` file at ``path`` (JSON)."""
        return cls(orjson.loads(Path(path).read_bytes()), schema_id)

    def __reduce__(self) -> tuple[type[AvroCodec], tuple[Any, int | None]]:
        # (fastavro's compiled functions do not pickle: the schema does)
        return AvroCodec, (self.source, self.schema_id)

    def decode(self, value: bytes) -> Any:
        start = 0 if self.schema_id is None else unframe(value, self.schema_id)
        source = io.BytesIO(value)
        source.seek(start)
        try:
            document = self._reader(source, self.schema, None)
        except Exception as exc:  # noqa: BLE001 - fastavro raises many kinds on bad bytes
            raise ValueError(f"not Avro of the schema: {type(exc).__name__}: {exc}") from None
        if source.tell() != len(value):
            raise ValueError(
                f"not Avro of the schema: {len(value) - source.tell()} bytes left after the record"
            )
        return document

    def encode(self, document: Any) -> bytes:
        sink = io.BytesIO()
        sink.write(self.header)
        if not isinstance(document, Mapping):
            raise ValueError(f"expected a mapping, got {type(document).__name__}")
        try:
            self._writer(sink, self.schema, document, strict_allow_default=True)
        except Exception as exc:  # noqa: BLE001 - fastavro raises many kinds on a bad document
            raise ValueError(
                f"the document does not fit the Avro schema: {type(exc).__name__}: {exc}"
            ) from None
        return sink.getvalue()
