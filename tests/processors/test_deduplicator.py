from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors import deduplicator
from seqkeeper.processors.deduplicator import (
    ALL_IDS,
    EVICT_PER_ACCEPT,
    Retention,
    Seen,
    SeenWindow,
    id_bits,
)
from seqkeeper.processors.envelope import Message


class Log:
    """In-memory SeenLog, applied like the shell applies decisions."""

    def __init__(self) -> None:
        self.ids: dict[str, Seen] = {}
        self.fifo: dict[int, tuple[str, float]] = {}
        self.window = SeenWindow()
        self.reads = 0  # FIFO entries read
        self.gets = 0  # seen ids looked up

    def get(self, message_id: str) -> Seen | None:
        self.gets += 1
        return self.ids.get(message_id)

    def at(self, position: int) -> tuple[str, float] | None:
        self.reads += 1
        return self.fifo.get(position)

    def offer(self, mid: str, now: float, retention: Retention) -> bool:
        d = deduplicator.offer(self, self.window, Message("k", mid, 1, "t", b""), now, retention)
        assert d.message_id == mid
        if d.accepted:
            assert d.remember is not None and d.remember[1].position == self.window.tail
            aged = [f for f in d.forget if f[0] >= self.window.tail + 1 - retention.max_per_key]
            assert len(aged) <= EVICT_PER_ACCEPT
            for position, forgotten in d.forget:
                assert self.fifo.pop(position)[0] == forgotten
                del self.ids[forgotten]
            rid, seen = d.remember
            self.fifo[seen.position] = (rid, seen.accepted_at)
            self.ids[rid] = seen
            self.window = d.window
        else:
            assert d.window == self.window and d.remember is None and not d.forget
            assert not d.replay  # no source given
        assert self.window.size == len(self.fifo) == len(self.ids)
        assert self.window.size <= retention.max_per_key
        if self.window.size:  # ``oldest`` is the head's time, or says "read it"
            head_at = self.fifo[self.window.head][1]
            oldest = self.window.oldest
            assert oldest == head_at or oldest <= now - retention.max_age
        for remembered in self.ids:  # the filter holds every remembered id's bits
            assert self.window.ids & id_bits(remembered) == id_bits(remembered)
        return d.accepted


@given(
    st.lists(st.sampled_from([f"m{i}" for i in range(12)]), max_size=80),
    st.integers(1, 6),
    st.floats(1.0, 50.0),
)
def test_remembered_ids_are_dropped_and_memory_is_bounded(
    arrivals: list[str], max_per_key: int, max_age: float
) -> None:
    retention = Retention(max_age=max_age, max_per_key=max_per_key)
    log = Log()
    seen_ever: set[str] = set()
    for t, mid in enumerate(arrivals):
        remembered = log.get(mid) is not None
        accepted = log.offer(mid, float(t), retention)
        assert accepted == (not remembered)  # dropped exactly while remembered
        if mid not in seen_ever:
            assert accepted  # a first arrival is always accepted
        seen_ever.add(mid)


def test_without_eviction_each_id_is_accepted_once() -> None:
    log = Log()
    accepted = [m for m in ["a", "b", "a", "c", "b", "a"] if log.offer(m, 0.0, Retention())]
    assert accepted == ["a", "b", "c"]


def test_age_eviction_and_sweep() -> None:
    retention = Retention(max_age=10.0, max_per_key=100)
    log = Log()
    for i in range(5):
        log.offer(f"old{i}", float(i), retention)
    log.offer("new", 100.0, retention)  # forgets at most EVICT_PER_ACCEPT old ids
    assert log.window.size == 6 - EVICT_PER_ACCEPT
    window, forget = deduplicator.sweep(log, log.window, 100.0, retention, limit=10)
    assert [mid for _, mid in forget] == ["old2", "old3", "old4"]
    assert window == SeenWindow(5, 6, 100.0, log.window.ids)  # "new", at the head now, was read
    emptied, _ = deduplicator.sweep(log, SeenWindow(5, 6, 0.0, ALL_IDS), 1e6, retention, limit=10)
    assert emptied.size == 0 and emptied.ids == 0  # nothing remembered: no bit


def _offer_reading_the_head(
    log: Log, window: SeenWindow, mid: str, now: float, retention: Retention
) -> tuple[bool, tuple[tuple[int, str], ...], int, int]:
    """The decision as made before ``SeenWindow.oldest``: the FIFO's head
    read on every accept. (accepted, forget, head, tail)."""
    if log.get(mid) is not None:
        return False, (), window.head, window.tail
    head, tail = window.head, window.tail + 1
    forget: list[tuple[int, str]] = []
    while tail - head > retention.max_per_key:
        entry = log.fifo.get(head)
        if entry is not None:
            forget.append((head, entry[0]))
        head += 1
    for _ in range(EVICT_PER_ACCEPT):
        if head >= window.tail:
            break
        entry = log.fifo.get(head)
        if entry is not None and entry[1] > now - retention.max_age:
            break
        if entry is not None:
            forget.append((head, entry[0]))
        head += 1
    return True, tuple(forget), head, tail


@given(
    st.lists(
        st.tuples(st.sampled_from([f"m{i}" for i in range(10)]), st.floats(0.0, 5.0)),
        max_size=80,
    ),
    st.integers(1, 6),
    st.floats(1.0, 20.0),
    st.floats(-1e6, 1e6),
)
def test_decisions_are_those_of_reading_the_head_on_every_accept(
    arrivals: list[tuple[str, float]], max_per_key: int, max_age: float, start: float
) -> None:
    """``oldest`` only saves reads: with time that never goes back (the
    stream clock's), every decision is the one made by reading the FIFO's
    head on every accept."""
    retention = Retention(max_age=max_age, max_per_key=max_per_key)
    log, now = Log(), start
    for mid, step in arrivals:
        now += step
        expected = _offer_reading_the_head(log, log.window, mid, now, retention)
        d = deduplicator.offer(log, log.window, Message("k", mid, 1, "t", b""), now, retention)
        assert (d.accepted, d.forget, d.window.head, d.window.tail) == expected
        log.offer(mid, now, retention)


def test_accepts_read_no_fifo_entry_while_the_oldest_is_young() -> None:
    log = Log()
    for i in range(50):
        assert log.offer(f"m{i}", float(i), Retention(max_age=100.0, max_per_key=1000))
    assert log.reads == 0
    # once the head is old, an accept reads it (and forgets it)
    assert log.offer("late", 150.0, Retention(max_age=100.0, max_per_key=1000))
    assert log.reads > 0 and log.window.head > 0


def test_the_accepted_copy_offered_again_is_a_replay_not_a_redelivery() -> None:
    log = Log()
    m = Message("k", "a", 1, "t", b"")
    first = deduplicator.offer(log, log.window, m, 0.0, Retention(), source=7)
    assert first.accepted and first.remember == ("a", Seen(0, 0.0, 7))
    log.ids["a"] = first.remember[1]
    again = deduplicator.offer(log, first.window, m, 1.0, Retention(), source=7)
    other = deduplicator.offer(log, first.window, m, 1.0, Retention(), source=9)
    assert (again.accepted, again.replay) == (False, True)
    assert (other.accepted, other.replay) == (False, False)


@given(
    st.lists(st.sampled_from([f"m{i}" for i in range(40)]), max_size=120),
    st.integers(1, 50),
    st.floats(1.0, 50.0),
    st.integers(0, 120),
)
def test_the_filter_saves_reads_and_changes_no_decision(
    arrivals: list[str], max_per_key: int, max_age: float, unknown_from: int
) -> None:
    """``SeenWindow.ids`` only saves reads: every decision is the one made
    by looking every id up (a log whose window claims every bit), also
    after the filter became unknown in a non-empty window (the key's state
    read from a layout written before the filter) at ``unknown_from``."""
    retention = Retention(max_age=max_age, max_per_key=max_per_key)
    log, reference = Log(), Log()
    for t, mid in enumerate(arrivals):
        if t == unknown_from:
            w = log.window
            log.window = SeenWindow(w.head, w.tail, w.oldest, ALL_IDS)
        full = SeenWindow(
            reference.window.head, reference.window.tail, reference.window.oldest, ALL_IDS
        )
        gets = (reference.gets, log.gets)
        expected = deduplicator.offer(reference, full, Message("k", mid, 1, "t", b""), t, retention)
        d = deduplicator.offer(log, log.window, Message("k", mid, 1, "t", b""), t, retention)
        assert log.gets - gets[1] <= reference.gets - gets[0]  # never a read more
        assert (d.accepted, d.remember, d.forget, d.replay) == (
            expected.accepted,
            expected.remember,
            expected.forget,
            expected.replay,
        )
        assert (d.window.head, d.window.tail) == (expected.window.head, expected.window.tail)
        log.offer(mid, float(t), retention)
        reference.offer(mid, float(t), retention)


def test_new_ids_of_a_key_with_few_need_no_read() -> None:
    log = Log()
    for i in range(20):
        assert log.offer(f"m{i}", float(i), Retention())
    assert log.gets < 5  # (a false positive reads: two bits of 128 per id)
    gets = log.gets
    assert not log.offer("m7", 30.0, Retention())  # a redelivery is read and dropped
    assert log.gets == gets + 1
    assert id_bits("m7") & log.window.ids == id_bits("m7")


def test_an_ids_bits_are_the_same_in_every_process() -> None:
    """The filter is persisted: its bits come from the id's CRC-32, not from
    ``hash()``, which differs between processes (pinned: bits 26 and 68)."""
    assert id_bits("m7") == (1 << 26) | (1 << 68)
