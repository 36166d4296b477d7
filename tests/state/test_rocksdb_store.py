"""FaustRocksStore keeps no partition's DB alive: Faust closes a revoked
partition's RocksDB by dropping its last reference (``revoke_partitions``),
and a DB still open holds RocksDB's lock when the partition comes back to
the worker ("lock hold by current process": the worker crashed)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from state.memory import MemoryStore
from state.rocksdb import FaustRocksStore


class FakeDB:
    def __init__(self) -> None:
        self.options: Any = None
        self.data: dict[bytes, bytes] = {}

    def set_write_options(self, options: Any) -> None:
        self.options = options

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
        name="t", data=SimpleNamespace(_dbs=dbs, _db_for_partition=db_for_partition)
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


class SortedDB(FakeDB):
    """A FakeDB with RocksDB's iterator and a count of writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def put(self, key: bytes, value: bytes) -> None:
        self.writes += 1
        super().put(key, value)

    def delete(self, key: bytes) -> None:
        self.writes += 1
        super().delete(key)

    def iter(self) -> Any:
        return SortedIter(self.data)


class SortedIter:
    def __init__(self, data: dict[bytes, bytes]) -> None:
        self._items = sorted(data.items())
        self._i = len(self._items)

    def seek(self, start: bytes) -> None:
        self._i = next((i for i, (k, _) in enumerate(self._items) if k >= start), len(self._items))

    def valid(self) -> bool:
        return self._i < len(self._items)

    def key(self) -> bytes:
        return self._items[self._i][0]

    def value(self) -> bytes:
        return self._items[self._i][1]

    def next(self) -> None:
        self._i += 1


class FakeProducer:
    def __init__(self) -> None:
        self.sent: dict[tuple[str, int], int] = {}

    async def send(self, records: dict[tuple[str, int], list[Any]]) -> dict[tuple[str, int], int]:
        last = {}
        for tp, items in records.items():
            self.sent[tp] = self.sent.get(tp, -1) + len(items)
            last[tp] = self.sent[tp]
        return last


def deferred_store(
    keep: int = 50_000, preloaded: dict[int, dict[bytes, bytes]] | None = None
) -> tuple[FaustRocksStore, dict[int, SortedDB], dict[int, int]]:
    dbs: dict[int, SortedDB] = {}
    persisted: dict[int, int] = {}
    for partition, entries in (preloaded or {}).items():
        dbs[partition] = SortedDB()
        dbs[partition].data.update(entries)

    def db_for_partition(partition: int) -> SortedDB:
        return dbs.setdefault(partition, SortedDB())

    table = SimpleNamespace(
        name="t",
        changelog_topic=SimpleNamespace(get_topic_name=lambda: "t-changelog"),
        data=SimpleNamespace(
            _dbs=dbs,
            _db_for_partition=db_for_partition,
            set_persisted_offset=lambda tp, offset: persisted.__setitem__(tp.partition, offset),
            persisted_offset=lambda tp: persisted.get(tp.partition),
        ),
    )
    store = FaustRocksStore(table, FakeProducer(), deferred=FAMILY, keep=keep)  # type: ignore[arg-type]
    return store, dbs, persisted


def test_a_buffer_entry_deleted_before_it_is_written_never_reaches_rocksdb() -> None:
    store, dbs, _ = deferred_store()
    store.write(0, [(b"b1", b"held", ()), (b"s1", b"state", ())])
    assert store.get(0, b"b1") == b"held"  # read from memory
    assert dbs[0].data == {b"s1": b"state"}  # other families go through
    store.write(0, [(b"b1", None, ())])
    assert store.get(0, b"b1") is None
    store.sync()
    assert dbs[0].data == {b"s1": b"state"} and dbs[0].writes == 1
    # ... but the changelog got both: the put and the tombstone
    assert [c[:2] for c in store.take_writes()[0]] == [
        (b"b1", b"held"),
        (b"s1", b"state"),
        (b"b1", None),
    ]


def test_a_db_that_held_buffer_entries_when_it_opened_is_read() -> None:
    store, dbs, _ = deferred_store(preloaded={0: {b"b1": b"old"}})
    assert store.get(0, b"b1") == b"old"
    store.write(0, [(b"b1", None, ())])  # a tombstone for RocksDB: it has the entry
    assert store.get(0, b"b1") is None
    assert dbs[0].data == {b"b1": b"old"}
    store.sync()
    assert dbs[0].data == {}


def test_the_persisted_offset_waits_for_the_local_writes() -> None:
    """Faust's recovery resumes after the persisted offset: the local DB must
    hold everything before it, or a restart without sync would lose it."""
    store, dbs, persisted = deferred_store()
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


KEYS = [f + bytes([n]) for f in (b"b", b"s") for n in range(4)]


def reads_alike(store: FaustRocksStore, model: MemoryStore) -> None:
    for partition in (0, 1):
        for key in KEYS:
            assert store.get(partition, key) == model.get(partition, key), (partition, key)


@settings(max_examples=200, deadline=None)
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
            st.tuples(st.just("items"), st.integers(0, 1)),
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
    preloaded = {0: {b"b\x00": b"x", b"b\x03": b"y"}} if preload else {}
    store, dbs, _ = deferred_store(keep, {p: dict(e) for p, e in preloaded.items()})
    model = MemoryStore()
    for partition, entries in preloaded.items():
        model.write(partition, [(k, v, ()) for k, v in entries.items()])
    for op in ops:
        if op[0] == "write":
            changes = [(k, v, ()) for k, v in op[2]]
            store.write(op[1], changes)
            model.write(op[1], changes)
        elif op[0] == "seek":
            start = b"b" + bytes([op[2]])
            assert store.seek(op[1], start, b"b") == model.seek(op[1], start, b"b")
        elif op[0] == "items":
            assert list(store.items(op[1])) == list(model.items(op[1]))
        elif op[0] == "sync":
            store.sync()
        elif op[0] == "recover":  # a rebalance: Faust replays a record into the open DB
            store.sync()
            db = dbs.setdefault(op[1], SortedDB())
            db.put(op[2], b"recovered")
            model.write(op[1], [(op[2], b"recovered", ())])
            store.sync()  # the topology's on_assigned
        else:  # a rebalance: sync, then Faust drops and reopens the DBs
            store.sync()
            for partition in list(dbs):
                reopened = SortedDB()
                reopened.data.update(dbs[partition].data)
                dbs[partition] = reopened
        reads_alike(store, model)
    store.sync()
    for partition in (0, 1):
        on_disk = dbs[partition].data if partition in dbs else {}
        assert on_disk == dict(model.items(partition))
