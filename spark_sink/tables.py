"""The warehouse's Apache Iceberg tables: Spark writes the Parquet data
files, pyiceberg commits them, one Iceberg transaction per table and run.

Tables (namespace ``seqkeeper``): ``audit`` (the message log,
:mod:`spark_sink.audit`), ``audit_positions`` (each stream's next position,
private to the audit) and ``snapshots`` (the latest value per key of the
changelog topics, :mod:`spark_sink.snapshots`). The catalog is pyiceberg's
SQL catalog on ``<warehouse>/catalog.db`` (SQLite), or the REST catalog
named by ``SEQKEEPER_ICEBERG_CATALOG``.

Exactly-once commits. Each committed snapshot's summary holds the full
offset map the table has reached (``seqkeeper.offsets``: topic → partition
→ next offset, merged over every run), the run number and the directory
of the run's data files. A run (1) loads the table and reads those offsets,
(2) reads Kafka from them to ends pinned at its start and has Spark write
the data files under ``data/run-<start ms>-<uuid>/``, (3) commits them in
one transaction whose requirement is that the table is still at the
snapshot loaded in (1). A crash before (3) commits nothing (the next run
starts from the same offsets, so nothing is lost or doubled); after (3) the
next run starts from the new offsets. Two concurrent runs load the same
snapshot; the catalog's optimistic concurrency lets one commit and refuses
the other, which removes its files and fails with one line
(:class:`LostCommit`). pyiceberg would retry the refused commit against the
new snapshot, which would add the same offsets' records twice, so every
table sets ``commit.retry.num-retries=0``.

Orphans. A run that was killed leaves its ``run-*`` directory behind,
referenced by no snapshot. The next run removes every unreferenced
``run-*`` directory started before the table's current snapshot was made:
the run that wrote it loaded an older snapshot, so its commit can no longer
succeed (a run in progress that started later is left alone).
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqkeeper.settings import VARS, SparkSettings

NAMESPACE = "seqkeeper"
CATALOG_ENV = VARS["iceberg_catalog"].env
OFFSETS = "seqkeeper.offsets"  #: the full merged offset map reached (JSON)
RUN = "seqkeeper.run"  #: the run number (1, 2, ...)
RUN_DIR = "seqkeeper.dir"  #: the directory of the run's data files
#: Table properties. No automatic retry: see the module's docstring.
PROPERTIES = {"commit.retry.num-retries": "0", "format-version": "2"}
#: What a legacy (pre-Iceberg) warehouse has and the new one does not.
LEGACY = "_LATEST"
NAME_MAPPING = "schema.name-mapping.default"


class LostCommit(RuntimeError):
    """Another run committed the table after this run loaded it."""


class LegacyWarehouse(ValueError):
    """The warehouse holds the ``_LATEST`` layout of earlier versions."""


class CatalogUnavailable(RuntimeError):
    """The REST catalog of ``SEQKEEPER_ICEBERG_CATALOG`` did not answer, or
    answered with an error, before anything was committed."""


def catalog(warehouse: Path) -> Any:
    """The catalog of ``warehouse``: the REST catalog of
    ``SEQKEEPER_ICEBERG_CATALOG`` when set, else the SQL catalog on
    ``<warehouse>/catalog.db``."""
    uri = uri_of_rest()
    if uri:
        return _rest(uri, warehouse)
    import fcntl

    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = warehouse.resolve()
    warehouse.mkdir(parents=True, exist_ok=True)
    # The catalog creates its SQL tables on first use; two runs doing so at
    # once race (one fails: "table iceberg_tables already exists"), so the
    # set-up is done under a lock. Commits need none: the catalog's
    # compare-and-swap on the metadata location decides those.
    with open(warehouse / ".catalog.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sql = SqlCatalog(
            NAMESPACE, uri=f"sqlite:///{warehouse / 'catalog.db'}", warehouse=warehouse.as_uri()
        )
        sql.create_namespace_if_not_exists(NAMESPACE)
        return sql


def _rest(uri: str, warehouse: Path) -> Any:
    """The REST catalog at ``uri``, with the namespace of the tables."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import RESTError
    from requests.exceptions import RequestException

    try:
        rest = RestCatalog(NAMESPACE, uri=uri, warehouse=str(warehouse))
        rest.create_namespace_if_not_exists(NAMESPACE)
    except (RequestException, RESTError, ValueError) as e:
        reason = type(e).__name__ if isinstance(e, RequestException) else str(e).splitlines()[0]
        raise CatalogUnavailable(
            f"the Iceberg REST catalog at {uri} ({CATALOG_ENV}) did not answer as one "
            f"({reason}); check the URL and that the catalog runs, or unset {CATALOG_ENV} "
            "for the embedded catalog in the warehouse"
        ) from None
    return rest


def uri_of_rest() -> str:
    """The REST catalog's URL (empty: the embedded SQL catalog)."""
    return SparkSettings().iceberg_catalog


def refuse_legacy(warehouse: Path) -> None:
    """Raise :class:`LegacyWarehouse` if ``warehouse`` has the ``_LATEST``
    layout (its runs are not Iceberg tables and are never read)."""
    if (warehouse / LEGACY).exists() or (warehouse / "audit" / LEGACY).exists():
        raise LegacyWarehouse(
            f"{warehouse} holds the pre-Iceberg layout (_LATEST files): convert it once "
            f"with `seqkeeper compact --convert --warehouse {warehouse}` (the old files stay), "
            "then compact and read as before"
        )


def load(warehouse: Path, name: str, converting: bool = False) -> Any | None:
    """The table ``name`` (None before its first commit; ``converting``: a
    pre-Iceberg warehouse is being converted, :mod:`spark_sink.convert`)."""
    from pyiceberg.exceptions import NoSuchTableError

    if not converting:
        refuse_legacy(warehouse)
    try:
        return catalog(warehouse).load_table(f"{NAMESPACE}.{name}")
    except NoSuchTableError:
        return None


def location(table: Any) -> str:
    """The table's location as Spark and the local file system take it."""
    loc: str = table.location()
    return loc.removeprefix("file://") if loc.startswith("file:///") else loc


@dataclass(frozen=True)
class Committed:
    """A table's state at one snapshot (run 0: nothing committed yet)."""

    run: int = 0
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)
    summary: Mapping[str, str] = field(default_factory=dict)
    snapshot_id: int | None = None

    def prop(self, name: str, default: str = "") -> str:
        return self.summary.get(name, default)


def committed(table: Any | None, snapshot: Any | None = None) -> Committed:
    """What ``snapshot`` (default: the current one) committed."""
    if table is None:
        return Committed()
    snap = snapshot if snapshot is not None else table.current_snapshot()
    if snap is None:
        return Committed()
    summary = dict(snap.summary.additional_properties) if snap.summary else {}
    return Committed(
        run=int(summary.get(RUN, "0")),
        offsets=json.loads(summary.get(OFFSETS, "{}")),
        summary=summary,
        snapshot_id=snap.snapshot_id,
    )


def merged(
    old: Mapping[str, Mapping[str, int]], new: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """Offsets ``old`` updated with ``new`` (topics a run did not read keep
    what they had: a snapshot always holds the full map)."""
    out = {t: dict(p) for t, p in old.items()}
    for topic, parts in new.items():
        out.setdefault(topic, {}).update({str(k): int(v) for k, v in parts.items()})
    return out


def snapshot_at(table: Any, as_of: str) -> Any:
    """The snapshot ``as_of`` names: a run number (``3``) or a time (ISO
    8601, UTC when it has no zone: the snapshot current then)."""
    from datetime import UTC, datetime

    if as_of.isdigit():
        runs = [
            s
            for s in table.snapshots()
            if s.summary and s.summary.additional_properties.get(RUN) == as_of
        ]
        if runs:  # the last snapshot of that run (a purge or reseal keeps the run)
            return max(runs, key=lambda s: s.sequence_number or 0)
        raise ValueError(f"--as-of {as_of}: no run {as_of} in this table (a run number or a time)")
    try:
        when = datetime.fromisoformat(as_of)
    except ValueError:
        raise ValueError(
            f"--as-of {as_of!r}: expected a run number or an ISO time, such as 2026-01-31T12:00"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    snap = table.snapshot_as_of_timestamp(int(when.timestamp() * 1000))
    if snap is None:
        raise ValueError(f"--as-of {as_of}: the table has no snapshot that early")
    return snap


def data_files(table: Any | None, snapshot_id: int | None = None) -> list[str]:
    """The data files of a snapshot (default: the current one), as paths
    Spark and pyarrow open."""
    if table is None or (snapshot_id is None and table.current_snapshot() is None):
        return []
    tasks = table.scan(snapshot_id=snapshot_id).plan_files()
    return sorted(location_path(t.file.file_path) for t in tasks)


def location_path(uri: str) -> str:
    return uri.removeprefix("file://") if uri.startswith("file:///") else uri


def spark_schema_as_arrow(schema: Any) -> Any:
    """A Spark (or Arrow) schema as an Arrow schema whose fields are all
    nullable (a required column would reject a later file with a null)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = schema if isinstance(schema, pa.Schema) else to_arrow_schema(schema, timezone="UTC")
    return pa.schema([f.with_nullable(True) for f in arrow])


def table_for(
    warehouse: Path,
    name: str,
    schema: Any,
    partition_by: Sequence[str] = (),
    converting: bool = False,
) -> tuple[Any, Committed]:
    """The table ``name``, created on first use from the Spark (or Arrow) ``schema``
    (identity-partitioned by ``partition_by``), with columns the schema has
    and the table not yet added (so the audit's columns can grow); what its
    current snapshot committed."""
    from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError
    from sqlalchemy.exc import IntegrityError

    if not converting:
        refuse_legacy(warehouse)
    cat = catalog(warehouse)
    if uri_of_rest():
        cat.create_namespace_if_not_exists(NAMESPACE)
    ident = f"{NAMESPACE}.{name}"
    arrow = spark_schema_as_arrow(schema)
    if not cat.table_exists(ident):
        try:
            with cat.create_table_transaction(ident, schema=arrow, properties=PROPERTIES) as tx:
                if partition_by:
                    with tx.update_spec() as spec:
                        for column in partition_by:
                            spec.add_identity(column)
        except (TableAlreadyExistsError, CommitFailedException, IntegrityError):
            if not cat.table_exists(ident):  # else a concurrent run created it first
                raise
    # Schema and name mapping changes touch no data and are the same for
    # every run: when a concurrent run changed the table meanwhile, they are
    # made again on the new metadata (unlike a data commit).
    for attempt in range(METADATA_ATTEMPTS):
        table = cat.load_table(ident)
        try:
            _evolve(table, arrow)
            break
        except CommitFailedException:
            if attempt == METADATA_ATTEMPTS - 1:
                raise
    table = cat.load_table(ident)
    return table, committed(table)


#: How often a metadata change is tried against a table others change too.
METADATA_ATTEMPTS = 5


def _evolve(table: Any, arrow: Any) -> None:
    """Add the columns ``arrow`` has and the table not; keep the name
    mapping in step with the schema (Spark's files carry no Iceberg field
    ids: readers match their columns by name through the mapping)."""
    known = {f.name for f in table.schema().fields}
    if any(f.name not in known for f in arrow):
        with table.update_schema() as update:
            update.union_by_name(arrow)
    mapping = table.schema().name_mapping.model_dump_json()
    if table.properties.get(NAME_MAPPING) != mapping:
        with table.transaction() as tx:
            tx.set_properties(**{NAME_MAPPING: mapping})


def run_directory(table: Any) -> str:
    """A new directory for a run's data files (its name starts with the
    time, after the table was loaded: see :func:`remove_orphans`)."""
    return f"{location(table)}/data/run-{int(time.time() * 1000)}-{uuid.uuid4().hex[:12]}"


def write_files(frame: Any, directory: str, partition_by: Sequence[str] = ()) -> list[str]:
    """Have Spark write ``frame`` as Parquet under ``directory``, each file
    holding one value of each ``partition_by`` column (pyiceberg reads a
    file's partition from its column statistics) and timestamps as
    microseconds (Iceberg's unit); the files written."""
    from pyspark.sql import functions as F

    spark = frame.sparkSession
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    # Spark takes partitionBy columns out of the files; Iceberg wants them
    # in: partition by copies of them.
    copies = [f"part_{c}" for c in partition_by]
    for column, copy in zip(partition_by, copies, strict=True):
        frame = frame.withColumn(copy, F.col(column))
    writer = frame.write.mode("errorifexists")
    if copies:
        writer = writer.partitionBy(*copies)
    writer.parquet(directory)
    return parquet_under(directory)


def parquet_under(directory: str) -> list[str]:
    if "://" in directory:  # a remote store: Spark lists it
        raise NotImplementedError(f"data files on {directory}: only local warehouses are listed")
    return sorted(
        str(p)
        for p in Path(directory).rglob("*.parquet")
        if not p.name.startswith((".", "_")) and not any(x.startswith("_") for x in p.parts)
    )


def commit(
    table: Any,
    base: Committed,
    added: Iterable[str],
    offsets: Mapping[str, Mapping[str, int]],
    directory: str | None,
    properties: Mapping[str, str] | None = None,
    replaced: Iterable[Any] = (),
    next_run: bool = True,
) -> int:
    """Commit ``added`` files (and remove the ``replaced`` data files) in one
    transaction, the summary holding the merged offsets; the run number.
    A concurrent commit since ``base`` raises :class:`LostCommit` after
    the run's files are removed."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table import _parquet_files_to_data_files

    if committed(table).snapshot_id != base.snapshot_id:
        if directory is not None:
            remove_directory(directory)
        raise LostCommit(lost(table))
    run = base.run + 1 if next_run else base.run
    # Carried forward: every snapshot says all the table has reached.
    carried = {k: v for k, v in base.summary.items() if k.startswith("seqkeeper.")}
    carried.pop(RUN_DIR, None)
    summary = {
        **carried,
        RUN: str(run),
        OFFSETS: json.dumps(merged(base.offsets, offsets), sort_keys=True),
        **(properties or {}),
    }
    if directory is not None:
        summary[RUN_DIR] = directory.rsplit("/", 1)[-1]
    files = [f"file://{Path(f).resolve()}" if "://" not in f else f for f in added]
    gone = list(replaced)
    for attempt in range(METADATA_ATTEMPTS):
        tx = table.transaction()
        new = list(_parquet_files_to_data_files(table.metadata, files, table.io)) if files else []
        with tx.update_snapshot(snapshot_properties=summary).overwrite() as update:
            for data_file in gone:
                update.delete_data_file(data_file)
            for data_file in new:
                update.append_data_file(data_file)
        try:
            tx.commit_transaction()
            return run
        except CommitFailedException:
            # Refused. If another run committed data, this run's records
            # may be there already: it gives up. If only the metadata moved
            # (a schema or property change), the offsets this run read from
            # are still the table's: it commits again on the new metadata.
            table = table.refresh()
            if committed(table).snapshot_id != base.snapshot_id or attempt == METADATA_ATTEMPTS - 1:
                break
    if directory is not None:
        remove_directory(directory)
    raise LostCommit(lost(table))


def lost(table: Any) -> str:
    return (
        f"{table.name()[-1]}: another run committed this table while this run was writing; "
        "this run committed nothing and its files are removed: run it again "
        "(it continues from what the other run committed)"
    )


def remove_directory(directory: str) -> None:
    if "://" not in directory:
        shutil.rmtree(directory, ignore_errors=True)


def remove_orphans(table: Any) -> int:
    """Remove the ``run-*`` directories that no snapshot references and
    that were started before the current snapshot was made (their runs
    can no longer commit); how many."""
    snap = table.current_snapshot()
    if snap is None or not location(table).startswith("/"):
        return 0
    referenced = {
        s.summary.additional_properties.get(RUN_DIR) for s in table.snapshots() if s.summary
    }
    referenced |= _live_dirs(table)
    gone = 0
    for path in sorted(Path(location(table), "data").glob("run-*")):
        started = path.name.split("-")[1]
        if path.name in referenced or not started.isdigit() or int(started) >= snap.timestamp_ms:
            continue
        shutil.rmtree(path, ignore_errors=True)
        gone += 1
    return gone


def _live_dirs(table: Any) -> set[str]:
    """The run directories of the current snapshot's data files (a snapshot
    that added them may have been expired since)."""
    root = Path(location(table), "data")
    return {
        Path(p).relative_to(root).parts[0] for p in data_files(table) if p.startswith(str(root))
    }


@dataclass(frozen=True)
class Expired:
    """What :func:`expire` did to one table."""

    snapshots: int  #: snapshots expired
    files: int  #: data files deleted (no snapshot left names them)


def expire(table: Any, keep: int = 1, also_keep: Iterable[int] = ()) -> Expired:
    """Expire every snapshot of ``table`` but the newest ``keep`` (and
    ``also_keep``), then delete the data files under its location that no
    snapshot left names: what retention and reseal replaced is then gone
    from disk (time travel to an expired snapshot is no longer possible).
    Files of a run that started after the current snapshot are left alone
    (it may still commit them; see :func:`remove_orphans`)."""
    snaps = sorted(table.snapshots(), key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    kept = {s.snapshot_id for s in snaps[-keep:]} if keep > 0 else set()
    kept |= set(also_keep)
    gone = [s.snapshot_id for s in snaps if s.snapshot_id not in kept]
    if gone:
        table.maintenance.expire_snapshots().by_ids(gone).commit()
        table = table.refresh()
    current = table.current_snapshot()
    root = Path(location(table), "data")
    if current is None or not location(table).startswith("/") or not root.is_dir():
        return Expired(len(gone), 0)
    live = {p for s in table.snapshots() for p in data_files(table, s.snapshot_id)}
    deleted = 0
    for path in sorted(root.rglob("*.parquet")):
        run = path.relative_to(root).parts[0].split("-")
        if str(path) in live or (
            len(run) > 1 and run[1].isdigit() and int(run[1]) >= current.timestamp_ms
        ):
            continue
        path.unlink()
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)  # (Spark's checksum)
        deleted += 1
    return Expired(len(gone), deleted)
