from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processors import deduplicator
from processors.deduplicator import EVICT_PER_ACCEPT, Retention, Seen, SeenWindow
from processors.envelope import Message


class Log:
    """In-memory SeenLog, applied like the shell applies decisions."""

    def __init__(self) -> None:
        self.ids: dict[str, Seen] = {}
        self.fifo: dict[int, tuple[str, float]] = {}
        self.window = SeenWindow()

    def get(self, message_id: str) -> Seen | None:
        return self.ids.get(message_id)

    def at(self, position: int) -> tuple[str, float] | None:
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
    assert window == SeenWindow(5, 6)


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
