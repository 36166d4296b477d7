"""Where a partition's restore may resume from its local offset
(:func:`seqkeeper.adapter.recovery.misplaced`): only where the changelog
still holds every record after it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.adapter.recovery import misplaced


def test_the_cases() -> None:
    assert misplaced(None, 99, 0) is None  # no local state: a full restore anyway
    assert misplaced(-1, 99, 0) is None
    assert misplaced(99, 99, 0) is None  # up to date
    assert misplaced(50, 99, 51) is None  # the next record is the first kept
    assert misplaced(12_345, -1, 0) == "past the changelog's end 0"  # recreated
    assert misplaced(100, 99, 0) == "past the changelog's end 100"
    assert misplaced(50, 99, 52) == "before the changelog's start 52"  # 51 is gone
    assert misplaced(50, 99, None) is None  # (start not told: Faust's own start)


@given(
    local=st.integers(-1, 1_000),
    start=st.integers(0, 1_000),
    length=st.integers(0, 1_000),
)
def test_resumes_exactly_when_the_tail_is_all_there(local: int, start: int, length: int) -> None:
    last = start + length - 1  # the changelog holds offsets start..last
    tail_is_there = local < 0 or (local <= last and local + 1 >= start)
    assert (misplaced(local, last, start) is None) == tail_is_there
