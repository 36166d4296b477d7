from hypothesis import assume, given
from hypothesis import strategies as st

from seqkeeper.processors.clock import IDLE_GRACE, StreamClock, too_far_ahead

steps = st.lists(
    st.tuples(st.floats(0, 5), st.none() | st.floats(0, 1e6), st.booleans()),
    max_size=40,
)  # (wall step, record time or none, caught up and ticking instead of a record)


@given(st.floats(0, 1e6), steps)
def test_stream_time_never_goes_backwards(start: float, events) -> None:
    clock, wall, last = StreamClock(), start, None
    for step, record_time, tick in events:
        wall += step
        clock = clock.idle(wall) if tick else clock.observe(record_time, wall)
        now = clock.now(wall)
        assert last is None or now >= last - 1e-9
        last = now


@given(st.floats(0, 1e6), st.floats(0, 100), st.floats(0, 100))
def test_caught_up_and_quiet_it_follows_the_wall_clock(t: float, quiet: float, more: float) -> None:
    clock = StreamClock().observe(t, 1000.0)
    assert clock.idle(1000.0 + min(quiet, IDLE_GRACE)).now(0) == t  # a short pause is not idleness
    a = clock.idle(1000.0 + IDLE_GRACE + quiet)
    b = a.idle(1000.0 + IDLE_GRACE + quiet + more)
    assert abs(a.now(0) - (t + quiet)) < 1e-6 and abs(b.now(0) - (t + quiet + more)) < 1e-6


def test_backlog_follows_record_times_not_processing_speed() -> None:
    clock = StreamClock()
    # 1,000 records produced 1 ms apart, processed 10 ms apart by a slow worker
    for i in range(1000):
        clock = clock.observe(100.0 + i * 0.001, 500.0 + i * 0.01)
    assert abs(clock.now(510.0) - 100.999) < 1e-9


times = st.floats(0, 1e9, allow_nan=False)


@given(st.none() | times, times, st.none() | times, st.sampled_from(["same", "later"]))
def test_observe_is_the_newest_time_at_the_wall_clock_given(
    start: float | None, moved: float, record_time: float | None, when: str
) -> None:
    """An observation's clock is (newest time seen, ``wall``): the one it
    was when nothing changes (records of one fetch share the wall time)."""
    clock = StreamClock(start, moved)
    wall = moved if when == "same" else moved + 1.0
    seen = [t for t in (start, record_time) if t is not None]
    expected = StreamClock(max(seen) if seen else wall, wall)
    assert clock.observe(record_time, wall) == expected


skews = st.floats(0, 1e7)


@given(st.none() | times, times, times, skews, st.floats(1e-3, 1e9))
def test_a_time_beyond_the_skew_bound_never_moves_stream_time(
    start: float | None, moved: float, wall: float, skew: float, beyond: float
) -> None:
    clock = StreamClock(start, moved)
    after = clock.observe(wall + skew + beyond, wall, skew)
    assert after is clock and after.now(wall) == clock.now(wall)
    assert too_far_ahead(wall + skew + beyond, wall, skew)


@given(st.none() | times, times, st.none() | st.floats(-1e9, 1e9), times, skews)
def test_within_the_skew_bound_a_clock_observes_as_without_one(
    start: float | None, moved: float, ahead: float | None, wall: float, skew: float
) -> None:
    record_time = None if ahead is None else wall + min(ahead, skew)
    assume(not too_far_ahead(record_time, wall, skew))  # (not so only by rounding)
    clock = StreamClock(start, moved)
    assert clock.observe(record_time, wall, skew) == clock.observe(record_time, wall)
