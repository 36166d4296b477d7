"""The state store interface: raw bytes, addressed by partition and key.

Writes name their partition explicitly (the input partition the key belongs
to), so timers can change state outside of an event, and a store can batch.
Engines: :mod:`state.memory` (tests, no broker) and :mod:`state.rocksdb`
(a Faust table on RocksDB, changelogged).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

#: The key of each partition's state format marker (:mod:`state.formats`):
#: ``_`` starts no family of either table, so it never names a user's key.
FORMAT_MARKER = b"__seqkeeper\x00state_format__"

#: One write: (key, value, no headers); a ``None`` value deletes the key.
#: The same tuple is the changelog record a changelogged store produces.
Change = tuple[bytes, bytes | None, tuple[()]]

Header = tuple[str, bytes | None]  # (a null value: None, as Kafka allows)
Headers = Sequence[Header] | None
#: A record as produced to a known topic-partition: key, value, headers.
Record = tuple[bytes | None, bytes | None, Sequence[Header]]
#: A record addressed by a name (a role the topology knows, or a topic
#: name): name, key, value, headers (``None``: none). A plain tuple: the hot
#: path makes two per message, and the garbage collector stops tracking a
#: tuple of strings and bytes (never a dataclass or a tuple subclass: an
#: outbox of many such records would be traversed by every collection until
#: its cycle took it).
Out = tuple[str, bytes | None, bytes | None, Headers]


class ChangelogSink(Protocol):
    """Where a changelogged store sends its changelog records
    (:class:`seqkeeper.adapter.producer.BatchProducer`)."""

    async def send(
        self, records: Mapping[tuple[str, int], Iterable[Record]]
    ) -> dict[tuple[str, int], int]:
        """Send each partition's records in order and wait for their
        acknowledgements; the offset of each partition's last record."""
        ...


class LocalTable(Protocol):
    """A changelogged table whose partitions are local RocksDB databases,
    as a store needs it (:class:`seqkeeper.adapter.tables.FaustLocalTable` over a
    Faust table)."""

    name: str

    @property
    def changelog_topic(self) -> str:
        """The changelog topic's name."""
        ...

    def open_dbs(self) -> Mapping[int, Any]:
        """The partitions' open databases (a live view: a database leaves it
        when the table closes it)."""
        ...

    def db_for(self, partition: int) -> Any:
        """The partition's database (``rocksdict.Rdict``), opened if needed."""
        ...


class PartitionStore(Protocol):
    name: str

    def get(self, partition: int, key: bytes) -> bytes | None: ...

    def put(self, partition: int, key: bytes, value: bytes) -> None: ...

    def delete(self, partition: int, key: bytes) -> None: ...

    def write(self, partition: int, changes: Sequence[Change]) -> None:
        """Apply ``changes`` in order (one step's writes: one call)."""
        ...

    def place(self, partition: int) -> object:
        """Where the partition's writes stand now: :meth:`write_placed` may
        put writes there later, as if they had been made now."""
        ...

    def write_placed(
        self, partition: int, placed: Sequence[tuple[object, Sequence[Change]]]
    ) -> None:
        """Apply each ``changes`` at its place (from :meth:`place`; at one
        place, in the order placed) among the writes not taken for the
        changelog yet: a crash keeps a prefix of the changelog with them
        where they were placed. A place whose writes were taken already
        stands for the start of the current ones. (The caller's part: no
        write made after the place touches the keys placed, or the
        changelog and reads would not agree on which write is last.)"""
        ...

    def sync(self) -> None:
        """Write what waits in memory to the local state, and forget what is
        known about it (Faust may recover or close it next: a rebalance)."""
        ...

    def mark(self, partition: int, value: bytes) -> None:
        """Keep ``value`` with the partition's local state only (never
        changelogged) until the next write: a description of the state as it
        is now, for the next start-up (see :meth:`take_mark`)."""
        ...

    def take_mark(self, partition: int) -> bytes | None:
        """The value of :meth:`mark` if nothing changed the partition's state
        since it was written (no write here, no changelog record replayed
        into it), else ``None``; the mark is gone afterwards either way."""
        ...

    def seek(self, partition: int, start: bytes, prefix: bytes) -> tuple[bytes, bytes] | None:
        """The first entry with key >= ``start`` that starts with ``prefix``."""
        ...

    def items(
        self, partition: int, prefix: bytes = b"", start: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        """The entries of a partition whose key starts with ``prefix``, in key
        order, from the first key ``>= start``."""
        ...
