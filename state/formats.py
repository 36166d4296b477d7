"""State formats: what layout a partition's state is in, and how a worker
moves it to the layout it writes.

Every partition of a seqkeeper table (the ordered worker's and the command
worker's) carries one marker record, :data:`MARKER` ->
``b"<format>/<oldest reader>"`` (e.g. ``b"4/4"``): the format its state
was last written in, and the oldest format whose workers can still read
it. The marker is an ordinary write of the table, so it is in the changelog
too: a restore or a standby gets it with the state it describes. Its key
starts with ``_``, a byte no family of either table starts with
(:mod:`state.codecs`, :mod:`state.command_records`), so it never names a user key.

A worker knows the formats in :data:`FORMATS` and reads up to the newest
(:data:`NEWEST`); it writes :data:`CURRENT`, the newest too except in a
release that prepares readers (below). For each partition it is assigned
(:func:`open_partition`):

* no marker: the state is format 1 (written before markers existed);
* a marker of a format the worker knows, or a newer one whose oldest reader
  it is: readable;
* a newer format whose oldest reader is newer than :data:`NEWEST`:
  refused (:class:`NewerState`, one line naming both formats). The same
  check runs on every marker record a restore or a standby applies
  (:func:`check_record`) and on the local databases at start.

State of an older format is migrated, one format at a time, by each newer
format's :attr:`Format.migrate`, and only then is the marker written: a
crash during a migration leaves the old marker (or none), so the next
assignment migrates again; each migration must therefore be idempotent
(safe to run again over a part of its own work).

Adding a format is one entry at the end of :data:`FORMATS`: its number
(the last + 1), what changed, the oldest format that can read it (its own
number when an older worker would misread it, e.g. a new record family; an
older number when older workers read it correctly, e.g. a new optional
field they ignore) and the migration from the previous format (``None`` when
state of the previous format is read as it is). Workers that write format N
must only be rolled out after every worker runs a release that reads
format N (knows it, or knows N's oldest reader): when N's oldest reader is N
itself, ship first a release with the entry and ``CURRENT = FORMATS[-2]``
(it reads format N and still writes N - 1), then the release that writes
it (docs/operations.md, "Upgrades"). The code that reads format N must
therefore come with its entry, the code that writes it may wait; and format
N must read what a release writing N - 1 adds to state marked N (during the
roll, both write the same partitions in turn), such as a key without the
new family's record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from seqkeeper.state.base import FORMAT_MARKER, PartitionStore
from seqkeeper.state.command_records import migrate_old_layout

#: The marker's key in every partition of every seqkeeper table.
MARKER = FORMAT_MARKER


@dataclass(frozen=True)
class Format:
    """One state format: its number, what changed from the previous one,
    the oldest format whose workers read it, and how state of the previous
    format becomes this one (``None``: read as it is)."""

    number: int
    changed: str
    oldest_reader: int
    migrate: Callable[[PartitionStore, int], object] | None = None


#: Every format this release knows, oldest first (it writes CURRENT).
FORMATS: tuple[Format, ...] = (
    # (unmarked state is format 1, even when the release before markers,
    # which read both receipt layouts, wrote tenant-keyed receipts into it:
    # the migration moves what is left of the old layout, if anything)
    Format(1, "no marker: command receipts keyed by bare messageId", 1),
    Format(
        2,
        "command receipts and their indexes keyed by tenant and messageId "
        "(the layout without tenants moved); the state format marker",
        # a release writing format 1 looks for receipts under the bare
        # messageId only: it would miss every moved one and apply a copy again
        2,
        migrate_old_layout,
    ),
    Format(
        3,
        "forgotten-key markers (family F, key retention): a key forgotten while idle "
        "keeps its next expected sequence for SEQKEEPER_FORGOTTEN_KEY_RETENTION",
        # a release writing format 2 does not look for the markers: a copy of
        # a forgotten key's message would start the key again and be emitted
        3,
        # (format 2 state is format 3 state without markers: read as it is)
    ),
    Format(
        4,
        "seen ids' FIFO in pages (family g; the open page in the key state) instead of "
        "one p record per id",
        # a release writing format 3 looks for each seen id's FIFO entry in a
        # p record: it would believe no id remembered since, and pass copies on
        4,
        # (format 3 state is read as it is: a key state of the older layout
        # says its ids are in p records, which are read and deleted, never
        # written, as its ids are forgotten)
    ),
)
#: The newest format this release reads (refused: state whose oldest reader
#: is newer).
NEWEST = FORMATS[-1]
#: The format this release migrates to, marks and writes: the newest, but
#: for a release that prepares the readers of a format old releases cannot
#: read (``FORMATS[-2]``: it reads the new format and still writes the
#: previous one; docs/operations.md, "Upgrades").
CURRENT = NEWEST


class UnreadableState(Exception):
    """State this release does not read: the message, one line, says why."""


class NewerState(UnreadableState):
    """State written in a format this release cannot read."""

    def __init__(self, where: str, found: int, oldest_reader: int) -> None:
        self.where, self.found, self.oldest_reader = where, found, oldest_reader
        super().__init__(
            f"{where} is in state format {found}, readable by format {oldest_reader} and "
            f"newer; this release reads formats up to {NEWEST.number}: run a release that "
            f"reads format {oldest_reader} (docs/operations.md, Upgrades)"
        )


def encode_marker(fmt: Format | None = None) -> bytes:
    """The marker of ``fmt`` (default: :data:`CURRENT`)."""
    fmt = fmt or CURRENT
    return f"{fmt.number}/{fmt.oldest_reader}".encode()


def decode_marker(raw: bytes | None) -> tuple[int, int]:
    """(format, oldest reader) of a marker value; no marker: format 1."""
    if raw is None:
        return 1, 1
    try:
        number, _, oldest = raw.decode("ascii").partition("/")
        found, reader = int(number), int(oldest or number)
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"not a state format marker: {raw!r}") from None
    if found < 1 or not 1 <= reader <= found:
        raise ValueError(f"not a state format marker: {raw!r}")
    return found, reader


class BadMarker(UnreadableState):
    """State whose format marker is not one any release writes: damaged, or
    written by something else into the changelog or the local state. It is
    not read (guessing its format could misread every record)."""

    def __init__(self, where: str, raw: bytes) -> None:
        self.where, self.raw = where, raw
        super().__init__(
            f"{where} has a state format marker no seqkeeper release writes ({raw[:40]!r}): "
            f"the state is damaged or not seqkeeper's, and is not read"
        )


def readable(raw: bytes | None, where: str) -> int:
    """The format of state marked ``raw``; :class:`NewerState` if this
    release cannot read it, :class:`BadMarker` if ``raw`` is no marker."""
    try:
        found, reader = decode_marker(raw)
    except ValueError:
        assert raw is not None
        raise BadMarker(where, raw) from None
    if reader > NEWEST.number:
        raise NewerState(where, found, reader)
    return found


def check_record(key: bytes, value: bytes | None, where: str) -> None:
    """A changelog record about to be applied: refuse a marker of a format
    this release cannot read (any other record passes)."""
    if key == MARKER and value is not None:
        readable(value, where)


def migrations(found: int) -> list[Format]:
    """The formats state of format ``found`` goes through to :data:`CURRENT`."""
    return [f for f in FORMATS if found < f.number <= CURRENT.number]


def open_partition(store: PartitionStore, partition: int, where: str) -> int:
    """Make ``partition``'s state readable: refuse a newer format, migrate
    an older one one format at a time and then mark it :data:`CURRENT`
    (module docstring). The format it was in."""
    raw = store.get(partition, MARKER)
    found = readable(raw, where)
    if found >= CURRENT.number:
        return found  # (a newer marker this release reads is kept as it is)
    for fmt in migrations(found):
        if fmt.migrate is not None:
            fmt.migrate(store, partition)
    store.put(partition, MARKER, encode_marker())
    return found


def open_partitions(store: PartitionStore, partitions: Iterable[int], table: str) -> dict[int, int]:
    """:func:`open_partition` for each of ``partitions``: the format each was in."""
    return {p: open_partition(store, p, f"{table} partition {p}") for p in sorted(partitions)}
