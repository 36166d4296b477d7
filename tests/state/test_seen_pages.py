"""The seen ids' FIFO in pages (state format 4, state/stores.py): the
Idempotent Receiver decides what it decided with one FIFO record per id,
state of format 3 (``p`` records) is read and emptied without a rewrite, a
page is one record per ``PAGE_IDS`` ids, and nothing is left once every id
is forgotten."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.processors import deduplicator, key_retention
from seqkeeper.processors.deduplicator import Retention, Seen, SeenWindow
from seqkeeper.processors.envelope import Message
from seqkeeper.processors.key_retention import KeyRetention
from seqkeeper.processors.resequencer import KeyState, Step
from seqkeeper.state import codecs
from seqkeeper.state.codecs import PAGE_IDS
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores

KEYS = ("a", "b")
DONE = KeyState(next_expected=1, confirmed=1)


class Reference:
    """One id, one FIFO entry, in memory: what format 3 kept per key."""

    def __init__(self) -> None:
        self.ids: dict[str, Seen] = {}
        self.fifo: dict[int, tuple[str, float]] = {}
        self.window = SeenWindow()

    def get(self, message_id: str) -> Seen | None:
        return self.ids.get(message_id)

    def at(self, position: int) -> tuple[str, float] | None:
        return self.fifo.get(position)

    def apply(self, window: SeenWindow, remember: tuple[str, Seen] | None, forget: tuple) -> None:
        for position, mid in forget:
            del self.ids[mid]
            del self.fifo[position]
        if remember is not None:
            mid, seen = remember
            self.ids[mid] = seen
            self.fifo[seen.position] = (mid, seen.accepted_at)
        self.window = window


def legacy(store: MemoryStore, ref: Reference, key: str, n: int) -> None:
    """``n`` ids of ``key`` as format 3 wrote them: ``i`` and ``p`` records
    and a key state of the older layout."""
    for position in range(n):
        mid = f"{key}-old{position}"
        seen = Seen(position, 0.0, position)
        store.put(0, codecs.seen_id_key(key, mid), codecs.encode_seen_id(seen))
        store.put(0, codecs.seen_position_key(key, position), codecs.encode_seen_position(mid, 0.0))
        ref.apply(SeenWindow(0, position + 1), (mid, seen), ())
    window = SeenWindow(0, n, 0.0 if n else deduplicator.UNKNOWN)
    ref.window = window
    store.put(0, codecs.key_state_key(key), codecs.encode_key_state(DONE, window))


def families(store: MemoryStore, key: str) -> dict[bytes, int]:
    found: dict[bytes, int] = {}
    for store_key, _ in store.items(0):
        if store_key[:1] != b"_" and codecs.key_of(store_key) == key:
            found[store_key[:1]] = found.get(store_key[:1], 0) + 1
    return found


def pages(store: MemoryStore, key: str) -> set[int]:
    prefix = codecs.SEEN_PAGE + codecs.key_prefix(key)
    return {int.from_bytes(k[-8:], "big") for k, _ in store.items(0, prefix)}


op = st.one_of(
    st.tuples(st.just("offer"), st.sampled_from(KEYS), st.integers(0, 40), st.floats(0, 30)),
    st.tuples(st.just("sweep"), st.sampled_from(KEYS), st.integers(1, 20), st.floats(0, 30)),
    st.tuples(st.just("restart"), st.sampled_from(KEYS), st.just(0), st.just(0.0)),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(op, max_size=120),
    st.integers(1, 30),
    st.sampled_from([5.0, 50.0, 1e9]),
    st.tuples(st.integers(0, 20), st.integers(0, 20)),
)
def test_pages_decide_as_one_record_per_id_and_leave_nothing_behind(
    ops: list[tuple[str, str, int, float]],
    max_per_key: int,
    max_age: float,
    old: tuple[int, int],
) -> None:
    retention = Retention(max_age=max_age, max_per_key=max_per_key)
    store = MemoryStore()
    refs = {key: Reference() for key in KEYS}
    for key, n in zip(KEYS, old, strict=True):
        legacy(store, refs[key], key, n)
    stores = Stores(store)
    now, source = 1.0, 100
    for kind, key, n, dt in ops:
        now += dt
        ref = refs[key]
        if kind == "restart":  # (what is only in memory is dropped)
            stores = Stores(store)
            continue
        state, window = stores.load(0, key)
        assert window == ref.window
        if kind == "offer":
            source += 1
            # an id offered again is a copy (an earlier one: a redelivery)
            offered = source if n % 7 else source - 1
            message = Message(key, f"{key}-{n}", 1, "t", b"")
            want = deduplicator.offer(ref, ref.window, message, now, retention, offered)
            got = deduplicator.offer(
                stores.seen(0, key, window), window, message, now, retention, offered
            )
            assert got == want
            if got.accepted:
                ref.apply(want.window, want.remember, want.forget)
                stores.save(0, key, Step(state), got.window, got)
        else:
            want_window, want_forget = deduplicator.sweep(ref, ref.window, now, retention, n)
            swept, forget = deduplicator.sweep(
                stores.seen(0, key, window), window, now, retention, n
            )
            assert (swept, forget) == (want_window, want_forget)
            ref.apply(want_window, None, want_forget)
            if swept.head != window.head:
                stores.forget(0, key, state, swept, forget)
            else:
                ref.window = window
        # what is stored: an i record per remembered id; pages only behind
        # the open one, from the head's on, with the ids after legacy_below
        page = stores.page(0, key)
        w = ref.window
        assert families(store, key).get(codecs.SEEN_ID, 0) == len(ref.ids)
        assert families(store, key).get(codecs.SEEN_POSITION, 0) == sum(
            1 for p in ref.fifo if p < page.legacy_below
        )
        assert pages(store, key) <= set(range(w.head // PAGE_IDS, w.tail // PAGE_IDS))
        assert len(page.ids) <= PAGE_IDS
        # the open page holds the window's newest ids, none it forgot
        assert page.first >= w.head and page.first + len(page.ids) == w.tail
    # every id forgotten, then the key: nothing left but its marker
    for key in KEYS:
        state, window = stores.load(0, key)
        plan = key_retention.plan(
            DONE,
            window,
            stores.seen(0, key, window),
            now + 1e10,
            KeyRetention(idle=1.0),
            10_000,
        )
        assert plan is not None and plan.marker is not None
        stores.retire(0, key, DONE, plan, False)
        assert families(store, key) == {codecs.FORGOTTEN: 1}


def test_a_page_is_one_record_per_page_ids_accepted() -> None:
    store = MemoryStore()
    stores = Stores(store)
    writes: list[bytes] = []
    write = store.write
    store.write = lambda p, changes: (writes.extend(k for k, _, _ in changes), write(p, changes))  # type: ignore[method-assign]
    for n in range(3 * PAGE_IDS):
        state, window = stores.load(0, "k")
        d = deduplicator.offer(
            stores.seen(0, "k", window), window, Message("k", f"m{n}", 1, "t", b""), 1.0
        )
        stores.save(0, "k", Step(state), d.window, d)
    assert writes.count(codecs.key_state_key("k")) == 3 * PAGE_IDS
    assert sum(1 for k in writes if k[:1] == codecs.SEEN_ID) == 3 * PAGE_IDS
    assert sum(1 for k in writes if k[:1] == codecs.SEEN_PAGE) == 3
    assert not any(k[:1] == codecs.SEEN_POSITION for k in writes)
    # a fresh reader (a restart, a restore) finds every id, in pages or in
    # the key state, and drops a copy of each
    again = Stores(store)
    state, window = again.load(0, "k")
    for n in range(3 * PAGE_IDS):
        d = deduplicator.offer(
            again.seen(0, "k", window), window, Message("k", f"m{n}", 1, "t", b""), 2.0
        )
        assert not d.accepted


def test_a_page_a_crash_left_beyond_the_window_goes_with_its_key() -> None:
    """A step that fills a page writes the page record before the key state:
    cut between them, the record lies beyond the window; forgetting the key
    deletes it too."""
    store = MemoryStore()
    stores = Stores(store)
    for n in range(PAGE_IDS - 1):
        state, window = stores.load(0, "k")
        d = deduplicator.offer(
            stores.seen(0, "k", window), window, Message("k", f"m{n}", 1, "t", b""), 1.0
        )
        stores.save(0, "k", Step(state), d.window, d)
    store.put(
        0,
        codecs.seen_page_key("k", 0),
        codecs.encode_seen_page(codecs.seen_page(0, 0, ["x"] * PAGE_IDS)),
    )
    stores = Stores(store)  # (the restart after the crash)
    state, window = stores.load(0, "k")
    plan = key_retention.plan(
        DONE, window, stores.seen(0, "k", window), 1e10, KeyRetention(idle=1.0), 10_000
    )
    assert plan is not None and plan.marker is not None
    stores.retire(0, "k", DONE, plan, False)
    assert families(store, "k") == {codecs.FORGOTTEN: 1}


def offer(stores: Stores, mid: str, now: float, source: int, retention: Retention) -> bool:
    state, window = stores.load(0, "k")
    d = deduplicator.offer(
        stores.seen(0, "k", window), window, Message("k", mid, 1, "t", b""), now, retention, source
    )
    if d.accepted:
        stores.save(0, "k", Step(DONE), d.window, d)
    return d.accepted


def test_a_cut_sweep_never_costs_an_id_accepted_since_its_record() -> None:
    """A sweep's write deletes the forgotten ids' records first; cut before
    its key state, the pages still name them. An id forgotten early may pass
    again (forgetting early is harmless), but its new record belongs to its
    new position: evicting the old one must not delete it."""
    retention = Retention(max_age=10.0, max_per_key=1000)
    store = MemoryStore()
    stores = Stores(store)
    for n, (mid, t) in enumerate([("A", 1.0), ("B", 1.5), ("C", 2.0), ("D", 8.0)]):
        assert offer(stores, mid, t, n, retention)
    state, window = stores.load(0, "k")
    swept, forget = deduplicator.sweep(stores.seen(0, "k", window), window, 12.5, retention, 10)
    assert [mid for _, mid in forget] == ["A", "B", "C"]
    write = store.write
    store.write = lambda p, changes: write(p, changes[:3])  # type: ignore[method-assign]
    stores.forget(0, "k", state, swept, forget)  # (cut: the three i records only)
    store.write = write  # type: ignore[method-assign]
    stores = Stores(store)  # (the restart)
    assert offer(stores, "C", 12.5, 10, retention)  # forgotten early: passes again
    assert offer(stores, "E", 13.0, 11, retention)  # evicts the old positions
    assert not offer(stores, "C", 14.0, 12, retention)  # remembered since 12.5


def test_a_p_record_a_cut_step_left_at_a_format_3_tail_is_deleted() -> None:
    store = MemoryStore()
    ref = Reference()
    legacy(store, ref, "k", 3)
    stray = codecs.seen_position_key("k", 3)  # (its step cut before the key state)
    store.put(0, stray, codecs.encode_seen_position("x", 0.0))
    stores = Stores(store)
    assert offer(stores, "new", 1.0, 1, Retention())
    assert store.get(0, stray) is None
    assert families(store, "k") == {codecs.KEY_STATE: 1, codecs.SEEN_ID: 4, codecs.SEEN_POSITION: 3}
