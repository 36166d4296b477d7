"""``seqkeeper compact --reseal``: move every sealed value of the warehouse
to the current audit key, so an old key can be dropped (key rotation,
docs/security.md).

Compaction seals new rows with the current key, and rewrites each state
snapshot whole (so its values move to the current key at every run), but
it never rewrites the audit log's earlier rows. This pass does, file by
file, over the current snapshot of both Iceberg tables:

* each file is read, its sealed values not under the current key are
  opened (with whichever given key sealed them) and sealed again with the
  current key, which gives the bytes a fresh compaction under that key
  would; everything else (rows, order, clear values, the schema) is kept
  as it was;
* the new file is written under a new run directory of the table, and all
  of a table's new files replace the old ones in one Iceberg commit (the
  offsets reached are carried over). A crash before the commit leaves the
  table as it was (the new files are orphans the next run removes);
  rerunning the pass finishes the work, and a file already under the
  current key is not rewritten.

The table's earlier snapshots still name the old files (time travel):
they keep values under the old keys until those snapshots are expired.

Values sealed with a stream's own data key (``enc:v3:``) are not touched:
the pass rewraps each stream's key file with the current key instead
(:meth:`~spark_sink.crypto.StreamKeys.rewrap`), which moves all of the
stream's values at once; a forgotten stream has no file and nothing to do.

Values no given key opens are left as they are and counted by the key id
they name: when the report's count is 0 nothing needs the old keys any more.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.crypto import (
    PREFIX,
    PREFIX_STREAM,
    TOKEN_ID_LENGTH,
    UNKNOWN_V1,
    AuditKeyError,
    Sealer,
    StreamKeys,
    is_sealed,
)
from seqkeeper.spark_sink.snapshots import MESSAGE_FAMILIES


@dataclass
class ResealReport:
    """What a pass did and what it could not do."""

    files: int = 0  #: Parquet files looked at
    rewritten: int = 0  #: of which rewritten
    resealed: int = 0  #: values moved to the current key
    left: Counter[str] = field(default_factory=Counter)  #: values still under other keys, by key id
    first_error: str = ""  #: why the first value left could not be opened
    rewrapped: int = 0  #: stream keys rewrapped with the current key

    @property
    def left_total(self) -> int:
        return sum(self.left.values())


def sealed_files(warehouse: Path) -> list[Path]:
    """The Parquet files readers read: the data files of the audit and
    snapshot tables' current snapshots."""
    return [
        Path(p)
        for name in ("audit", "snapshots")
        for p in tables.data_files(tables.load(warehouse, name))
    ]


def reseal_warehouse(
    warehouse: Path,
    sealer: Sealer,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> ResealReport:
    """Reseal every file of :func:`sealed_files`, one commit per table
    (``progress(done, total)`` after each file); the report counts what is
    left under other keys."""
    report = ResealReport()
    # The stream keys first: the one step that needs the old key for them.
    report.rewrapped, left, first = StreamKeys(warehouse, sealer).rewrap()
    report.left.update(left)
    report.first_error = first
    work = []
    for name in ("audit", "snapshots"):
        table = tables.load(warehouse, name)
        if table is not None and table.current_snapshot() is not None:
            work.append(
                (table, tables.committed(table), [t.file for t in table.scan().plan_files()])
            )
    total = sum(len(files) for _, _, files in work)
    done = 0
    progress(0, total)
    for table, base, files in work:
        directory = tables.run_directory(table)
        replaced, added = [], []
        for n, data_file in enumerate(files):
            path = Path(tables.location_path(data_file.file_path))
            target = Path(directory, f"resealed-{n:05d}.parquet")
            if reseal_file(path, sealer, report, target):
                replaced.append(data_file)
                added.append(str(target))
            done += 1
            progress(done, total)
        if added:
            tables.commit(table, base, added, {}, directory, replaced=replaced, next_run=False)
    return report


def reseal_file(
    path: Path, sealer: Sealer, report: ResealReport, target: Path | None = None
) -> bool:
    """Reseal one audit or snapshot file, adding to ``report``; whether it
    changed. The new file goes to ``target`` (default: over ``path``,
    atomically)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    table = parquet.read()
    # Spark writes timestamps as INT96 unless told otherwise: written back
    # in the unit they had, they keep the type readers know.
    int96 = any(
        parquet.schema.column(i).physical_type == "INT96" for i in range(len(parquet.schema))
    )
    report.files += 1
    names = table.column_names
    if not {"topic", "partition", "offset"} <= set(names):
        return False
    contexts = [
        f"{t}:{p}:{o}"
        for t, p, o in zip(
            table["topic"].to_pylist(),
            table["partition"].to_pylist(),
            table["offset"].to_pylist(),
            strict=True,
        )
    ]
    tally = _Tally(sealer, report)
    families = table["family"].to_pylist() if "family" in names else None
    changed = False
    for name in ("value", "data", "decoded", "headers"):
        if name not in names:
            continue
        old = table[name].to_pylist()
        if name == "value":
            new: list[Any] = [tally.value(v, c) for v, c in zip(old, contexts, strict=True)]
        elif name == "headers":
            new = [tally.headers(v, c) for v, c in zip(old, contexts, strict=True)]
        elif name == "data":
            new = [tally.data(v, c) for v, c in zip(old, contexts, strict=True)]
        else:
            fams = families or [None] * len(old)
            new = [tally.decoded(v, c, f) for v, c, f in zip(old, contexts, fams, strict=True)]
        if new != old:
            column = pa.array(new, type=table.schema.field(name).type)
            table = table.set_column(names.index(name), table.schema.field(name), column)
            changed = True
    if not changed:
        return False
    final = target or path
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.reseal")
    pq.write_table(
        table,
        tmp,
        compression="snappy",
        use_deprecated_int96_timestamps=int96,
        coerce_timestamps=None if int96 else "us",
    )
    with open(tmp, "rb") as f:  # on disk before it takes the final name
        os.fsync(f.fileno())
    # Spark (Hadoop's local file system) keeps a checksum of each file beside
    # it and refuses a file that no longer matches; without one it reads the
    # file unchecked. So the checksum goes first.
    final.with_name(f".{final.name}.crc").unlink(missing_ok=True)
    os.replace(tmp, final)
    report.rewritten += 1
    return True


class _Tally:
    """Reseals the tokens of one file's columns, counting into a report."""

    def __init__(self, sealer: Sealer, report: ResealReport) -> None:
        self.sealer = sealer
        self.report = report

    def token(self, token: str, context: bytes) -> str:
        if self.sealer.is_current(token) or token.startswith(PREFIX_STREAM):
            return token  # (a stream key's token moves with its key file)
        try:
            plain = self.sealer.open(token, context)
        except AuditKeyError as e:
            label = (
                token[len(PREFIX) :][:TOKEN_ID_LENGTH] if token.startswith(PREFIX) else UNKNOWN_V1
            )
            self.report.left[label] += 1
            self.report.first_error = self.report.first_error or str(e)
            return token
        self.report.resealed += 1
        return self.sealer.seal(plain, context)

    def value(self, value: bytes | None, ctx: str) -> bytes | None:
        if value is None or not is_sealed(value):
            return value
        return self.token(value.decode("ascii"), b"value:" + ctx.encode()).encode("ascii")

    def headers(self, headers: list[dict[str, Any]] | None, ctx: str) -> Any:
        """An audit row's headers, each value sealed under the row's
        coordinates and its index (:func:`spark_sink.audit.header_context`)."""
        if headers is None:
            return None
        return [
            {"key": h["key"], "value": self.value(h["value"], f"{ctx}:header:{i}")}
            for i, h in enumerate(headers)
        ]

    def data(self, text: str | None, ctx: str) -> str | None:
        """An audit row's ``data`` (JSON text) with its sealed fields moved;
        the text is rewritten only if a field moved."""
        if text is None or "enc:v" not in text:
            return text
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
        new = self.fields(doc, ctx)
        return text if new == doc else orjson.dumps(new).decode()

    def fields(self, node: Any, context: str, path: str = "") -> Any:
        """Mirrors :meth:`Sealer.open_fields`: a token's context is its dotted
        path; a sealed value may hold tokens itself (a marked path under
        another), moved first, as sealing them anew would."""
        if isinstance(node, dict):
            return {
                k: self.fields(v, context, f"{path}.{k}" if path else k) for k, v in node.items()
            }
        if not (isinstance(node, str) and is_sealed(node)) or self.sealer.is_current(node):
            return node
        if node.startswith(PREFIX_STREAM):
            return node
        ctx = f"field:{context}:{path}".encode()
        try:
            inner = orjson.loads(self.sealer.open(node, ctx))
        except AuditKeyError:
            return self.token(node, ctx)  # counted as left
        moved = self.fields(inner, context, path)
        self.report.resealed += 1
        return self.sealer.seal(orjson.dumps(moved), ctx)

    def decoded(self, text: str | None, ctx: str, family: str | None) -> str | None:
        """A snapshot's decoded text, as :func:`spark_sink.snapshots._decoded`
        sealed it: a buffer's message field by field (or whole when it is
        not JSON), other message families whole."""
        if text is None:
            return None
        if is_sealed(text) and family == "buffer":
            return self.token(text, f"text:{ctx}".encode())
        if is_sealed(text) and family in MESSAGE_FAMILIES:
            return self.token(text, f"decoded:{ctx}".encode())
        if family != "buffer" or "enc:v" not in text:
            return text
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
        if not isinstance(doc, dict):
            return text
        new = dict(doc)
        for part in ("data", "payload"):
            if part in doc:
                new[part] = self.fields(doc[part], f"{ctx}:{part}")
        return text if new == doc else orjson.dumps(new).decode()
