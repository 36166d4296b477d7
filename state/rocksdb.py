"""A :class:`~state.base.PartitionStore` over a Faust table on RocksDB.

Reads and writes go straight to the partition's RocksDB database (rocksdict,
raw mode). Every write is also queued, in order, for the table's changelog
topic (same partition); :meth:`FaustRocksStore.flush` sends the queue as
record batches (:mod:`seqkeeper.adapter.producer`), waits for the acknowledgements, and
records the persisted changelog offset per partition as Faust's own
changelog path does, so Faust's recovery (from the changelog, or from local
RocksDB up to the persisted offset) works unchanged. Going around
``Table.__setitem__`` and ``Table.send_changelog`` gives what Faust's table
API does not: writes outside of an event (timers), no per-access mapping
overhead, and no per-record publish (a future and callbacks per write).

The commit protocol (:mod:`seqkeeper.runtime.task`) flushes before it produces any
output, so no output is ever on the broker before the state behind it.

Local writes are deferred (``deferred=`` a family's prefix byte): they go
to the changelog queue at once, to RocksDB later, sorted, in one write
batch per partition (RocksDB inserts a batch of sorted keys more cheaply
than single puts at random keys). Writes of most families are
written when the outbox cycle takes the changelog records
(:meth:`FaustRocksStore.take_writes`). Those of the ``deferred`` family (the
reorder buffer) wait longer (:meth:`FaustRocksStore.sync`, or when
:data:`DEFERRED_KEPT` wait): an entry put and deleted meanwhile (a message
released and confirmed before the family's writes are due) never costs a RocksDB write, and
while a partition's DB holds no entry of the family (checked when the DB
opens), a lookup missing in memory needs no RocksDB read either. Reads see
every waiting write. The persisted changelog offset (where Faust's recovery
resumes) is only advanced while nothing of the partition waits, so the
local state never claims more than it holds: a stop that skipped
:meth:`~FaustRocksStore.sync` costs a longer recovery, never a lost write.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from seqkeeper.state.base import Change, ChangelogSink, LocalTable, Record

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


#: Local writes skip RocksDB's write-ahead log, a second write of every
#: put: the local state is a copy of the changelog. After a crash it is discarded and
#: rebuilt anyway (seqkeeper.worker); a clean stop flushes the memtables as
#: RocksDB closes.
_NO_WAL = _no_wal()

#: A bloom filter over the whole keys in each memtable (RocksDB's filters
#: are per SST file): most lookups are seen-id misses, and without one a
#: miss searches the memtable's skiplist. Its memory: a tenth of the write
#: buffer per memtable. Set when a DB opens (a mutable option).
MEMTABLE_BLOOM = {
    "memtable_prefix_bloom_size_ratio": "0.1",
    "memtable_whole_key_filtering": "true",
}

#: Writes of the deferred family kept in memory at most (then the oldest
#: half is written). A buffer entry waits for its gap and then for its
#: confirmation, so the cap is set above what waits at once under load: a
#: lower one writes most buffer entries to RocksDB only to delete them there
#: again. Each waiting entry costs a dict entry beyond its message (whose
#: bytes the outbox and ``Stores`` share).
DEFERRED_KEPT = 200_000
#: Keys of the deferred family known to be in a partition's DB at most
#: (beyond, lookups that miss in memory read RocksDB).
IN_DB_KNOWN = 200_000
_ABSENT = object()


class Writes:
    """A partition's changelog records until an outbox cycle takes them, as
    two columns: lists of bytes add nothing for the garbage collector to
    examine, where a list of ``(key, value, headers)`` tuples would keep a
    tracked tuple per write until the cycle takes it."""

    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes | None] = []

    def records(self) -> Iterator[Record]:
        """The records in write order (no headers)."""
        return zip(self.keys, self.values, itertools.repeat(()))


class FaustRocksStore:
    """``deferred``: the key prefix (one byte) whose local writes wait in
    memory (see the module docstring); ``None``: every write goes through."""

    def __init__(
        self,
        table: LocalTable,
        producer: ChangelogSink,
        deferred: bytes | None = None,
        keep: int = DEFERRED_KEPT,
    ) -> None:
        self.table = table
        self.name: str = table.name
        self.producer = producer
        self.keep = keep
        self._family = -1 if deferred is None else deferred[0]
        self._waiting: dict[int, dict[bytes, bytes | None]] = {}  # the family's writes
        self._local: dict[int, dict[bytes, bytes | None]] = {}  # the others' writes
        self._waiting_count = 0
        #: per partition, the deferred family's keys in its DB, where known
        #: (the DB had none when it opened, and no more than IN_DB_KNOWN since);
        #: forgotten by sync(), so a set here is that of the DB open now
        self._in_db: dict[int, set[bytes]] = {}
        self._offsets: dict[int, int] = {}  # persisted offsets held back while writes wait
        self._queued: dict[int, Writes] = {}
        self._marked: set[int] = set()
        self._tuned: dict[int, int] = {}  # partition -> id of the DB tuned
        self._open: Mapping[int, Any] | None = None  # the open DBs (the table's live view)

    def take_writes(self) -> dict[int, Writes]:
        """The changelog records of the writes made so far, per partition
        (taken: the next call starts empty); their local writes, except the
        deferred family's, go to RocksDB now (one sorted batch per partition)."""
        queued, self._queued = self._queued, {}
        for partition in list(self._local):
            self._write_local(partition)
        return queued

    def _write_local(self, partition: int) -> None:
        """Write the partition's deferred writes of the other families."""
        local = self._local.pop(partition, None)
        if local:
            self._write_sorted(self._db(partition), local)

    @staticmethod
    def _write_sorted(db: Any, entries: dict[bytes, bytes | None]) -> None:
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        for key in sorted(entries):
            value = entries[key]
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        db.write(batch, _NO_WAL)

    async def flush(self, writes: dict[int, Writes]) -> None:
        """Send taken writes to the changelog; return once all are durable."""
        if not writes:
            return
        topic = self.table.changelog_topic
        self.persisted(
            await self.producer.send({(topic, p): w.records() for p, w in writes.items()})
        )

    @property
    def changelog_topic(self) -> str:
        return str(self.table.changelog_topic)

    def persisted(self, last: Mapping[tuple[str, int], int]) -> None:
        """The changelog holds the writes up to these offsets (per (changelog
        topic, partition); other topics are ignored): the local state may
        say so (an exactly-once cycle calls it once its transaction committed)."""
        topic = self.table.changelog_topic
        for (written, partition), offset in last.items():
            if written != topic:
                continue
            if self._waiting.get(partition):
                self._offsets[partition] = offset  # written with the waiting writes
            else:
                self._offsets.pop(partition, None)
                self.table.set_persisted_offset(partition, offset)

    def sync(self) -> None:
        """Write the deferred writes to the local RocksDB (and the persisted
        offsets held back), and forget which DBs hold no deferred entry:
        before a rebalance or stop lets Faust close or recover a DB."""
        for partition in list(self._local):
            self._write_local(partition)
        for partition in set(self._waiting) | set(self._offsets):
            self._write_waiting(partition)
        self._tuned.clear()  # each DB is looked at again when next used
        self._in_db.clear()  # (and what it holds: a rebalance may replace it)

    def _write_waiting(self, partition: int, oldest: int | None = None) -> None:
        """Write the partition's waiting writes (or its ``oldest`` ones)."""
        waiting = self._waiting.get(partition)
        if waiting:
            db = self._db(partition)  # (first: looking at a DB may start its in_db)
            in_db = self._in_db.get(partition)
            keys = list(waiting if oldest is None else itertools.islice(waiting, oldest))
            written = {key: waiting.pop(key) for key in keys}
            if in_db is not None:
                for key, value in written.items():
                    if value is None:
                        in_db.discard(key)
                    else:
                        in_db.add(key)
            self._write_sorted(db, written)
            self._waiting_count -= len(keys)
            if in_db is not None and len(in_db) > IN_DB_KNOWN:
                del self._in_db[partition]  # from now on RocksDB answers
        if waiting:
            return  # the persisted offset waits for the rest
        self._waiting.pop(partition, None)
        offset = self._offsets.pop(partition, None)
        if offset is not None:
            self.table.set_persisted_offset(partition, offset)

    def _db(self, partition: int) -> Any:
        opened = self._open
        if opened is None:
            opened = self._open = self.table.open_dbs()
        db = opened.get(partition)
        if db is not None and self._tuned.get(partition) == id(db):
            return db
        db = self.table.db_for(partition)
        # Only the id is kept: Faust closes a revoked partition's DB by
        # dropping its last reference, and a DB kept open here would hold
        # RocksDB's lock when the partition comes back (a reused id costs at
        # most the write-ahead log on a reopened DB).
        if id(db) != self._tuned.get(partition):  # opened (again) by Faust
            db.set_write_options(_NO_WAL)
            db.set_options(MEMTABLE_BLOOM)
            self._tuned[partition] = id(db)
            self._in_db.pop(partition, None)
            if self._family >= 0:
                it = db.iter()
                it.seek(bytes((self._family,)))
                if not it.valid() or it.key()[0] != self._family:
                    self._in_db[partition] = set()
        return db

    def get(self, partition: int, key: bytes) -> bytes | None:
        if key[0] == self._family:
            waiting = self._waiting.get(partition)
            if waiting is not None:
                found = waiting.get(key, _ABSENT)
                if found is not _ABSENT:
                    return found  # type: ignore[return-value]
            in_db = self._in_db.get(partition)  # (only for a DB looked at since sync)
            if in_db is not None and key not in in_db:
                return None
            deferred: bytes | None = self._db(partition).get(key)
            return deferred
        local = self._local.get(partition)
        if local is not None:
            found = local.get(key, _ABSENT)
            if found is not _ABSENT:
                return found  # type: ignore[return-value]
        value: bytes | None = self._db(partition).get(key)
        return value

    def _persisted(self, partition: int) -> int:
        offset = self.table.persisted_offset(partition)
        return -1 if offset is None else int(offset)

    def mark(self, partition: int, value: bytes) -> None:
        """Keep ``value`` locally with the changelog offset the partition's
        state reflects; a later write here, or a changelog record replayed
        into the state (it moves that offset), voids it."""
        self._write_local(partition)
        self._write_waiting(partition)
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
            queue = self._queued[partition] = Writes()
        keys, values = queue.keys, queue.values
        family = self._family
        if family < 0:
            db = self._db(partition)
            put, delete = db.put, db.delete
            for key, value, _ in changes:
                keys.append(key)
                values.append(value)
                if value is None:
                    delete(key)
                else:
                    put(key, value)
            return
        waiting = self._waiting.get(partition)
        if waiting is None:
            waiting = self._waiting[partition] = {}
        local = self._local.get(partition)
        if local is None:
            local = self._local[partition] = {}
        before = len(waiting)
        in_db = self._in_db.get(partition)
        for key, value, _ in changes:
            keys.append(key)
            values.append(value)
            if key[0] != family:
                local[key] = value
            elif value is None and in_db is not None and key not in in_db:
                waiting.pop(key, None)  # nothing in RocksDB to delete
            else:
                waiting[key] = value
        if len(local) > self.keep:
            self._write_local(partition)
        self._waiting_count += len(waiting) - before
        if self._waiting_count > self.keep:  # the oldest half of each partition's
            for waiting_partition, entries in list(self._waiting.items()):
                self._write_waiting(waiting_partition, len(entries) // 2 + 1)

    def seek(self, partition: int, start: bytes, prefix: bytes) -> tuple[bytes, bytes] | None:
        self._write_local(partition)
        if not prefix or prefix[0] == self._family:
            self._write_waiting(partition)
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
        self._write_local(partition)
        if not prefix or prefix[0] == self._family:
            self._write_waiting(partition)
        it = self._db(partition).iter()
        it.seek(max(prefix, start))
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(prefix):
                return
            if key != FAUST_OFFSET_KEY and key != MARK_KEY:
                yield key, it.value()
            it.next()
