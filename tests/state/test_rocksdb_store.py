"""LayeredPartitionStore: RocksDB holds only what the changelog holds (a write
reaches it once its cycle is committed, with the changelog offset in the
same batch), reads see every write, and no partition's DB is kept alive
(Faust closes a revoked partition's RocksDB by dropping its last reference,
``revoke_partitions``, and a DB still open holds RocksDB's lock when the
partition comes back: "lock hold by current process")."""

from __future__ import annotations

import asyncio
import gc
import tempfile
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.rocksdb import (
    DEFERRED_KEPT,
    FAUST_OFFSET_KEY,
    FORMAT,
    FORMAT_KEY,
    MEMTABLE_BLOOM,
    META_KEYS,
    Cycle,
    LayeredPartitionStore,
    encode_offset,
    reset_db,
)


class FakeDB:
    def __init__(self) -> None:
        self.batches = 0
        self.bloom: dict[str, str] = {}

    def set_options(self, options: dict[str, str]) -> None:
        self.bloom = options

    def get(self, key: bytes) -> bytes | None:
        return None

    def iter(self) -> Any:
        return SimpleNamespace(seek=lambda key: None, valid=lambda: False)

    def write(self, batch: Any, options: Any = None) -> None:
        self.batches += 1


def test_a_revoked_partition_s_db_is_not_kept_open() -> None:
    dbs: dict[int, FakeDB] = {0: FakeDB()}  # (Faust opens it at the assignment)
    table = SimpleNamespace(
        name="t", changelog_topic="t-changelog", open_dbs=lambda: dbs, db_for=dbs.__getitem__
    )
    store = LayeredPartitionStore(table, producer=None)  # type: ignore[arg-type]
    store.put(0, b"k", b"v")
    assert store.get(0, b"k") == b"v"
    store.committed(store.take_writes(), {("t-changelog", 0): 0})
    assert dbs[0].batches == 1 and dbs[0].bloom == MEMTABLE_BLOOM  # tuned
    gone = weakref.ref(dbs[0])
    del dbs[0]  # Faust's revoke_partitions
    gc.collect()
    assert gone() is None
    dbs[0] = FakeDB()  # the partition is back: a new DB
    store.put(0, b"k2", b"v2")
    assert store.get(0, b"k2") == b"v2" and store.get(0, b"k") is None
    store.committed(store.take_writes(), {("t-changelog", 0): 1})
    assert dbs[0].batches == 1


def test_a_cycle_committed_after_its_partition_was_revoked_writes_nothing() -> None:
    """Reopening a revoked partition's DB would hold its lock; the writes
    are in the changelog, where the next owner reads them."""
    dbs: dict[int, FakeDB] = {0: FakeDB()}
    table = SimpleNamespace(
        name="t", changelog_topic="t-changelog", open_dbs=lambda: dbs, db_for=dbs.__getitem__
    )
    store = LayeredPartitionStore(table, producer=None)  # type: ignore[arg-type]
    store.put(0, b"k", b"v")
    cycle = store.take_writes()
    del dbs[0]  # revoked while the cycle was in flight
    store.committed(cycle, {("t-changelog", 0): 0})  # (a KeyError if it reopened it)
    assert dbs == {}


# -- over real RocksDBs ------------------------------------------------------

FAMILY = b"b"
TOPIC = "t-changelog"


class RealDB:
    """A partition's RocksDB as Faust opens it (rocksdict, raw mode),
    counting the entries written to it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = Rdict(str(path), Options(raw_mode=True))
        self.writes = 0

    def set_options(self, options: dict[str, str]) -> None:
        self.db.set_options(options)

    def get(self, key: bytes) -> bytes | None:
        found: bytes | None = self.db.get(key)
        return found

    def put(self, key: bytes, value: bytes) -> None:
        self.writes += 1
        self.db.put(key, value)

    def delete(self, key: bytes) -> None:
        self.writes += 1
        self.db.delete(key)

    def write(self, batch: Any, options: Any = None) -> None:
        self.writes += batch.len()
        self.db.write(batch)

    def iter(self) -> Any:
        return self.db.iter()

    @property
    def data(self) -> dict[bytes, bytes]:
        return dict(self.db.items())

    @property
    def state(self) -> dict[bytes, bytes]:
        """The entries, without the offset, format and mark."""
        return {k: v for k, v in self.db.items() if k not in META_KEYS}

    @property
    def offset(self) -> int:
        """Faust's persisted offset (as ``Store.persisted_offset`` reads it)."""
        raw = self.db.get(FAUST_OFFSET_KEY)
        return -1 if raw is None else int(raw)

    def reopen(self) -> RealDB:
        self.db.close()
        return RealDB(self.path)


class FakeProducer:
    def __init__(self) -> None:
        self.sent: dict[tuple[str, int], int] = {}

    async def send(self, records: dict[tuple[str, int], Any]) -> dict[tuple[str, int], int]:
        last = {}
        for tp, items in records.items():
            self.sent[tp] = self.sent.get(tp, -1) + len(list(items))
            last[tp] = self.sent[tp]
        return last


@contextmanager
def deferred_store(
    keep: int = 50_000,
    preloaded: dict[int, dict[bytes, bytes]] | None = None,
    checkpoint: int = 20_000,
) -> Iterator[tuple[LayeredPartitionStore, dict[int, RealDB]]]:
    """A store over real RocksDBs of partitions 0 and 1, open as Faust opens
    an assigned partition's (``preloaded`` entries in them)."""
    with tempfile.TemporaryDirectory() as tmp:
        dbs: dict[int, RealDB] = {}

        def db_for_partition(partition: int) -> RealDB:
            if partition not in dbs:
                dbs[partition] = RealDB(Path(tmp) / str(partition))
            return dbs[partition]

        for partition in (0, 1):
            db_for_partition(partition)
        for partition, entries in (preloaded or {}).items():
            for key, value in entries.items():
                dbs[partition].db.put(key, value)
        table = SimpleNamespace(
            name="t", changelog_topic=TOPIC, open_dbs=lambda: dbs, db_for=db_for_partition
        )
        store = LayeredPartitionStore(
            table,  # type: ignore[arg-type]
            FakeProducer(),
            deferred=FAMILY,
            keep=keep,
            checkpoint=checkpoint,
        )
        try:
            yield store, dbs
        finally:
            for db in dbs.values():
                db.db.close()


def cycle(store: LayeredPartitionStore) -> None:
    """An outbox cycle: take, send, committed."""
    asyncio.run(store.flush(store.take_writes()))


def test_each_db_gets_a_memtable_bloom_filter_when_it_opens() -> None:
    """Seen-id misses are answered by a filter, not a memtable search:
    RocksDB records the options set in the DB's latest OPTIONS file (set
    before the store first reads or writes the DB)."""
    with deferred_store() as (store, dbs):
        store.put(0, b"s1", b"state")
        cycle(store)  # the first write to RocksDB
        latest = max(dbs[0].path.glob("OPTIONS-*"), key=lambda f: int(f.name.split("-")[1]))
        text = latest.read_text()
        for name, value in MEMTABLE_BLOOM.items():
            assert f"{name}={value}" in text


def test_faust_reads_the_offset_as_the_store_writes_it() -> None:
    from faust.stores.rocksdb import Store

    assert Store.offset_key == FAUST_OFFSET_KEY
    assert int(encode_offset(4_566_999)) == 4_566_999  # Store.persisted_offset: int(value)


def test_local_writes_reach_rocksdb_only_once_the_changelog_has_them() -> None:
    with deferred_store() as (store, dbs):
        store.write(0, [(b"s2", b"state", ()), (b"i1", b"seen", ())])
        store.write(0, [(b"s2", b"newer", ())])
        assert store.get(0, b"s2") == b"newer"  # read from memory
        taken = store.take_writes()
        assert [c[:2] for c in taken[0].records()] == [
            (b"s2", b"state"),
            (b"i1", b"seen"),
            (b"s2", b"newer"),
        ]
        store.write(0, [(b"s2", b"newest", ())])  # the next cycle's
        assert store.get(0, b"s2") == b"newest" and store.get(0, b"i1") == b"seen"
        store.sync()  # (a sync writes nothing uncommitted)
        assert dbs[0].data == {}
        store.committed(taken, {(TOPIC, 0): 2})
        assert dbs[0].data == {
            b"i1": b"seen",
            b"s2": b"newer",
            FAUST_OFFSET_KEY: b"2",
        }
        assert dbs[0].writes == 3  # one batch
        assert store.get(0, b"s2") == b"newest"


def test_adopt_sets_the_format_key_in_every_open_db() -> None:
    with deferred_store(preloaded={0: {b"s1": b"old"}}) as (store, dbs):
        store.adopt()
        assert dbs[0].data == {b"s1": b"old", FORMAT_KEY: FORMAT}
        assert dbs[1].data == {FORMAT_KEY: FORMAT}
        store.adopt()
        assert dbs[0].writes == dbs[1].writes == 1  # (once)
        assert list(store.items(0)) == [(b"s1", b"old")]  # not state


def test_reset_empties_a_db_in_one_batch_and_keeps_the_format_key() -> None:
    with deferred_store(preloaded={0: {b"s1": b"v", b"b1": b"w", b"\xff\xff": b"x"}}) as (
        store,
        dbs,
    ):
        dbs[0].db.put(FAUST_OFFSET_KEY, b"7")
        reset_db(dbs[0])
        assert dbs[0].data == {FORMAT_KEY: FORMAT} and dbs[0].writes == 3
        reset_db(dbs[1])  # (empty: nothing written)
        assert dbs[1].data == {} and dbs[1].writes == 0


def test_cycles_commit_in_the_order_they_were_taken() -> None:
    with deferred_store() as (store, dbs):
        store.put(0, b"s1", b"one")
        first = store.take_writes()
        store.put(0, b"s1", b"two")
        second = store.take_writes()
        assert store.get(0, b"s1") == b"two"
        try:
            store.committed(second, {(TOPIC, 0): 1})
        except AssertionError:
            pass
        else:
            raise AssertionError("a later cycle committed first")
        store.committed(first, {(TOPIC, 0): 0})
        assert dbs[0].state == {b"s1": b"one"} and store.get(0, b"s1") == b"two"
        store.committed(second, {(TOPIC, 0): 1})
        assert dbs[0].state == {b"s1": b"two"} and dbs[0].offset == 1
        store.committed(second, {(TOPIC, 0): 1})  # (no longer in flight: ignored)
        empty = store.take_writes()
        assert isinstance(empty, Cycle) and not empty
        store.committed(empty, {})


def test_a_buffer_entry_deleted_before_it_is_written_never_reaches_rocksdb() -> None:
    with deferred_store() as (store, dbs):
        store.write(0, [(b"b1", b"held", ()), (b"s1", b"state", ())])
        assert store.get(0, b"b1") == b"held"
        cycle(store)
        assert dbs[0].state == {b"s1": b"state"}  # the buffer entry waits longer
        assert dbs[0].offset == -1  # ... and the offset with it
        store.write(0, [(b"b1", None, ())])
        assert store.get(0, b"b1") is None
        cycle(store)
        store.sync()
        assert dbs[0].state == {b"s1": b"state"} and dbs[0].offset == 2
        # ... but the changelog got both: the put and the tombstone
        assert store.producer.sent[(TOPIC, 0)] == 2  # type: ignore[attr-defined]


def test_the_offset_waits_for_the_deferred_writes_at_most_a_checkpoint() -> None:
    """While buffer entries wait, the DB's offset stays; once the
    acknowledged offset is ``checkpoint`` records ahead, they are written
    with it: a restart replays at most that tail."""
    with deferred_store(checkpoint=10) as (store, dbs):
        for n in range(6):  # two records per cycle
            store.write(0, [(b"b%d" % n, b"held", ()), (b"s", b"%d" % n, ())])
            cycle(store)
        assert dbs[0].offset == 11 and dbs[0].state[FAMILY + b"0"] == b"held"
        assert dbs[0].state[b"s"] == b"5"


def test_confirmations_trailing_by_100_000_messages_still_save_the_writes() -> None:
    """A buffer entry waits for its gap, then for its confirmation (its
    deletion): up to ~84,000 waited at once in the throughput bench. With
    the default cap such entries never reach RocksDB (no checkpoint due)."""
    lag, every = 100_000, 5_000
    with deferred_store(keep=DEFERRED_KEPT, checkpoint=10**9) as (store, dbs):
        for n in range(lag + 3 * every):
            changes: list[Any] = [(b"b%08d" % n, b"message", ()), (b"s", b"%d" % n, ())]
            if n >= lag:
                changes.insert(0, (b"b%08d" % (n - lag), None, ()))  # confirmed
            store.write(0, changes)
            if n % every == 0:
                cycle(store)
        cycle(store)
        assert not any(key.startswith(FAMILY) for key in dbs[0].data)
        assert dbs[0].writes == (lag + 3 * every) // every + 1  # the key states' batches


def test_queued_changelog_records_hold_nothing_the_garbage_collector_examines() -> None:
    """Until an outbox cycle takes them, a partition's changelog records
    are two lists of bytes: no tracked tuple per write (each young
    collection examined every one of them)."""
    with deferred_store() as (store, _):
        enabled = gc.isenabled()
        gc.disable()  # a collection would untrack tuples of bytes itself
        try:
            for n in range(100):
                store.write(0, [(b"b%03d" % n, b"message", ()), (b"s", b"%d" % n, ())])
            queued = store._queued[0]
            columns = [x for x in gc.get_referents(queued) if not isinstance(x, type)]
            held = [x for column in columns for x in gc.get_referents(column)]
            assert len(held) == 400 and not any(gc.is_tracked(x) for x in held)
            assert [c[:2] for c in store.take_writes()[0].records()][-2:] == [
                (b"b099", b"message"),
                (b"s", b"99"),
            ]
        finally:
            if enabled:
                gc.enable()


def test_a_db_that_held_buffer_entries_when_it_opened_is_read() -> None:
    with deferred_store(preloaded={0: {b"b1": b"old"}}) as (store, dbs):
        assert store.get(0, b"b1") == b"old"
        store.write(0, [(b"b1", None, ())])  # a tombstone for RocksDB: it has the entry
        assert store.get(0, b"b1") is None
        cycle(store)
        assert dbs[0].state == {b"b1": b"old"}
        store.sync()
        assert dbs[0].state == {} and dbs[0].offset == 0


def test_a_rebalance_forgets_which_buffer_entries_a_db_holds() -> None:
    """A rebalance may close a DB and recover it from the changelog: after
    the sync before it, the entries recovered into the DB are read (what
    was known of the DB before would say it holds none)."""
    with deferred_store() as (store, dbs):
        assert store.get(0, b"b1") is None  # known: the DB holds no entry
        store.sync()  # the lifecycle's rebalancing()
        dbs[0].db.put(b"b1", b"recovered")  # Faust's recovery writes the DB
        assert store.get(0, b"b1") == b"recovered"


def test_a_mark_is_not_written_while_writes_are_uncommitted() -> None:
    with deferred_store() as (store, dbs):
        store.put(0, b"s1", b"state")
        cycle(store)
        store.mark(0, b"described")
        assert store.take_mark(0) == b"described"
        store.put(0, b"s1", b"newer")
        store.mark(0, b"described")  # would describe a state RocksDB lacks
        assert store.take_mark(0) is None


KEYS = [f + bytes([n]) for f in (b"b", b"s") for n in range(4)]


def reads_alike(store: LayeredPartitionStore, model: MemoryStore) -> None:
    for partition in (0, 1):
        for key in KEYS:
            assert store.get(partition, key) == model.get(partition, key), (partition, key)


def apply(state: dict[bytes, bytes], records: list[tuple[bytes, bytes | None]]) -> None:
    for key, value in records:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value


@settings(max_examples=300, deadline=None)
@example(  # a buffer entry committed while the offset is due
    ops=[("write", 0, [(b"b\x01", b"v"), (b"s\x01", b"w")]), ("cycle",), ("cycle",)],
    keep=1000,
    checkpoint=1000,
    preload=False,
)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(
                st.just("write"),
                st.integers(0, 1),
                st.lists(
                    st.tuples(
                        st.sampled_from(KEYS),
                        st.one_of(st.none(), st.binary(min_size=1, max_size=2)),
                    ),
                    min_size=1,
                    max_size=4,
                ),
            ),
            st.tuples(st.just("seek"), st.integers(0, 1), st.integers(0, 4)),
            st.tuples(st.just("items"), st.integers(0, 1), st.sampled_from([b"", b"b", b"s"])),
            st.just(("take",)),
            st.just(("commit",)),
            st.just(("cycle",)),
            st.just(("sync",)),
            st.just(("reopen",)),
            st.tuples(st.just("recover"), st.integers(0, 1), st.sampled_from(KEYS)),
        ),
        max_size=40,
    ),
    keep=st.one_of(st.integers(1, 6), st.just(1000)),
    checkpoint=st.one_of(st.integers(1, 12), st.just(1000)),
    preload=st.booleans(),
)
def test_rocksdb_plus_the_changelog_after_its_offset_is_the_committed_state(
    ops: list[Any], keep: int, checkpoint: int, preload: bool
) -> None:
    """Whatever waits in memory or in flight, the store reads like the
    in-memory model (every write, committed or not); and after every step
    (a ``kill -9`` may come at any), each partition's RocksDB with the
    changelog records after its offset replayed is exactly the state of the
    committed changelog: RocksDB never holds an uncommitted write and never
    claims (by its offset) a record it lacks."""
    preloaded = {0: {b"b\x00": b"x", b"b\x03": b"y", b"s\x01": b"z"}} if preload else {}
    model = MemoryStore()
    changelog: dict[int, list[tuple[bytes, bytes | None]]] = {0: [], 1: []}
    for partition, entries in preloaded.items():
        model.write(partition, [(k, v, ()) for k, v in entries.items()])
        changelog[partition] += list(entries.items())
    flight: list[Cycle] = []
    with deferred_store(keep, preloaded, checkpoint) as (store, dbs):
        for partition, entries in preloaded.items():  # (the offset of a rebuilt DB)
            dbs[partition].db.put(FAUST_OFFSET_KEY, encode_offset(len(entries) - 1))

        def commit() -> None:
            taken = flight.pop(0)
            last = {}
            for partition, writes in taken.items():
                changelog[partition] += [(k, v) for k, v, _ in writes.records()]
                last[(TOPIC, partition)] = len(changelog[partition]) - 1
            store.committed(taken, last)

        def take() -> None:
            flight.append(store.take_writes())

        for op in ops:
            if op[0] == "write":
                changes = [(k, v, ()) for k, v in op[2]]
                store.write(op[1], changes)
                model.write(op[1], changes)
            elif op[0] == "seek":
                start = b"b" + bytes([op[2]])
                assert store.seek(op[1], start, b"b") == model.seek(op[1], start, b"b")
            elif op[0] == "items":
                assert list(store.items(op[1], op[2])) == list(model.items(op[1], op[2]))
            elif op[0] == "take":
                if len(flight) < 2:  # (two stages at most)
                    take()
            elif op[0] == "commit":
                if flight:
                    commit()
            elif op[0] == "cycle":  # at_least_once: take, then commit at once
                take()
                while flight:
                    commit()
            elif op[0] == "sync":
                store.sync()
            elif op[0] == "recover":
                # a rebalance: the last cycle, the sync, then Faust's
                # recovery applies a record (another owner's) to the DB
                take()
                while flight:
                    commit()
                store.sync()
                changelog[op[1]].append((op[2], b"recovered"))
                db = dbs[op[1]].db
                db.put(op[2], b"recovered")
                db.put(FAUST_OFFSET_KEY, encode_offset(len(changelog[op[1]]) - 1))
                model.write(op[1], [(op[2], b"recovered", ())])
            else:  # a rebalance: sync, then Faust closes and reopens the DBs
                store.sync()
                for partition in list(dbs):
                    dbs[partition] = dbs[partition].reopen()
            reads_alike(store, model)
            for partition in (0, 1):  # a kill -9 here
                db = dbs[partition]
                replayed = db.state
                apply(replayed, changelog[partition][db.offset + 1 :])
                committed: dict[bytes, bytes] = {}
                apply(committed, changelog[partition])
                assert replayed == committed, partition
                # ... or here, once the changelog got the cycles in flight
                # and before they reached RocksDB
                sent = [
                    (k, v) for c in flight if partition in c for k, v, _ in c[partition].records()
                ]
                replayed = db.state
                apply(replayed, (changelog[partition] + sent)[db.offset + 1 :])
                apply(committed, sent)
                assert replayed == committed, (partition, "in flight")
        take()
        while flight:
            commit()
        store.sync()
        for partition in (0, 1):
            assert dbs[partition].state == dict(model.items(partition))
            assert dbs[partition].offset == len(changelog[partition]) - 1


def test_placed_writes_stand_where_they_were_placed_in_the_changelog() -> None:
    """The ordered processor's queue entries and results (``write_placed``):
    each at its place in the cycle's records, at one place in the order
    placed; a place from a cycle taken since stands for the start of the
    current one; reads see them at once."""
    with deferred_store() as (store, _):
        first = store.place(0)  # (no writes yet)
        store.write(0, [(b"s1", b"a", ())])
        second = store.place(0)
        store.write(0, [(b"s2", b"b", ()), (b"s3", b"c", ())])
        store.write_placed(0, [(second, [(b"q2", b"x", ())])])
        store.write_placed(0, [(first, [(b"q1", b"y", ())]), (second, [(b"q3", b"z", ())])])
        assert store.get(0, b"q3") == b"z"
        taken = store.take_writes()
        assert [c[0] for c in taken[0].records()] == [b"q1", b"s1", b"q2", b"q3", b"s2", b"s3"]
        asyncio.run(store.flush(taken))
        stale = store.place(1)
        store.write(1, [(b"s4", b"d", ())])
        cycle(store)
        store.write(1, [(b"s5", b"e", ())])
        store.write_placed(1, [(stale, [(b"q4", b"w", ())])])
        assert [c[0] for c in store.take_writes()[1].records()] == [b"q4", b"s5"]
