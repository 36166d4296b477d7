"""LayeredPartitionStore under exactly-once (``atomic``): a taken cycle's records
commit in one transaction or not at all, so a write that a later write of
the same cycle replaces is left out, and so is the delete when the key was
absent before the cycle (a reorder-buffer entry put and confirmed in one
transaction). What the committed changelog holds is the same as with every
record sent, and RocksDB still holds only what it holds."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.rocksdb import FAUST_OFFSET_KEY, Cycle
from tests.state.test_rocksdb_store import KEYS, TOPIC, apply, deferred_store, reads_alike

Records = list[tuple[bytes, bytes | None]]


def test_a_buffer_entry_put_and_deleted_in_one_cycle_sends_nothing() -> None:
    with deferred_store() as (store, dbs):
        store.atomic = True
        store.write(0, [(b"b\x01", b"m", ()), (b"s\x01", b"state", ())])
        store.write(0, [(b"b\x01", None, ())])  # confirmed in the same cycle
        taken = store.take_writes()
        assert [r[:2] for r in taken[0].records()] == [(b"s\x01", b"state")]
        store.committed(taken, {(TOPIC, 0): 0})
        assert store.get(0, b"b\x01") is None and store.get(0, b"s\x01") == b"state"
        # one put in a cycle, its delete in the next: both are sent
        store.write(0, [(b"b\x02", b"m", ())])
        first = store.take_writes()
        store.write(0, [(b"b\x02", b"x", ()), (b"b\x02", None, ())])
        second = store.take_writes()
        assert [r[:2] for r in first[0].records()] == [(b"b\x02", b"m")]
        assert [r[:2] for r in second[0].records()] == [(b"b\x02", None)]


def test_a_key_written_twice_in_one_cycle_sends_its_last_value() -> None:
    with deferred_store() as (store, _):
        store.atomic = True
        store.write(0, [(b"s\x01", b"one", ()), (b"b\x01", b"m", ())])
        store.write(0, [(b"s\x01", b"two", ())])
        taken = store.take_writes()
        assert [r[:2] for r in taken[0].records()] == [(b"b\x01", b"m"), (b"s\x01", b"two")]


def test_at_least_once_sends_every_record() -> None:
    with deferred_store() as (store, _):
        store.write(0, [(b"b\x01", b"m", ()), (b"b\x01", None, ())])
        assert len(list(store.take_writes()[0].records())) == 2


@settings(max_examples=300, deadline=None)
@example(  # put, committed; put and deleted in one cycle: the delete is sent
    ops=[
        ("write", 0, [(b"b\x01", b"v")]),
        ("take",),
        ("write", 0, [(b"b\x01", b"w"), (b"b\x01", None)]),
        ("take",),
        ("commit",),
        ("commit",),
    ],
    keep=1000,
    checkpoint=1000,
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
            st.just(("take",)),
            st.just(("commit",)),
            st.just(("sync",)),
            st.just(("reopen",)),
        ),
        max_size=40,
    ),
    keep=st.one_of(st.integers(1, 6), st.just(1000)),
    checkpoint=st.one_of(st.integers(1, 12), st.just(1000)),
)
def test_a_cycle_s_transaction_holds_what_all_its_writes_would_leave(
    ops: list[Any], keep: int, checkpoint: int
) -> None:
    """After every committed cycle the changelog compacts to what it would
    with every write sent; a cycle sends one record per key at most; a key
    the cycle leaves deleted has at most its
    delete in it, and nothing when the key was absent before and written
    more than once in the cycle; reads see
    every write; and a ``kill -9`` anywhere leaves RocksDB plus the
    changelog after its offset equal to the committed changelog."""
    model = MemoryStore()
    sent: dict[int, Records] = {0: [], 1: []}  # the changelog (what went)
    full: dict[int, Records] = {0: [], 1: []}  # every write, as at-least-once sends them
    current: dict[int, Records] = {0: [], 1: []}  # the writes of the cycle not yet taken
    flight: list[tuple[Cycle, dict[int, Records]]] = []
    with deferred_store(keep, None, checkpoint) as (store, dbs):
        store.atomic = True

        def compacted(records: Records) -> dict[bytes, bytes]:
            state: dict[bytes, bytes] = {}
            apply(state, records)
            return state

        def take() -> None:
            nonlocal current
            flight.append((store.take_writes(), current))
            current = {0: [], 1: []}

        def commit() -> None:
            taken, writes = flight.pop(0)
            last = {}
            for partition in (0, 1):
                before = compacted(sent[partition])
                records = (
                    [(k, v) for k, v, _ in taken[partition].records()] if partition in taken else []
                )
                written = [k for k, _ in writes[partition]]
                for key, value in dict(writes[partition]).items():
                    if value is not None or written.count(key) == 1:
                        continue  # (a lone delete is sent: whether it deletes is not asked)
                    kept = [r for r in records if r[0] == key]
                    assert kept == ([] if key not in before else [(key, None)]), (key, kept)
                assert len(records) <= len(writes[partition])
                assert len({k for k, _ in records}) == len(records)  # (a record per key)
                sent[partition] += records
                full[partition] += writes[partition]
                assert compacted(sent[partition]) == compacted(full[partition]), partition
                if records:
                    last[(TOPIC, partition)] = len(sent[partition]) - 1
            store.committed(taken, last)

        for op in ops:
            if op[0] == "write":
                changes = [(k, v, ()) for k, v in op[2]]
                store.write(op[1], changes)
                model.write(op[1], changes)
                current[op[1]] += op[2]
            elif op[0] == "take":
                if len(flight) < 2:  # (two stages at most)
                    take()
            elif op[0] == "commit":
                if flight:
                    commit()
            elif op[0] == "sync":
                store.sync()
            else:  # a rebalance's sync, then Faust closes and reopens the DBs
                store.sync()
                for partition in list(dbs):
                    dbs[partition] = dbs[partition].reopen()
            reads_alike(store, model)
            for partition in (0, 1):  # a kill -9 here: the cycles in flight are aborted
                db = dbs[partition]
                replayed = db.state
                apply(replayed, sent[partition][db.offset + 1 :])
                assert replayed == compacted(sent[partition]), partition
        take()
        while flight:
            commit()
        store.sync()
        for partition in (0, 1):
            assert dbs[partition].state == compacted(full[partition])
            assert dbs[partition].db.get(FAUST_OFFSET_KEY) is not None or not sent[partition]
