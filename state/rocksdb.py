"""A :class:`~state.base.PartitionStore` over a Faust table on RocksDB.

Reads and writes go straight to the partition's RocksDB database (rocksdict,
raw mode). Every write is also queued, in order, for the table's changelog
topic (same partition); :meth:`FaustRocksStore.flush` sends the queue as
record batches (:mod:`state.producer`), waits for the acknowledgements, and
records the persisted changelog offset per partition as Faust's own
changelog path does, so Faust's recovery (from the changelog, or from local
RocksDB up to the persisted offset) works unchanged. Going around
``Table.__setitem__`` and ``Table.send_changelog`` gives what Faust's table
API does not: writes outside of an event (timers), no per-access mapping
overhead, and no per-record publish (a future and callbacks per write).

The outbox cycle (:mod:`topologies.shell`) flushes before it produces any
output, so no output is ever on the broker before the state behind it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Any

from faust.types import TP

from state.base import Change
from state.producer import BatchProducer, Record

#: Where :meth:`FaustRocksStore.mark` keeps its value in a partition's
#: RocksDB (outside every family's prefix; never changelogged).
MARK_KEY = b"__seqkeeper\x00mark__"
FAUST_OFFSET_KEY = b"__faust\x00offset__"
_OFFSET = struct.Struct(">q")


def _no_wal() -> Any:
    from rocksdict import WriteOptions

    options = WriteOptions()
    options.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; the stub is wrong
    return options


#: Local writes skip RocksDB's write-ahead log (half the cost of a put): the
#: local state is a copy of the changelog. After a crash it is discarded and
#: rebuilt anyway (seqkeeper.worker); a clean stop flushes the memtables as
#: RocksDB closes.
_NO_WAL = _no_wal()


class FaustRocksStore:
    def __init__(self, table: Any, producer: BatchProducer) -> None:
        self.table = table
        self.name: str = table.name
        self.producer = producer
        self._queued: dict[int, list[Record]] = {}
        self._marked: set[int] = set()
        self._tuned: dict[int, int] = {}  # partition -> id of the DB tuned
        self._open: dict[int, Any] | None = None  # Faust's open DBs (its own dict)

    def take_writes(self) -> dict[int, list[Record]]:
        """The changelog records of the writes made so far, per partition
        (taken: the next call starts empty)."""
        queued, self._queued = self._queued, {}
        return queued

    async def flush(self, writes: dict[int, list[Record]]) -> None:
        """Send taken writes to the changelog; return once all are durable."""
        if not writes:
            return
        topic: str = self.table.changelog_topic.get_topic_name()
        last = await self.producer.send({(topic, p): items for p, items in writes.items()})
        for (_, partition), offset in last.items():
            self.table.data.set_persisted_offset(TP(topic, partition), offset)

    def _db(self, partition: int) -> Any:
        opened = self._open
        if opened is None:
            opened = self._open = self.table.data._dbs
        db = opened.get(partition)
        if db is not None and self._tuned.get(partition) == id(db):
            return db
        db = self.table.data._db_for_partition(partition)
        # Only the id is kept: Faust closes a revoked partition's DB by
        # dropping its last reference, and a DB kept open here would hold
        # RocksDB's lock when the partition comes back (a reused id costs at
        # most the write-ahead log on a reopened DB).
        if id(db) != self._tuned.get(partition):  # opened (again) by Faust
            db.set_write_options(_NO_WAL)
            self._tuned[partition] = id(db)
        return db

    def get(self, partition: int, key: bytes) -> bytes | None:
        value: bytes | None = self._db(partition).get(key)
        return value

    def _persisted(self, partition: int) -> int:
        tp = TP(self.table.changelog_topic.get_topic_name(), partition)
        offset = self.table.data.persisted_offset(tp)
        return -1 if offset is None else int(offset)

    def mark(self, partition: int, value: bytes) -> None:
        """Keep ``value`` locally with the changelog offset the partition's
        state reflects; a later write here, or a changelog record replayed
        into the state (it moves that offset), voids it."""
        self._db(partition).put(MARK_KEY, _OFFSET.pack(self._persisted(partition)) + value)
        self._marked.add(partition)

    def take_mark(self, partition: int) -> bytes | None:
        db = self._db(partition)
        raw: bytes | None = db.get(MARK_KEY)
        if raw is None:
            return None
        db.delete(MARK_KEY)
        self._marked.discard(partition)
        (offset,) = _OFFSET.unpack_from(raw)
        return raw[_OFFSET.size :] if offset == self._persisted(partition) else None

    def _unmark(self, partition: int) -> None:
        self._db(partition).delete(MARK_KEY)
        self._marked.discard(partition)

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        self.write(partition, ((key, value, ()),))

    def delete(self, partition: int, key: bytes) -> None:
        self.write(partition, ((key, None, ()),))

    def write(self, partition: int, changes: Sequence[Change]) -> None:
        """Apply ``changes`` to the partition's DB and queue them for its
        changelog (a write voids the mark)."""
        if self._marked and partition in self._marked:
            self._unmark(partition)
        queue = self._queued.get(partition)
        if queue is None:
            queue = self._queued[partition] = []
        db = self._db(partition)
        queue.extend(changes)
        put, delete = db.put, db.delete
        for key, value, _ in changes:
            if value is None:
                delete(key)
            else:
                put(key, value)

    def seek(self, partition: int, start: bytes, prefix: bytes) -> tuple[bytes, bytes] | None:
        it = self._db(partition).iter()
        it.seek(start)
        if it.valid():
            key: bytes = it.key()
            if key.startswith(prefix):
                return key, it.value()
        return None

    def items(
        self, partition: int, prefix: bytes = b"", start: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        it = self._db(partition).iter()
        it.seek(max(prefix, start))
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(prefix):
                return
            if key != FAUST_OFFSET_KEY and key != MARK_KEY:
                yield key, it.value()
            it.next()
