"""A :class:`~state.base.PartitionStore` over a Faust table on RocksDB.

Every write is queued, in order, for the table's changelog topic (same
partition) and kept in memory; :meth:`LayeredPartitionStore.flush` sends the queue
as record batches (:mod:`seqkeeper.adapter.producer`) and waits for the
acknowledgements. Going around ``Table.__setitem__`` and
``Table.send_changelog`` gives what Faust's table API does not: writes
outside of an event (timers), no per-access mapping overhead, and no
per-record publish (a future and callbacks per write).

**RocksDB holds only what the changelog holds.** A write reaches the
partition's RocksDB only once the changelog acknowledged it (under
exactly-once: once its transaction committed), in one ``WriteBatch`` with
the changelog offset it reflects (Faust's ``__faust\0offset__``, where
Faust's recovery resumes). So at any crash, the local database plus the
changelog records after its offset is exactly the changelog's state, and a
restart replays only that tail (Kafka Streams' KIP-892 rule; Quix Streams
writes its changelog offset in the state's batch too). Until then, writes
are layers that every read sees, newest first:

1. the writes since the last take (the current cycle);
2. the taken cycles whose changelog writes are in flight, newest first
   (at most one under at-least-once, two under exactly-once:
   :mod:`seqkeeper.runtime.task`);
3. committed writes of the ``deferred`` family (a family's prefix byte: the
   reorder buffer), which wait longer: an entry put and deleted meanwhile (a
   message released and confirmed before it is due) never costs a RocksDB
   write, and while a partition's DB holds no entry of the family (checked
   when the DB opens), a lookup missing in memory needs no RocksDB read;
4. RocksDB.

When a cycle commits (:meth:`LayeredPartitionStore.committed`), each partition's
writes of the other families go to RocksDB as one sorted batch (RocksDB
inserts a batch of sorted keys more cheaply than single puts). The offset
goes with them only when no committed deferred write waits; else it is held
back, and the waiting writes go with it at the next :meth:`~LayeredPartitionStore.sync`,
or once the held-back offset is :data:`CHECKPOINT_RECORDS` ahead (the bound
on the tail a restart replays), or when :data:`DEFERRED_KEPT` wait. The
write-ahead log stays on (not synced): without it a ``kill -9`` loses the
memtables, and the offset with them.

Under exactly-once (``atomic``) a taken cycle's records commit in one
transaction with its outputs, so only a key's last write of the cycle is
sent, and not even that when it deletes a key that held nothing before the
cycle: a key state costs one record per cycle, and a reorder-buffer entry
put and confirmed in one cycle none.
"""

from __future__ import annotations

import itertools
import logging
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any

from seqkeeper.state.base import Change, ChangelogSink, LocalTable, Record
from seqkeeper.state.formats import MARKER, check_record

#: Where :meth:`LayeredPartitionStore.mark` keeps its value in a partition's
#: RocksDB (outside every family's prefix; never changelogged).
MARK_KEY = b"__seqkeeper\x00mark__"
#: Faust's key for the changelog offset a partition's DB holds everything
#: up to (``faust.stores.rocksdb.Store.offset_key``; its value the offset in
#: decimal ASCII), written here in the same batch as the data it covers.
FAUST_OFFSET_KEY = b"__faust\x00offset__"
#: Set in every DB this store's rule applies to (:meth:`LayeredPartitionStore.adopt`):
#: its offset covers what it holds. A DB without it that holds state was
#: written by a version that wrote RocksDB before the changelog acknowledged
#: the writes (:mod:`seqkeeper.state.integrity` discards it after an
#: unclean stop). (Local only, and not the state's layout: that is the
#: changelogged marker of :mod:`seqkeeper.state.formats`.)
FORMAT_KEY = b"__seqkeeper\x00format__"
FORMAT = b"1"
_OFFSET = struct.Struct(">q")
#: Keys of a partition's DB that hold no state.
META_KEYS = frozenset({MARK_KEY, FAUST_OFFSET_KEY, FORMAT_KEY})

#: A bloom filter over the whole keys in each memtable (RocksDB's filters
#: are per SST file): most lookups are seen-id misses, and without one a
#: miss searches the memtable's skiplist. Its memory: a tenth of the write
#: buffer per memtable. Set when a DB opens (a mutable option).
MEMTABLE_BLOOM = {
    "memtable_prefix_bloom_size_ratio": "0.1",
    "memtable_whole_key_filtering": "true",
}

#: Committed writes of the deferred family kept in memory at most (then the
#: oldest half is written). A buffer entry waits for its gap and then for
#: its confirmation, so the cap is set above what waits at once under load:
#: a lower one writes most buffer entries to RocksDB only to delete them
#: there again. Each waiting entry costs a dict entry beyond its message
#: (whose bytes the outbox and ``Stores`` share).
DEFERRED_KEPT = 200_000
#: Keys of the deferred family known to be in a partition's DB at most
#: (beyond, lookups that miss in memory read RocksDB).
IN_DB_KNOWN = 200_000
#: Changelog records a partition's DB offset may trail its acknowledged
#: offset by while deferred writes wait (then they are written with it): a
#: restart replays at most this many records per partition beyond the
#: cycles in flight (Kafka Streams checkpoints after 10,000 under
#: at-least-once). Writing sooner writes more buffer entries that a
#: confirmation would have deleted in memory.
CHECKPOINT_RECORDS = 20_000
_ABSENT = object()
log = logging.getLogger("seqkeeper.state")

Layer = dict[bytes, bytes | None]


def encode_offset(offset: int) -> bytes:
    """The value of :data:`FAUST_OFFSET_KEY`, as Faust writes and reads it."""
    return str(offset).encode()


def apply_changelog(
    db_for: Callable[[int], Any], records: Iterable[tuple[int, int, bytes, bytes | None]]
) -> dict[int, int]:
    """Apply changelog records ``(partition, offset, key, value)`` to their
    partitions' DBs: per partition one ``WriteBatch`` of its records in
    order and the offset of the last (and the format key: a standby's DB is
    never adopted), so that a crash keeps either both or neither (Faust's
    own apply path writes the offset in a separate put). The last offset
    applied, per partition. A state format marker this release cannot read
    (or no marker at all) raises
    :class:`~seqkeeper.state.formats.UnreadableState` before anything
    of the call is written."""
    from rocksdict import WriteBatch

    batches: dict[int, Any] = {}
    last: dict[int, int] = {}
    for partition, offset, key, value in records:
        if key == MARKER:  # (one comparison per record: only restores and standbys pay it)
            check_record(key, value, f"changelog partition {partition} at offset {offset}")
        batch = batches.get(partition)
        if batch is None:
            batch = batches[partition] = WriteBatch(raw_mode=True)
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
        if offset > last.get(partition, -1):
            last[partition] = offset
    for partition, batch in batches.items():
        batch.put(FAUST_OFFSET_KEY, encode_offset(last[partition]))
        batch.put(FORMAT_KEY, FORMAT)
        db_for(partition).write(batch)
    return last


def reset_db(db: Any) -> None:
    """Empty an open partition DB in one batch (its state, offset and mark),
    keeping the format key: what a rebuild from the changelog starts from."""
    from rocksdict import WriteBatch

    it = db.iter()
    it.seek_to_last()
    if not it.valid():
        return
    last: bytes = it.key()
    del it
    batch = WriteBatch(raw_mode=True)
    batch.delete_range(b"", last)
    batch.delete(last)
    batch.put(FORMAT_KEY, FORMAT)
    db.write(batch)


class Writes:
    """A partition's changelog records until an outbox cycle takes them, as
    two columns: lists of bytes add nothing for the garbage collector to
    examine, where a list of ``(key, value, headers)`` tuples would keep a
    tracked tuple per write until the cycle takes it. ``placed``: writes
    that stand before the record at an index (:meth:`LayeredPartitionStore.write_placed`),
    merged into the columns once, when the records are read."""

    __slots__ = ("keys", "values", "placed")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes | None] = []
        self.placed: list[tuple[int, Sequence[Change]]] | None = None

    def records(self) -> Iterator[Record]:
        """The records in write order (no headers)."""
        if self.placed is not None:
            self._merge()
        return zip(self.keys, self.values, itertools.repeat(()))

    def _merge(self) -> None:
        """The placed writes into the columns (by index, those at one index
        in the order they were placed), by slices: no Python step per record."""
        placed, self.placed = self.placed or [], None
        placed.sort(key=itemgetter(0))  # (stable)
        old_keys, old_values = self.keys, self.values
        keys: list[bytes] = []
        values: list[bytes | None] = []
        start = 0
        for index, changes in placed:
            keys += old_keys[start:index]
            values += old_values[start:index]
            start = index
            for key, value, _ in changes:
                keys.append(key)
                values.append(value)
        keys += old_keys[start:]
        values += old_values[start:]
        self.keys, self.values = keys, values


class Cycle(dict[int, Writes]):
    """What one take took: its changelog records per partition (the dict),
    and its local writes, which wait in memory until the cycle is committed
    (:meth:`LayeredPartitionStore.committed`): ``local`` of the other families,
    ``fresh`` of the deferred one, per partition."""

    __slots__ = ("local", "fresh")

    def __init__(self, queued: dict[int, Writes], local: dict[int, Layer], fresh: dict[int, Layer]):
        super().__init__(queued)
        self.local = local
        self.fresh = fresh


class LayeredPartitionStore:
    """``deferred``: the key prefix (one byte) whose committed local writes
    wait longer (see the module docstring); ``keep``: how many of those at
    most; ``checkpoint``: see :data:`CHECKPOINT_RECORDS`; ``atomic``: each
    taken cycle's records commit in one transaction or not at all
    (exactly-once), so :meth:`take_writes` leaves out what a later write of
    the cycle deletes (:meth:`_coalesce`)."""

    def __init__(
        self,
        table: LocalTable,
        producer: ChangelogSink,
        deferred: bytes | None = None,
        keep: int = DEFERRED_KEPT,
        checkpoint: int = CHECKPOINT_RECORDS,
        atomic: bool = False,
    ) -> None:
        self.table = table
        self.atomic = atomic
        self.name: str = table.name
        self.producer = producer
        self.keep = keep
        self.checkpoint = checkpoint
        self._family = -1 if deferred is None else deferred[0]
        # the current cycle: its changelog records and local writes
        self._queued: dict[int, Writes] = {}
        self._local: dict[int, Layer] = {}  # the other families
        self._fresh: dict[int, Layer] = {}  # the deferred family
        #: cycles taken and not committed yet, in take order
        self._flight: list[Cycle] = []
        self._waiting: dict[int, Layer] = {}  # committed writes of the family
        self._waiting_count = 0
        #: per partition, the deferred family's keys in its DB, where known
        #: (the DB had none when it opened, and no more than IN_DB_KNOWN since);
        #: forgotten by sync(), so a set here is that of the DB open now
        self._in_db: dict[int, set[bytes]] = {}
        #: acknowledged offsets held back while committed writes wait, and the
        #: first offset held back since the DB's offset last moved
        self._offsets: dict[int, int] = {}
        self._held_since: dict[int, int] = {}
        self._marked: set[int] = set()
        self._tuned: dict[int, int] = {}  # partition -> id of the DB tuned
        self._open: Mapping[int, Any] | None = None  # the open DBs (the table's live view)

    # -- the cycle -------------------------------------------------------------
    def take_writes(self) -> Cycle:
        """The writes made so far (the next call starts afresh): their
        changelog records per partition, to send; their local writes wait
        until :meth:`committed` is told the changelog has them."""
        cycle = Cycle(self._queued, self._local, self._fresh)
        self._queued, self._local, self._fresh = {}, {}, {}
        if self.atomic:  # (before the cycle joins those in flight: _present reads them)
            for partition in [p for p, w in cycle.items() if self._coalesce(p, w)]:
                del cycle[partition]  # (its local writes still commit with the cycle)
        if cycle or cycle.local or cycle.fresh:
            self._flight.append(cycle)
        return cycle

    async def flush(self, writes: Cycle) -> None:
        """Send a taken cycle's records to the changelog; return once all
        are durable and the cycle is committed locally."""
        if not writes:
            self.committed(writes, {})
            return
        topic = self.table.changelog_topic
        sent = await self.producer.send({(topic, p): w.records() for p, w in writes.items()})
        self.committed(writes, sent)

    def _coalesce(self, partition: int, writes: Writes) -> bool:
        """Under ``atomic``: leave out of a partition's taken records every
        write of a key that a later write of the same cycle replaces (one
        record per key at most: a key state rewritten by each step of a
        cycle costs one record), and the delete itself when the key was
        written before it in the cycle and held nothing before the cycle (a
        message put in the reorder buffer and released, produced and
        confirmed in the same transaction). The transaction commits all of
        the cycle's records with its outputs or none of them, so what the
        changelog holds once it commits is the same, and no reader of
        committed records sees a state between two records of one
        transaction. (Under at-least-once each record may be the last one
        durable: none is left out.) Whether nothing is left."""
        if writes.placed is not None:
            writes._merge()
        keys, values = writes.keys, writes.values
        last = {key: i for i, key in enumerate(keys)}
        if len(last) == len(keys):  # (no key written twice)
            return not keys
        kept_keys: list[bytes] = []
        kept_values: list[bytes | None] = []
        replaced: set[bytes] = set()
        for i, key in enumerate(keys):
            if last[key] != i:
                replaced.add(key)
                continue
            value = values[i]
            if value is None and key in replaced and not self._present(partition, key):
                continue
            kept_keys.append(key)
            kept_values.append(value)
        writes.keys, writes.values = kept_keys, kept_values
        return not kept_keys

    def _present(self, partition: int, key: bytes) -> bool:
        """Whether ``key`` holds a value before the cycle being taken: called
        while :meth:`take_writes` holds the cycle apart (the current layers
        emptied, the cycle not yet in flight), :meth:`get` reads exactly
        that: the cycles in flight (which commit before it, or it never
        does), the committed writes waiting in memory, RocksDB."""
        opened = self._open
        if opened is None:
            opened = self._open = self.table.open_dbs()
        if partition not in opened:  # (revoked: reopening would hold its lock)
            return True  # (the delete is kept: harmless)
        return self.get(partition, key) is not None

    @property
    def changelog_topic(self) -> str:
        return str(self.table.changelog_topic)

    def committed(self, cycle: Cycle, last: Mapping[tuple[str, int], int]) -> None:
        """The changelog holds ``cycle``'s records, up to these offsets (per
        (changelog topic, partition); other topics are ignored): its local
        writes go to RocksDB with the offsets. Cycles commit in take order;
        one no longer in flight (empty, or dropped by :meth:`sync`) is
        ignored."""
        flight = self._flight
        if not flight or not any(taken is cycle for taken in flight):
            return
        assert flight[0] is cycle, "cycles commit in the order they were taken"
        del flight[0]
        topic = self.table.changelog_topic
        offsets = {p: offset for (written, p), offset in last.items() if written == topic}
        for partition in set(cycle.local) | set(cycle.fresh) | set(offsets):
            self._commit(
                partition,
                cycle.local.get(partition),
                cycle.fresh.get(partition),
                offsets.get(partition),
            )
        if self._waiting_count > self.keep:  # the oldest half of each partition's
            for partition, entries in list(self._waiting.items()):
                self._write_waiting(partition, len(entries) // 2 + 1)

    def _commit(
        self, partition: int, local: Layer | None, fresh: Layer | None, offset: int | None
    ) -> None:
        opened = self._open
        if opened is None:
            opened = self._open = self.table.open_dbs()
        if partition not in opened:
            # Revoked meanwhile (Faust opens an assigned partition's DB at
            # the assignment and closes it at the revocation): reopening it
            # would hold RocksDB's lock. The writes are in the changelog,
            # where the partition's next owner reads them.
            log.info(
                "changelog %s/%d: DB closed; its committed writes left to the changelog",
                self.table.changelog_topic,
                partition,
            )
            return
        db = self._db(partition)
        if fresh:
            waiting = self._waiting.get(partition)
            if waiting is None:
                waiting = self._waiting[partition] = {}
            before = len(waiting)
            in_db = self._in_db.get(partition)
            for key, value in fresh.items():
                if value is None and in_db is not None and key not in in_db:
                    waiting.pop(key, None)  # nothing in RocksDB to delete
                else:
                    waiting[key] = value
            self._waiting_count += len(waiting) - before
        entries: Layer = local or {}
        if offset is not None:
            if self._waiting.get(partition):
                since = self._held_since.setdefault(partition, offset)
                if offset - since < self.checkpoint:
                    self._offsets[partition] = offset  # written with the waiting writes
                    offset = None
                else:
                    entries = {**entries, **self._take_waiting(partition)}
            if offset is not None:
                self._offsets.pop(partition, None)
                self._held_since.pop(partition, None)
        if entries or offset is not None:
            self._write_sorted(db, entries, offset)

    def _take_waiting(self, partition: int, oldest: int | None = None) -> Layer:
        """Remove the partition's waiting writes (or its ``oldest`` ones)
        from memory, to be written now."""
        waiting = self._waiting.get(partition)
        if not waiting:
            return {}
        in_db = self._in_db.get(partition)
        keys = list(waiting if oldest is None else itertools.islice(waiting, oldest))
        written = {key: waiting.pop(key) for key in keys}
        if in_db is not None:
            for key, value in written.items():
                if value is None:
                    in_db.discard(key)
                else:
                    in_db.add(key)
            if len(in_db) > IN_DB_KNOWN:
                del self._in_db[partition]  # from now on RocksDB answers
        self._waiting_count -= len(keys)
        if not waiting:
            del self._waiting[partition]
        return written

    @staticmethod
    def _write_sorted(db: Any, entries: Layer, offset: int | None) -> None:
        """One batch: ``entries`` in key order, and the offset they bring the
        DB up to, if any."""
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        for key in sorted(entries):
            value = entries[key]
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        if offset is not None:
            batch.put(FAUST_OFFSET_KEY, encode_offset(offset))
        db.write(batch)

    def _write_waiting(self, partition: int, oldest: int | None = None) -> None:
        """Write the partition's committed deferred writes (or its ``oldest``
        ones), with the offset held back once none waits."""
        written = self._take_waiting(partition, oldest)
        offset = None if self._waiting.get(partition) else self._offsets.pop(partition, None)
        if offset is not None:
            self._held_since.pop(partition, None)
        if written or offset is not None:
            self._write_sorted(self._db(partition), written, offset)

    def sync(self) -> None:
        """Write the committed deferred writes to the local RocksDB (with the
        offsets held back), and forget which DBs hold no deferred entry:
        before a rebalance or stop lets Faust close or recover a DB. Writes
        not committed yet stay in memory (RocksDB never holds them)."""
        for partition in set(self._waiting) | set(self._offsets):
            self._write_waiting(partition)
        self._tuned.clear()  # each DB is looked at again when next used
        self._in_db.clear()  # (and what it holds: a rebalance may replace it)

    # -- the databases -------------------------------------------------------------
    def adopt(self) -> None:
        """Set the format key in every open DB that lacks it: called once a
        rebalance opened the assigned partitions' DBs (each passed the
        start-up check, or is new), so that what a later unclean stop leaves
        is known to follow the rule."""
        for db in list(self.table.open_dbs().values()):
            if db.get(FORMAT_KEY) is None:
                db.put(FORMAT_KEY, FORMAT)

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
        # most a second look at a reopened DB's options).
        if id(db) != self._tuned.get(partition):  # opened (again) by Faust
            db.set_options(MEMTABLE_BLOOM)
            self._tuned[partition] = id(db)
            self._in_db.pop(partition, None)
            if self._family >= 0:
                it = db.iter()
                it.seek(bytes((self._family,)))
                if not it.valid() or it.key()[0] != self._family:
                    self._in_db[partition] = set()
        return db

    def _layers(self, partition: int, deferred: bool) -> list[Layer]:
        """The partition's uncommitted layers of one side, newest first."""
        current = (self._fresh if deferred else self._local).get(partition)
        layers = [] if current is None else [current]
        for cycle in reversed(self._flight):
            layer = (cycle.fresh if deferred else cycle.local).get(partition)
            if layer:
                layers.append(layer)
        return layers

    def get(self, partition: int, key: bytes) -> bytes | None:
        if key[0] == self._family:
            fresh = self._fresh.get(partition)
            if fresh is not None:
                found = fresh.get(key, _ABSENT)
                if found is not _ABSENT:
                    return found  # type: ignore[return-value]
            if self._flight:
                for cycle in reversed(self._flight):
                    layer = cycle.fresh.get(partition)
                    if layer is not None:
                        found = layer.get(key, _ABSENT)
                        if found is not _ABSENT:
                            return found  # type: ignore[return-value]
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
        if self._flight:
            for cycle in reversed(self._flight):
                layer = cycle.local.get(partition)
                if layer is not None:
                    found = layer.get(key, _ABSENT)
                    if found is not _ABSENT:
                        return found  # type: ignore[return-value]
        value: bytes | None = self._db(partition).get(key)
        return value

    def _persisted(self, partition: int) -> int:
        raw = self._db(partition).get(FAUST_OFFSET_KEY)
        return -1 if raw is None else int(raw)

    def mark(self, partition: int, value: bytes) -> None:
        """Keep ``value`` locally with the changelog offset the partition's
        state reflects; a later write here, or a changelog record replayed
        into the state (it moves that offset), voids it. Nothing is marked
        while writes of the partition are not committed (the mark would
        describe a state RocksDB does not hold)."""
        if self._layers(partition, False) or self._layers(partition, True):
            return
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

    # -- writes and reads ------------------------------------------------------------
    def put(self, partition: int, key: bytes, value: bytes) -> None:
        self.write(partition, ((key, value, ()),))

    def delete(self, partition: int, key: bytes) -> None:
        self.write(partition, ((key, None, ()),))

    def write(self, partition: int, changes: Sequence[Change]) -> None:
        """Queue ``changes`` for the partition's changelog and keep them in
        the current cycle's layer (a write voids the mark)."""
        if self._marked and partition in self._marked:
            self._unmark(partition)
        queue = self._queued.get(partition)
        if queue is None:
            queue = self._queued[partition] = Writes()
        keys, values = queue.keys, queue.values
        local = self._local.get(partition)
        if local is None:
            local = self._local[partition] = {}
        family = self._family
        if family < 0:
            for key, value, _ in changes:
                keys.append(key)
                values.append(value)
                local[key] = value
            return
        fresh = self._fresh.get(partition)
        if fresh is None:
            fresh = self._fresh[partition] = {}
        for key, value, _ in changes:
            keys.append(key)
            values.append(value)
            if key[0] != family:
                local[key] = value
            else:
                fresh[key] = value

    def place(self, partition: int) -> object:
        """See :meth:`state.base.PartitionStore.place`: the current cycle's
        records of the partition (if any) and how many there are."""
        queue = self._queued.get(partition)
        return (queue, 0 if queue is None else len(queue.keys))

    def write_placed(
        self, partition: int, placed: Sequence[tuple[object, Sequence[Change]]]
    ) -> None:
        """See :meth:`state.base.PartitionStore.write_placed`."""
        if not placed:
            return
        if self._marked and partition in self._marked:
            self._unmark(partition)
        current = self._queued.get(partition)
        if current is None:
            current = self._queued[partition] = Writes()
        if current.placed is None:
            current.placed = []
        at = current.placed
        queue: Writes | None
        index: int
        for place, changes in placed:
            queue, index = place  # type: ignore[misc]
            # (the place's writes were taken already, or there were none
            # then: all of the current ones come after it)
            at.append((index if queue is current else 0, changes))
        local = self._local.get(partition)
        if local is None:
            local = self._local[partition] = {}
        family = self._family
        fresh = self._fresh.get(partition)
        if fresh is None and family >= 0:
            fresh = self._fresh[partition] = {}
        for _, changes in placed:
            for key, value, _ in changes:
                if fresh is None or key[0] != family:
                    local[key] = value
                else:
                    fresh[key] = value

    def seek(self, partition: int, start: bytes, prefix: bytes) -> tuple[bytes, bytes] | None:
        return next(self.items(partition, prefix, start), None)

    def items(
        self, partition: int, prefix: bytes = b"", start: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        family = self._family
        layers: list[Layer] = []
        if not prefix or prefix[0] == family:
            self._write_waiting(partition)  # (committed: RocksDB may hold them)
            layers += self._layers(partition, True)
        if not prefix or prefix[0] != family:
            layers += self._layers(partition, False)
        it = self._db(partition).iter()
        low = max(prefix, start)
        it.seek(low)
        if not any(layers):
            while it.valid():
                key: bytes = it.key()
                if not key.startswith(prefix):
                    return
                if key not in META_KEYS:
                    yield key, it.value()
                it.next()
            return
        # The uncommitted writes under the prefix (newest wins; None hides
        # what RocksDB holds), merged in key order with RocksDB's.
        over: Layer = {}
        for layer in reversed(layers):  # oldest first
            for key, value in layer.items():
                if key >= low and key.startswith(prefix):
                    over[key] = value
        pending = sorted(over)
        i = 0
        while True:
            db_key: bytes | None = None
            if it.valid():
                db_key = it.key()
                if not db_key.startswith(prefix):
                    db_key = None
            if i < len(pending) and (db_key is None or pending[i] <= db_key):
                key = pending[i]
                i += 1
                if db_key == key:
                    it.next()
                value = over[key]
                if value is not None:
                    yield key, value
            elif db_key is not None:
                if db_key not in META_KEYS:
                    yield db_key, it.value()
                it.next()
            else:
                return
