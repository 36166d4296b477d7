"""FaustRocksStore keeps no partition's DB alive: Faust closes a revoked
partition's RocksDB by dropping its last reference (``revoke_partitions``),
and a DB still open holds RocksDB's lock when the partition comes back to
the worker ("lock hold by current process": the worker crashed)."""

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

from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.rocksdb import DEFERRED_KEPT, MEMTABLE_BLOOM, FaustRocksStore


class FakeDB:
    def __init__(self) -> None:
        self.options: Any = None
        self.data: dict[bytes, bytes] = {}

    def set_write_options(self, options: Any) -> None:
        self.options = options

    def set_options(self, options: dict[str, str]) -> None:
        pass

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        self.data.pop(key, None)


def test_a_revoked_partition_s_db_is_not_kept_open() -> None:
    dbs: dict[int, FakeDB] = {}

    def db_for_partition(partition: int) -> FakeDB:
        return dbs.setdefault(partition, FakeDB())

    table = SimpleNamespace(
        name="t", changelog_topic="t-changelog", open_dbs=lambda: dbs, db_for=db_for_partition
    )
    store = FaustRocksStore(table, producer=None)  # type: ignore[arg-type]
    store.put(0, b"k", b"v")
    assert store.get(0, b"k") == b"v"
    assert dbs[0].options is not None  # tuned: no write-ahead log
    gone = weakref.ref(dbs[0])
    del dbs[0]  # Faust's revoke_partitions
    gc.collect()
    assert gone() is None
    store.put(0, b"k2", b"v2")  # the partition is back: a new DB
    assert dbs[0].get(b"k2") == b"v2" and dbs[0].get(b"k") is None


# -- the deferred family (the reorder buffer): local writes wait in memory --

FAMILY = b"b"


class RealDB:
    """A partition's RocksDB as Faust opens it (rocksdict, raw mode),
    counting the entries written to it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = Rdict(str(path), Options(raw_mode=True))
        self.writes = 0

    def set_write_options(self, options: Any) -> None:
        self.db.set_write_options(options)

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
        self.db.write(batch, options)

    def iter(self) -> Any:
        return self.db.iter()

    @property
    def data(self) -> dict[bytes, bytes]:
        return dict(self.db.items())

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
    keep: int = 50_000, preloaded: dict[int, dict[bytes, bytes]] | None = None
) -> Iterator[tuple[FaustRocksStore, dict[int, RealDB], dict[int, int]]]:
    """A store over real RocksDBs (``preloaded`` entries in them), with
    Faust's persisted offsets in a dict."""
    with tempfile.TemporaryDirectory() as tmp:
        dbs: dict[int, RealDB] = {}
        persisted: dict[int, int] = {}

        def db_for_partition(partition: int) -> RealDB:
            if partition not in dbs:
                dbs[partition] = RealDB(Path(tmp) / str(partition))
            return dbs[partition]

        for partition, entries in (preloaded or {}).items():
            for key, value in entries.items():
                db_for_partition(partition).db.put(key, value)
        table = SimpleNamespace(
            name="t",
            changelog_topic="t-changelog",
            open_dbs=lambda: dbs,
            db_for=db_for_partition,
            set_persisted_offset=persisted.__setitem__,
            persisted_offset=persisted.get,
        )
        store = FaustRocksStore(table, FakeProducer(), deferred=FAMILY, keep=keep)  # type: ignore[arg-type]
        try:
            yield store, dbs, persisted
        finally:
            for db in dbs.values():
                db.db.close()


def test_each_db_gets_a_memtable_bloom_filter_when_it_opens() -> None:
    """Seen-id misses are answered by a filter, not a memtable search:
    RocksDB records the options set in the DB's latest OPTIONS file (set
    before the store first reads or writes the DB)."""
    with deferred_store() as (store, dbs, _):
        store.put(0, b"s1", b"state")
        store.take_writes()  # the first write to RocksDB
        latest = max(dbs[0].path.glob("OPTIONS-*"), key=lambda f: int(f.name.split("-")[1]))
        text = latest.read_text()
        for name, value in MEMTABLE_BLOOM.items():
            assert f"{name}={value}" in text


def test_local_writes_wait_for_the_cycle_and_are_written_as_one_batch() -> None:
    with deferred_store() as (store, dbs, _):
        store.write(0, [(b"s2", b"state", ()), (b"i1", b"seen", ())])
        store.write(0, [(b"s2", b"newer", ())])
        assert store.get(0, b"s2") == b"newer"  # read from memory
        assert 0 not in dbs or dbs[0].data == {}
        changelog = store.take_writes()  # the outbox cycle: now in RocksDB
        assert [c[:2] for c in changelog[0].records()] == [
            (b"s2", b"state"),
            (b"i1", b"seen"),
            (b"s2", b"newer"),
        ]
        assert dbs[0].data == {b"i1": b"seen", b"s2": b"newer"} and dbs[0].writes == 2


def test_a_buffer_entry_deleted_before_it_is_written_never_reaches_rocksdb() -> None:
    with deferred_store() as (store, dbs, _):
        store.write(0, [(b"b1", b"held", ()), (b"s1", b"state", ())])
        assert store.get(0, b"b1") == b"held"
        store.take_writes()
        assert dbs[0].data == {b"s1": b"state"}  # the buffer entry waits longer
        store.write(0, [(b"b1", None, ())])
        assert store.get(0, b"b1") is None
        store.sync()
        assert dbs[0].data == {b"s1": b"state"} and dbs[0].writes == 1
        # ... but the changelog got both: the put and the tombstone
        assert [c[:2] for c in store.take_writes()[0].records()] == [(b"b1", None)]


def test_confirmations_trailing_by_100_000_messages_still_save_the_writes() -> None:
    """A buffer entry waits for its gap, then for its confirmation (its
    deletion): up to ~84,000 waited at once in the throughput bench. With
    the default cap such entries never reach RocksDB."""
    lag, cycle = 100_000, 5_000
    with deferred_store(keep=DEFERRED_KEPT) as (store, dbs, _):
        for n in range(lag + 3 * cycle):
            changes: list[Any] = [(b"b%08d" % n, b"message", ()), (b"s", b"%d" % n, ())]
            if n >= lag:
                changes.insert(0, (b"b%08d" % (n - lag), None, ()))  # confirmed
            store.write(0, changes)
            if n % cycle == 0:
                store.take_writes()
        store.take_writes()
        assert not any(key.startswith(FAMILY) for key in dbs[0].data)
        assert dbs[0].writes == (lag + 3 * cycle) // cycle + 1  # the key states' batches


def test_queued_changelog_records_hold_nothing_the_garbage_collector_examines() -> None:
    """Until an outbox cycle takes them, a partition's changelog records
    are two lists of bytes: no tracked tuple per write (each young
    collection examined every one of them)."""
    with deferred_store() as (store, _, _):
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
    with deferred_store(preloaded={0: {b"b1": b"old"}}) as (store, dbs, _):
        assert store.get(0, b"b1") == b"old"
        store.write(0, [(b"b1", None, ())])  # a tombstone for RocksDB: it has the entry
        assert store.get(0, b"b1") is None
        assert dbs[0].data == {b"b1": b"old"}
        store.sync()
        assert dbs[0].data == {}


def test_a_rebalance_forgets_which_buffer_entries_a_db_holds() -> None:
    """A rebalance may close a DB and recover it from the changelog: after
    the sync before it, the entries recovered into the DB are read (what
    was known of the DB before would say it holds none)."""
    with deferred_store() as (store, dbs, _):
        assert store.get(0, b"b1") is None  # known: the DB holds no entry
        store.sync()  # before_rebalance
        dbs[0].db.put(b"b1", b"recovered")  # Faust's recovery writes the DB
        assert store.get(0, b"b1") == b"recovered"


def test_the_persisted_offset_waits_for_the_local_writes() -> None:
    """Faust's recovery resumes after the persisted offset: the local DB must
    hold everything before it, or a restart without sync would lose it."""
    with deferred_store() as (store, dbs, persisted):
        store.write(0, [(b"b1", b"held", ())])
        asyncio.run(store.flush(store.take_writes()))
        assert 0 not in persisted  # b1 is not in RocksDB yet
        store.write(0, [(b"s1", b"state", ())])
        asyncio.run(store.flush(store.take_writes()))
        assert 0 not in persisted
        store.sync()
        assert persisted[0] == 1 and dbs[0].data == {b"b1": b"held", b"s1": b"state"}
        store.write(1, [(b"s2", b"state", ())])
        asyncio.run(store.flush(store.take_writes()))
        assert persisted[1] == 0  # nothing waits: at once
        assert dbs[1].data == {b"s2": b"state"}


KEYS = [f + bytes([n]) for f in (b"b", b"s") for n in range(4)]


def reads_alike(store: FaustRocksStore, model: MemoryStore) -> None:
    for partition in (0, 1):
        for key in KEYS:
            assert store.get(partition, key) == model.get(partition, key), (partition, key)


@settings(max_examples=150, deadline=None)
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
            st.just(("cycle",)),
            st.just(("sync",)),
            st.just(("reopen",)),
            st.tuples(st.just("recover"), st.integers(0, 1), st.sampled_from(KEYS)),
        ),
        max_size=30,
    ),
    keep=st.integers(1, 6),
    preload=st.booleans(),
)
def test_deferred_writes_read_as_written(ops: list[Any], keep: int, preload: bool) -> None:
    """Whatever waits in memory, the store reads like the in-memory model;
    after a sync, RocksDB holds exactly the model's entries."""
    preloaded = {0: {b"b\x00": b"x", b"b\x03": b"y", b"s\x01": b"z"}} if preload else {}
    model = MemoryStore()
    for partition, entries in preloaded.items():
        model.write(partition, [(k, v, ()) for k, v in entries.items()])
    with deferred_store(keep, preloaded) as (store, dbs, _):
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
            elif op[0] == "cycle":
                store.take_writes()
            elif op[0] == "sync":
                store.sync()
            elif op[0] == "recover":  # a rebalance: Faust replays a record into the open DB
                store.sync()
                db = store._db(op[1])
                db.db.put(op[2], b"recovered")
                model.write(op[1], [(op[2], b"recovered", ())])
                store.sync()  # the topology's on_assigned
            else:  # a rebalance: sync, then Faust closes and reopens the DBs
                store.sync()
                for partition in list(dbs):
                    dbs[partition] = dbs[partition].reopen()
            reads_alike(store, model)
        store.sync()
        for partition in (0, 1):
            on_disk = dbs[partition].data if partition in dbs else {}
            assert on_disk == dict(model.items(partition))
