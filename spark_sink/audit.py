"""The audit log: every message of the given topics in message-db's
``messages`` shape, as Parquet, incremental and committed atomically.

Columns: ``id`` (the messageId; ``<topic>:<partition>:<offset>`` when the
value has none), ``stream_name`` (``<category>-<key>``; the category is the
topic name with ``-`` replaced by ``_``, since ``-`` separates category and
id), ``type``, ``position`` (gapless per stream, counted across runs),
``global_position`` (unique and increasing across runs), ``data`` and
``metadata`` (JSON text), ``time``, the original ``key`` and ``value``
bytes and ``headers`` (:data:`HEADERS_TYPE`; for replay), the Kafka
coordinates, and ``dead_letter_reason`` (the ``seqkeeper.reason`` header).
One row per message id per stream, as in message-db: a copy of a row
(an at_least_once re-emission, a reply the outbox sent again) is counted in
the run's summary, not appended; a copy with other bytes is logged and
counted, not appended (:mod:`processors.message_log`). Partitioned by
``category`` and ``day``. With a :class:`~spark_sink.crypto.Sealer`,
marked ``data`` fields, the raw value and header values are encrypted,
each stream's with its own data key (:class:`~spark_sink.crypto.StreamKeys`:
``seqkeeper store forget`` destroys one); the commit record names the
audit key's fingerprint and fields. :func:`apply_retention` deletes the
rows past ``SEQKEEPER_AUDIT_RETENTION``; :func:`expire_store` the files
only older snapshots still name.

Storage: the Iceberg table ``seqkeeper.audit`` (:mod:`spark_sink.tables`),
partitioned by ``category`` and ``day``; each run appends its rows in one
commit whose summary holds the offsets reached, the last global position,
the run's :class:`AuditSummary` and the snapshot of
``seqkeeper.audit_positions`` (every stream's next position after the run,
written just before). A run killed midway commits nothing, and a rerun
without new records appends nothing.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from seqkeeper.processors.audit_retention import OTHERS, AuditRetention
from seqkeeper.processors.envelope import Codec
from seqkeeper.security import current
from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.crypto import Sealer, StreamKeys
from seqkeeper.spark_sink.kafka_source import read_kafka
from seqkeeper.spark_sink.snapshots import exact_ends

TABLE = "audit"
POSITIONS = "audit_positions"
GLOBAL_POSITION = "seqkeeper.global_position"  #: the last global position given
POSITIONS_SNAPSHOT = "seqkeeper.positions"  #: the audit_positions snapshot of the run
SEALED = "seqkeeper.sealed"  #: the key id and fields that sealed the run
SUMMARY = "seqkeeper.summary"  #: the run's AuditSummary (rows, copies, conflicts)


def read_audit(spark: Any, warehouse: Path, snapshot_id: int | None = None) -> Any:
    """The audit table's rows at a snapshot (default: the current one),
    Spark reading its data files (``None`` before the first row)."""
    files = tables.data_files(tables.load(warehouse, TABLE), snapshot_id)
    if not files:
        return None
    # mergeSchema: runs written before the headers column lack it (null there)
    return spark.read.option("mergeSchema", "true").parquet(*files)


def coordinates(topic: str, partition: int, offset: int) -> str:
    """A record's context for :class:`~spark_sink.crypto.Sealer`."""
    return f"{topic}:{partition}:{offset}"


def _sealed(out: Any, streams: dict[str, Sealer]) -> Any:
    """``out`` with the marked ``data`` fields and the raw value sealed,
    each row's with its stream's data key (``streams``: stream name to
    its sealer, :class:`~spark_sink.crypto.StreamKeys`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    def data(text: str | None, ctx: str, stream: str) -> str | None:
        if text is None:
            return None
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
        return orjson.dumps(streams[stream].seal_fields(doc, ctx)).decode()

    def value(raw: bytes | None, ctx: str, stream: str) -> bytes | None:
        return streams[stream].seal_bytes(raw, ctx)

    ctx = F.concat_ws(":", "topic", "partition", "offset")
    return out.withColumn(
        "data", F.udf(data, StringType(), useArrow=False)("data", ctx, "stream_name")
    ).withColumn("value", F.udf(value, BinaryType(), useArrow=False)("value", ctx, "stream_name"))


#: The fields :func:`compact_audit` reads of a value (a field that is not a
#: string is kept as JSON text, as Spark's ``from_json`` keeps it).
DOC_FIELDS = (
    "messageId",
    "type",
    "data",
    "metadata",
    "commandType",
    "payload",
    "correlationId",
    "causationId",
    "tenantId",
    "replyTo",
    "schemaVersion",
)
DOC_SCHEMA = ", ".join(f"{name} STRING" for name in DOC_FIELDS)


def _decoder(codec: Codec) -> Callable[[bytes | None], tuple[str | None, ...] | None]:
    """A Spark UDF's function: a value decoded by ``codec`` as the row of
    :data:`DOC_SCHEMA` (``None`` for a value it cannot read, as
    ``from_json`` gives for bad JSON). The codec travels pickled, and is
    unpickled in the Python worker with the driver's import path, so a
    user's codec from their own project (the current directory) loads
    there too."""
    from pyspark import cloudpickle

    blob = cloudpickle.dumps(codec)  # type: ignore[no-untyped-call]
    paths = [p for p in sys.path if p]
    loaded: list[Codec] = []

    def decode(value: bytes | None) -> tuple[str | None, ...] | None:
        if value is None:
            return None
        if not loaded:
            sys.path.extend(p for p in paths if p not in sys.path)
            loaded.append(cloudpickle.loads(blob))
        try:
            doc = loaded[0].decode(bytes(value))
        except Exception:  # noqa: BLE001 - a value the codec cannot read: no fields
            return None
        if not isinstance(doc, Mapping):
            return None
        return tuple(_text(doc.get(name)) for name in DOC_FIELDS)

    return decode


def _text(field: Any) -> str | None:
    if field is None or isinstance(field, str):
        return field
    return orjson.dumps(field, default=_jsonable).decode()


def _jsonable(field: Any) -> Any:
    """What JSON has no type for (Avro bytes and fixed, decimals, UUIDs)."""
    if isinstance(field, (bytes, bytearray)):
        return base64.b64encode(field).decode("ascii")
    return str(field)


#: The column :func:`compact_audit` adds for each record's headers, in the
#: order written: the name's bytes (UTF-8, as Kafka's protocol sends them)
#: and the value's (``None`` kept), so ``replay`` sends them back byte for
#: byte. With a sealer, each value is sealed (context: the record's
#: coordinates and the header's index, :func:`header_context`).
HEADERS_TYPE = "array<struct<key: binary, value: binary>>"

#: How many conflicting copies a run names in its summary and log.
LISTED_CONFLICTS = 20

log = logging.getLogger(__name__)


def header_context(topic: str, partition: int, offset: int, index: int) -> str:
    """A header value's context for :class:`~spark_sink.crypto.Sealer`."""
    return f"{coordinates(topic, partition, offset)}:header:{index}"


@dataclass(frozen=True)
class Conflict:
    """A record whose id its stream already has, with other bytes: not a
    row (the first stays), reported."""

    id: str
    stream_name: str
    at: tuple[str, int, int]
    first: tuple[str, int, int]

    def text(self) -> str:
        return (
            f"message {self.id!r} of stream {self.stream_name!r} at "
            f"{':'.join(map(str, self.at))} has other bytes than the row at "
            f"{':'.join(map(str, self.first))}: kept the first, not this one"
        )


@dataclass(frozen=True)
class AuditSummary:
    """What one audit run did: rows appended, identical copies skipped (by
    topic: at_least_once re-emissions, reply replays), conflicting copies
    (same id, other bytes; the first :data:`LISTED_CONFLICTS` named)."""

    run: int
    rows: int
    copies: dict[str, int]
    conflicts: int
    listed: tuple[Conflict, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "copies": self.copies,
            "conflicts": self.conflicts,
            "listed_conflicts": [
                {"id": c.id, "stream_name": c.stream_name, "at": c.at, "first": c.first}
                for c in self.listed
            ],
        }

    def text(self) -> str:
        copies = sum(self.copies.values())
        by_topic = ", ".join(f"{t}: {n}" for t, n in sorted(self.copies.items()))
        text = f"audit run {self.run}: {self.rows} rows, {copies} identical copies skipped"
        text += f" ({by_topic})" if by_topic else ""
        if self.conflicts:
            text += (
                f", {self.conflicts} copies with the id of a row but other bytes skipped "
                f"(the first {len(self.listed)} logged; first: {self.listed[0].text()})"
            )
        return text


def _sealed_headers(out: Any, streams: dict[str, Sealer]) -> Any:
    from pyspark.sql import functions as F

    def seal(
        headers: list[Any] | None, topic: str, partition: int, offset: int, stream: str
    ) -> Any:
        if headers is None:
            return None
        sealer = streams[stream]
        return [
            (h["key"], sealer.seal_bytes(h["value"], header_context(topic, partition, offset, i)))
            for i, h in enumerate(headers)
        ]

    udf = F.udf(seal, HEADERS_TYPE, useArrow=False)
    return out.withColumn("headers", udf("headers", "topic", "partition", "offset", "stream_name"))


def _first_rows(spark: Any, warehouse: Path) -> Any:
    """Each (stream, id) of the committed audit: its row's value and
    coordinates (the earliest row: a log written before copies were
    skipped may hold several); ``None`` before the first run."""
    from pyspark.sql import functions as F

    prior = read_audit(spark, warehouse)
    if prior is None:
        return None
    first = F.min_by(F.struct("value", "topic", "partition", "offset"), "global_position")
    return prior.groupBy("stream_name", "id").agg(first.alias("prior"))


def compact_audit(
    spark: Any,
    bootstrap: str,
    topics: list[str],
    warehouse: Path,
    sealer: Sealer | None = None,
    report: Callable[[AuditSummary], None] = lambda summary: None,
    id_header: str = "",
    isolation: str = "read_committed",
    ends: dict[str, dict[str, int]] | None = None,
    codec: Codec | None = None,
    codec_topics: Collection[str] = (),
) -> int:
    """Append the topics' new records to the audit log; the run's number.
    One row per message id per stream, as message-db writes them
    (:mod:`processors.message_log`, the reference this is tested against):
    copies are counted and conflicts logged, in ``report``'s summary and
    the run's commit record. ``id_header``: the header holding the
    messageId of a value without one (``SEQKEEPER_MESSAGE_ID_HEADER``).
    ``isolation``: how the topics are read (read_committed: no aborted
    output becomes a row). With a ``sealer``, marked ``data`` fields, raw
    values and header values are encrypted (:mod:`spark_sink.crypto`).
    ``ends``: where the run stops (default: the topics' ends now;
    ``compact --follow`` passes a micro-batch's end offsets). ``codec``:
    how the values of ``codec_topics`` (the ordered worker's) are read
    (``SEQKEEPER_CODEC``; ``None`` and other topics: JSON)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    table = tables.load(warehouse, TABLE)
    for done in (table, tables.load(warehouse, POSITIONS)):
        if done is not None:
            tables.remove_orphans(done)
    commit = tables.committed(table)
    if ends is None:
        ends = exact_ends(bootstrap, topics, isolation)
    starts = commit.offsets
    new = read_kafka(
        spark,
        {
            "kafka.bootstrap.servers": bootstrap,
            **current().spark_options(),  # TLS, SASL: as every client
            "subscribe": ",".join(topics),
            "includeHeaders": "true",
            "kafka.isolation.level": isolation,
            "startingOffsets": json.dumps({t: starts.get(t, {}) for t in topics}),
            "endingOffsets": json.dumps(ends),
        },
    )
    doc = F.from_json(F.col("value").cast("string"), DOC_SCHEMA)
    if codec is not None and codec_topics:  # (the ordered worker's topics: in its codec)
        decoded = F.udf(_decoder(codec), DOC_SCHEMA, useArrow=False)("value")
        doc = F.when(F.col("topic").isin(*codec_topics), decoded).otherwise(doc)
    # Commands carry their metadata at the top level (schemas/command.schema.json).
    envelope = F.struct(
        *[
            F.col(f"doc.{f}").alias(f)
            for f in ("correlationId", "causationId", "tenantId", "replyTo", "schemaVersion")
        ]
    )
    metadata = F.coalesce(
        F.col("doc.metadata"),
        F.when(F.to_json(envelope) != "{}", F.to_json(envelope)),
    )
    reason = F.filter("headers", lambda h: h["key"] == "seqkeeper.reason")
    headers = F.transform(
        "headers",
        lambda h: F.struct(F.encode(h["key"], "UTF-8").alias("key"), h["value"].alias("value")),
    ).cast(HEADERS_TYPE)
    header_id = F.lit(None).cast("string")
    if id_header:
        named = F.filter("headers", lambda h: h["key"] == id_header)
        header_id = F.when(F.size(named) > 0, named[0]["value"].cast("string"))
    rows = new.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        F.regexp_replace("topic", "-", "_").alias("category"),
        F.coalesce(F.col("key").cast("string"), F.lit("")).alias("key_text"),
        doc.alias("doc"),
        F.when(F.size(reason) > 0, reason[0]["value"].cast("string")).alias("dead_letter_reason"),
        headers.alias("headers"),
        header_id.alias("header_id"),
    )
    order = ["topic", "partition", "offset"]
    stream = F.concat_ws("-", "category", "key_text")
    rows = rows.select(
        F.coalesce(
            F.col("doc.messageId"), "header_id", F.concat_ws(":", "topic", "partition", "offset")
        ).alias("id"),
        stream.alias("stream_name"),
        F.coalesce(F.col("doc.type"), F.col("doc.commandType"), F.lit("")).alias("type"),
        F.coalesce(F.col("doc.data"), F.col("doc.payload")).alias("data"),
        metadata.alias("metadata"),
        F.col("timestamp").alias("time"),
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        "dead_letter_reason",
        "category",
        F.to_date("timestamp").alias("day"),
    )
    # message-db's unique (stream, id): a record is a copy when an earlier
    # run wrote its id to its stream, or an earlier record of this run did
    # (in (topic, partition, offset) order, the same in every rerun); a copy
    # with other bytes than that first one is a conflict. Only the first
    # becomes a row (processors.message_log.append, the reference).
    same_id = Window.partitionBy("stream_name", "id").orderBy(*order)
    here = F.struct("topic", "partition", "offset")
    rows = rows.select(
        "*",
        F.row_number().over(same_id).alias("nth"),
        F.first("value").over(same_id).alias("first_value"),
        F.first(here).over(same_id).alias("first_at"),
    )
    prior = _first_rows(spark, warehouse)
    if prior is not None:
        rows = rows.join(prior, ["stream_name", "id"], "left")
        prior_value = F.col("prior.value")
        if sealer is not None:  # (a row's value is sealed under its own coordinates)
            keys = StreamKeys(warehouse, sealer)

            def open_prior(v: bytes | None, t: str, p: int, o: int, s: str) -> bytes | None:
                # (a forgotten stream's value opens as None: a copy of one
                # of its messages counts as a conflict, and is not appended)
                stream = keys.load(s) if v is not None and v.startswith(b"enc:v3:") else None
                return sealer.open_bytes(v, coordinates(t, p, o), stream)

            opened = F.udf(open_prior, BinaryType(), useArrow=False)
            prior_value = opened(
                "prior.value", "prior.topic", "prior.partition", "prior.offset", "stream_name"
            )
        first_value = F.when(F.col("prior").isNotNull(), prior_value).otherwise(
            F.col("first_value")
        )
        first_at = F.when(
            F.col("prior").isNotNull(), F.struct("prior.topic", "prior.partition", "prior.offset")
        ).otherwise(F.col("first_at"))
        copy = F.col("prior").isNotNull() | (F.col("nth") > 1)
    else:
        first_value, first_at, copy = F.col("first_value"), F.col("first_at"), F.col("nth") > 1
    marked = rows.select(
        "*",
        copy.alias("is_copy"),
        F.col("value").eqNullSafe(first_value).alias("identical"),
        first_at.alias("first"),
    ).cache()
    copies = {
        r.topic: int(r["count"])
        for r in marked.where("is_copy AND identical").groupBy("topic").count().collect()
    }
    conflicting = marked.where("is_copy AND NOT identical")
    conflicts = conflicting.count()
    listed = tuple(
        Conflict(
            r.id,
            r.stream_name,
            (r.topic, r.partition, r.offset),
            (r.first.topic, r.first.partition, r.first.offset),
        )
        for r in conflicting.orderBy(*order).limit(LISTED_CONFLICTS).collect()
    )
    for c in listed:
        log.warning("audit: %s", c.text())
    kept = marked.where(~F.col("is_copy")).drop(
        "nth", "first_value", "first_at", "prior", "is_copy", "identical", "first"
    )
    # Each stream's next position, kept per run (so purged rows do not
    # reset positions, and a run does not rescan the whole log).
    positions = tables.load(warehouse, POSITIONS)
    base = None
    if commit.prop(POSITIONS_SNAPSHOT):
        files = tables.data_files(positions, int(commit.prop(POSITIONS_SNAPSHOT)))
        base = spark.read.parquet(*files) if files else None
    last_global = int(commit.prop(GLOBAL_POSITION, "0"))
    out = kept.select(
        "*",
        (F.row_number().over(Window.partitionBy("stream_name").orderBy(*order)) - 1).alias("rel"),
        (F.row_number().over(Window.orderBy(*order)) + F.lit(last_global).cast("long")).alias(
            "global_position"
        ),
    )
    if base is not None:
        out = out.join(base, "stream_name", "left").withColumn(
            "position", F.col("rel") + F.coalesce(F.col("base"), F.lit(0))
        )
    else:
        out = out.withColumn("position", F.col("rel"))
    out = out.drop("rel", "base")
    if sealer is not None:
        # Each stream's key is drawn and stored before its rows are sealed
        # (and before the commit): a crash in between leaves keys that the
        # rerun uses again, so its rows get the same bytes.
        keys = StreamKeys(warehouse, sealer)
        names = [r.stream_name for r in out.select("stream_name").distinct().collect()]
        streams = keys.ensure_all(names)
        out = _sealed_headers(_sealed(out, streams), streams)
    out = out.cache()
    count = out.count()
    try:
        if not count and tables.merged(starts, ends) == starts:
            return commit.run  # nothing new: no commit
        nexts = out.groupBy("stream_name").agg((F.max("position") + 1).alias("base"))
        if base is not None:
            nexts = nexts.unionByName(base).groupBy("stream_name").agg(F.max("base").alias("base"))
        # The positions first, then the audit naming their snapshot: a crash
        # between the two leaves a positions snapshot no audit commit names.
        pos_table, pos_commit = tables.table_for(warehouse, POSITIONS, nexts.schema)
        pos_dir = tables.run_directory(pos_table)
        tables.commit(
            pos_table,
            pos_commit,
            tables.write_files(nexts.coalesce(1), pos_dir),
            {},
            pos_dir,
            replaced=[t.file for t in pos_table.scan().plan_files()]
            if pos_table.current_snapshot()
            else (),
        )
        pos_snapshot = tables.committed(tables.load(warehouse, POSITIONS)).snapshot_id
        table, _ = tables.table_for(warehouse, TABLE, out.schema, ["category", "day"])
        directory = tables.run_directory(table)
        files = (
            tables.write_files(out.orderBy("global_position"), directory, ["category", "day"])
            if count
            else []
        )
        summary = AuditSummary(commit.run + 1, count, copies, conflicts, listed)
        properties = {
            GLOBAL_POSITION: str(last_global + count),
            POSITIONS_SNAPSHOT: str(pos_snapshot),
            SUMMARY: json.dumps(summary.to_json(), sort_keys=True),
        }
        if sealer is not None:
            properties[SEALED] = json.dumps(
                {"key_id": sealer.key_id, "fields": list(sealer.fields)}
            )
        run = tables.commit(table, commit, files, ends, directory, properties)
    finally:
        out.unpersist()
        marked.unpersist()
    report(summary)
    return run


@dataclass(frozen=True)
class RetentionReport:
    """What one retention commit removed: rows and day partitions by category."""

    rows: dict[str, int]
    days: dict[str, int]

    def text(self) -> str:
        if not self.rows:
            return "retention: no audit rows past their category's retention"
        by = ", ".join(
            f"{c}: {self.rows[c]} rows of {self.days[c]} days" for c in sorted(self.rows)
        )
        return (
            f"retention: {sum(self.rows.values())} audit rows deleted ({by}); earlier "
            "snapshots keep their files until expired (seqkeeper store expire)"
        )


def apply_retention(
    warehouse: Path, retention: AuditRetention, today: date | None = None
) -> RetentionReport:
    """Delete the audit rows past their category's retention, in one
    commit (a normal table commit; none when nothing is past). Files hold
    one (category, day) each, so whole files go and no data is rewritten.
    The offsets and positions reached are kept, so compaction goes on where
    it was. Earlier snapshots keep the files until they are expired
    (:func:`spark_sink.tables.expire`)."""
    today = today or datetime.now(UTC).date()
    table = tables.load(warehouse, TABLE)
    if retention.keeps_everything or table is None or table.current_snapshot() is None:
        return RetentionReport({}, {})
    commit = tables.committed(table)
    names = [f.name for f in table.spec().fields]
    day, category = names.index("day"), names.index("category")
    epoch = date(1970, 1, 1)  # Iceberg's dates are days since
    old = [
        t.file
        for t in table.scan().plan_files()
        if retention.expired(
            t.file.partition[category], epoch + timedelta(days=t.file.partition[day]), today
        )
    ]
    if not old:
        return RetentionReport({}, {})
    tables.commit(table, commit, [], {}, None, replaced=old, next_run=False)
    rows: dict[str, int] = {}
    days: dict[str, set[int]] = {}
    for f in old:
        c = f.partition[category]
        rows[c] = rows.get(c, 0) + f.record_count
        days.setdefault(c, set()).add(f.partition[day])
    return RetentionReport(rows, {c: len(d) for c, d in days.items()})


def purge_audit(warehouse: Path, keep_days: int, today: date | None = None) -> int:
    """Delete the audit rows of days older than ``keep_days``, every
    category alike (``compact --purge-days``; :func:`apply_retention`);
    how many (category, day) partitions went."""
    report = apply_retention(warehouse, AuditRetention(((OTHERS, keep_days),)), today)
    return sum(report.days.values())


def expire_store(warehouse: Path, keep: int = 1) -> dict[str, tables.Expired]:
    """Expire all but the newest ``keep`` snapshots of the warehouse's
    tables and delete the data files only they named
    (:func:`spark_sink.tables.expire`); the positions snapshots that a kept
    audit snapshot names are kept."""
    done = {}
    audit = tables.load(warehouse, TABLE)
    if audit is not None:
        done[TABLE] = tables.expire(audit, keep)
        audit = audit.refresh()
    named = {
        int(s.summary.additional_properties[POSITIONS_SNAPSHOT])
        for s in (audit.snapshots() if audit is not None else ())
        if s.summary and POSITIONS_SNAPSHOT in s.summary.additional_properties
    }
    positions = tables.load(warehouse, POSITIONS)
    if positions is not None:
        done[POSITIONS] = tables.expire(positions, keep, named)
    snapshots = tables.load(warehouse, "snapshots")
    if snapshots is not None:
        done["snapshots"] = tables.expire(snapshots, keep)
    return done
