"""Stores keeps decoded key states in memory and writes through
(state/stores.py)."""

from __future__ import annotations

import gc

from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.deduplicator import Seen, SeenWindow
from seqkeeper.processors.envelope import Message
from seqkeeper.processors.resequencer import KeyState, Step
from seqkeeper.state import codecs
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores


class LogStore(MemoryStore):
    """Records every read and write, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, int, bytes]] = []

    def get(self, partition: int, key: bytes) -> bytes | None:
        self.log.append(("get", partition, key))
        return super().get(partition, key)

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        super().put(partition, key, value)
        self.log.append(("put", partition, key))

    def delete(self, partition: int, key: bytes) -> None:
        super().delete(partition, key)
        self.log.append(("delete", partition, key))


def stored(store: MemoryStore, partition: int, key: str) -> tuple[KeyState, SeenWindow]:
    return codecs.decode_key_state(MemoryStore.get(store, partition, codecs.key_state_key(key)))


def test_a_step_is_written_at_once_deletions_first_and_read_back_from_memory() -> None:
    store = LogStore()
    stores = Stores(store)
    assert stores.load(0, "k") == (KeyState(), SeenWindow())
    assert store.log == [("get", 0, codecs.key_state_key("k"))]
    store.log.clear()
    stores.save(0, "k", Step(KeyState(4, confirmed=4), buffer_deletes=(1, 2, 3)), SeenWindow(0, 3))
    assert store.log == [
        *(("delete", 0, codecs.buffer_key("k", s)) for s in (1, 2, 3)),
        ("put", 0, codecs.key_state_key("k")),
    ]
    assert stored(store, 0, "k") == (KeyState(4, confirmed=4), SeenWindow(0, 3))
    store.log.clear()
    assert stores.load(0, "k") == (KeyState(4, confirmed=4), SeenWindow(0, 3))
    assert store.log == []  # no lookup


def test_a_peek_keeps_nothing_and_tells_a_key_never_stored() -> None:
    store = LogStore()
    stores = Stores(store)
    assert stores.peek(0, "k") is None
    assert store.log == [("get", 0, codecs.key_state_key("k"))] and not stores._states
    stores.save(0, "k", Step(KeyState(2)), SeenWindow(0, 1))
    stores.confirm(0, "k", Step(KeyState(2, confirmed=2)), SeenWindow(0, 1))
    store.log.clear()
    assert stores.peek(0, "k") == (KeyState(2, confirmed=2), SeenWindow(0, 1))  # (in memory)
    assert store.log == []


def test_the_buffer_finds_messages_saved_here_without_a_parse_and_never_a_deleted_one() -> None:
    store = LogStore()
    stores = Stores(store)
    m5 = Message("k", "m5", 5, "t", b'{"messageId":"m5","seq":5,"type":"t"}')
    m6 = Message("k", "m6", 6, "t", b'{"messageId":"m6","seq":6,"type":"t"}')
    for m in (m5, m6):
        stores.save(0, "k", Step(KeyState(1, buffered=m.seq - 4), buffer_put=m), SeenWindow())
    store.log.clear()
    gc.collect()
    assert not any(gc.is_tracked(held) for held in stores._held.values())  # (see Stores._held)
    assert stores.buffer(0, "k").get(5) == m5  # no read, no parse
    assert store.log == []
    assert stores.buffer(1, "k").get(5) is None  # another partition's key
    stores.confirm(0, "k", Step(KeyState(7, confirmed=6), buffer_deletes=(5,)), SeenWindow())
    assert stores.buffer(0, "k").get(5) is None
    assert stores.buffer(0, "k").get(6) == m6
    store.delete(0, codecs.buffer_key("k", 6))  # a recovery replaced the partition's state
    stores.forget_cached()
    assert stores.buffer(0, "k").get(6) is None


def test_the_same_key_buffered_in_two_partitions_is_never_mixed_up() -> None:
    """Held messages are found by the buffer entry's store key, which two
    partitions may share: each partition gets its own message (one of them
    from the store), and a deletion in one leaves the other's."""
    store = LogStore()
    stores = Stores(store)
    first = Message("k", "m5", 5, "t", b'{"messageId":"m5","seq":5,"type":"t"}')
    other = Message("k", "x5", 5, "t", b'{"messageId":"x5","seq":5,"type":"t"}')
    stores.save(0, "k", Step(KeyState(1, buffered=1), buffer_put=first), SeenWindow())
    stores.save(1, "k", Step(KeyState(1, buffered=1), buffer_put=other), SeenWindow())
    assert stores.buffer(0, "k").get(5) == first
    assert stores.buffer(1, "k").get(5) == other
    stores.confirm(1, "k", Step(KeyState(6, confirmed=6), buffer_deletes=(5,)), SeenWindow())
    assert stores.buffer(1, "k").get(5) is None
    assert stores.buffer(0, "k").get(5) == first


slots = st.tuples(st.integers(0, 1), st.sampled_from(["a", "b", "c", "d"]))
ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["save", "confirm", "recovered"]), slots, st.integers(1, 50)),
        st.tuples(st.sampled_from(["load", "stop", "reassigned"]), slots, st.just(0)),
    ),
    max_size=40,
)


@given(ops, st.integers(1, 3))
def test_loads_give_the_newest_state_and_the_store_lags_only_by_confirmations(
    script: list[tuple[str, tuple[int, str], int]], keep: int
) -> None:
    """Against a model: a load gives the newest state, whatever was kept or
    dropped; the store holds it too, or lags by confirmations not yet
    written (by the key's next step, ``settle`` at a clean stop or a
    rebalance, or when a full memory is dropped); a recovery replaces both."""
    store = MemoryStore()
    stores = Stores(store, keep=keep)
    newest: dict[tuple[int, str], tuple[KeyState, SeenWindow]] = {}
    possible: dict[tuple[int, str], list[tuple[KeyState, SeenWindow]]] = {}  # in the store
    pending: set[tuple[int, str]] = set()  # confirmed since written
    for op, (p, k), n in script:
        slot = (p, k)
        if op == "save":
            newest[slot] = (KeyState(next_expected=n), SeenWindow(0, n))
            stores.save(p, k, Step(newest[slot][0]), newest[slot][1])
            possible[slot] = [newest[slot]]
            pending.discard(slot)
        elif op == "confirm":
            before = newest.get(slot, (KeyState(), SeenWindow()))
            newest[slot] = (KeyState(before[0].next_expected, confirmed=n), before[1])
            stores.confirm(p, k, Step(newest[slot][0]), newest[slot][1])
            possible.setdefault(slot, [before]).append(newest[slot])
            pending.add(slot)
        elif op == "stop":  # a clean stop writes every confirmation
            stores.settle()
            assert all(stored(store, *s) == newest[s] for s in newest)
            possible = {s: [want] for s, want in newest.items()}
            pending.clear()
        elif op == "reassigned":  # keeps partition p only (on_assigned)
            stores.settle({p})
            stores.forget_cached()
            assert all(stored(store, *s) == newest[s] for s in pending if s[0] == p)
            newest = {s: stored(store, *s) for s in newest}  # the others' lag stays
            possible = {s: [want] for s, want in newest.items()}
            pending.clear()
        elif op == "recovered":  # another owner's state replayed into the store
            store.put(
                p, codecs.key_state_key(k), codecs.encode_key_state(KeyState(n), SeenWindow())
            )
            stores.forget_cached()
            newest[slot] = stored(store, p, k)
            newest = {s: stored(store, *s) for s in newest}
            possible = {s: [want] for s, want in newest.items()}
            pending.clear()
        assert len(stores._states) <= keep
        for s, want in newest.items():
            kept = dict(stores._states)
            peeked = stores.peek(*s)  # a state query's read: the same, nothing kept
            assert peeked == want or (peeked is None and want == (KeyState(), SeenWindow()))
            assert stores._states == kept
            assert stores.load(*s) == want
            assert stored(store, *s) in possible[s]


@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.sampled_from("ab"), st.integers(0, 4), st.integers(0, 4)),
        min_size=1,
        max_size=30,
    )
)
def test_each_view_answers_for_the_key_it_was_asked_for(
    asks: list[tuple[int, str, int, int]],
) -> None:
    """``buffer`` and ``seen`` hand out one view each, aimed anew at every
    call: whichever key was asked for before, a view answers as a view made
    for its own key would (the seen ids' window included)."""
    stores = Stores(MemoryStore())
    for partition in (0, 1):  # seen ids at positions 0..2, buffer entries 1..2
        for key in "ab":
            tag = f"{partition}{key}"
            # (the key state of format 3, whose FIFO entries are p records)
            stores.state.put(
                partition,
                codecs.key_state_key(key),
                codecs.encode_key_state(KeyState(), SeenWindow(0, 3)),
            )
            for position in range(3):
                mid = f"{tag}-{position}"
                stores.state.put(
                    partition,
                    codecs.seen_id_key(key, mid),
                    codecs.encode_seen_id(Seen(position, 1.0, 7)),
                )
                stores.state.put(
                    partition,
                    codecs.seen_position_key(key, position),
                    codecs.encode_seen_position(mid, 1.0),
                )
            for seq in (1, 2):
                stores.state.put(
                    partition,
                    codecs.buffer_key(key, seq),
                    b'{"messageId":"%s-%d","seq":%d,"type":"t"}' % (tag.encode(), seq, seq),
                )
    for partition, key, head, seq in asks:
        tag = f"{partition}{key}"
        window = SeenWindow(head, 3)
        seen = stores.seen(partition, key, window)
        for position in range(3):
            found = seen.get(f"{tag}-{position}")
            assert (found is not None) == (head <= position), (tag, head, position)
            assert seen.at(position) == (f"{tag}-{position}", 1.0)
        held = stores.buffer(partition, key).get(seq)
        assert (held is None) == (seq not in (1, 2))
        assert held is None or (held.key, held.message_id) == (key, f"{tag}-{seq}")
