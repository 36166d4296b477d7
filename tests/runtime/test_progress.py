"""Restore progress and readiness as plain values (seqkeeper.runtime.progress):
the lines a restore logs, its ETA, the gauge, and the answers of /ready and
/health; time is an argument throughout."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from seqkeeper.runtime.progress import (
    RestoreCollector,
    RestoreProgress,
    liveness,
    readiness,
)
from seqkeeper.runtime.task import TaskState

P0, P1 = ("app-state-changelog", 0), ("app-state-changelog", 1)


def progress() -> tuple[RestoreProgress, list[str]]:
    lines: list[str] = []
    return RestoreProgress(say=lines.append, interval=2.0), lines


def test_a_restore_says_per_partition_how_far_it_is_and_when_it_is_done() -> None:
    p, lines = progress()
    p.begin(100.0)
    p.observe(100.5, {P0: (0, 800_000), P1: (500, 500)})  # P1: nothing to replay
    assert lines == [
        "restoring app-state-changelog/0: 0 of 800,000 records (0 %), time left not known yet"
    ]
    p.observe(101.0, {P0: (40_000, 800_000), P1: (500, 500)})  # within the interval: quiet
    assert len(lines) == 1
    p.observe(102.5, {P0: (120_000, 800_000), P1: (500, 500)})
    # 120,000 in 2 s: 60,000/s, 680,000 left
    assert lines[-1] == (
        "restoring app-state-changelog/0: 120,000 of 800,000 records (15 %), about 12 s left"
    )
    assert p.remaining() == {P0: 680_000, P1: 0}
    p.observe(109.0, {P0: (800_000, 800_000), P1: (500, 500)})
    assert lines[-1] == "restored app-state-changelog/0: 800,000 records in 9.0 s"
    p.end(109.2, {P0: (800_000, 800_000), P1: (500, 500)})
    assert len(lines) == 3  # the last line once; none for P1
    assert p.remaining() == {P0: 0, P1: 0}


def test_the_end_of_a_recovery_restores_every_partition_seen_or_not() -> None:
    """Faust ends a recovery once nothing remains: a partition restored
    between two looks gets its last line then, with its total."""
    p, lines = progress()
    p.begin(0.0)
    p.observe(0.1, {P0: (10, 5_010)})
    p.end(0.4, {P0: (4_990, 5_010)})  # (aborted records up to the end, say)
    assert lines[-1] == "restored app-state-changelog/0: 5,000 records in 0.4 s"
    assert p.remaining() == {P0: 0}
    assert not p.restoring


def test_a_new_recovery_forgets_the_last_one() -> None:
    p, lines = progress()
    p.begin(0.0)
    p.observe(0.0, {P0: (0, 100), P1: (0, 100)})
    p.begin(1.0)  # a rebalance: P1 went elsewhere
    p.observe(1.0, {P0: (50, 300)})
    assert p.remaining() == {P0: 250}
    assert lines[-1].startswith("restoring app-state-changelog/0: 0 of 250 records")


def test_the_eta_is_unknown_until_the_records_move() -> None:
    p, lines = progress()
    p.begin(0.0)
    for t in (0.0, 2.0, 4.0):
        p.observe(t, {P0: (0, 1_000)})  # stuck (a broker that does not answer)
    assert all(line.endswith("time left not known yet") for line in lines)
    stuck = "restoring app-state-changelog/0: 0 of 1,000 records (0 %), time left not known yet"
    assert lines == [stuck] * 3  # a line per interval (all() of no line holds too)
    p.observe(6.0, {P0: (300, 1_000)})
    assert lines[-1].endswith("about 14 s left")  # 300 in 6 s, 700 to go
    p.observe(300.0, {P0: (310, 1_000)})  # slower now: the old samples age out
    assert lines[-1].endswith("min left")


Step = st.tuples(
    st.floats(min_value=0.0, max_value=5.0),  # seconds since the last look
    st.integers(min_value=-50, max_value=400),  # records applied since (< 0: a seek back)
    st.integers(min_value=-20, max_value=50),  # growth of the end
)


@settings(max_examples=300, deadline=None)
@given(
    start=st.integers(min_value=0, max_value=1_000),
    length=st.integers(min_value=0, max_value=2_000),
    steps=st.lists(Step, max_size=40),
)
def test_whatever_the_positions_the_numbers_hold(
    start: int, length: int, steps: list[tuple[float, int, int]]
) -> None:
    """Remaining is never negative nor above the total; replayed and
    remaining make the total; the ETA is unknown until two looks and never
    negative; progress lines come at most once per interval; every
    partition with something to replay gets one last line, after which
    nothing remains."""
    p, lines = progress()
    now, applied, end = 0.0, start, start + length
    p.begin(now)
    batches: list[float] = []
    for dt, moved, grown in [(0.0, 0, 0), *steps]:
        now += dt
        applied, end = max(applied + moved, 0), max(end + grown, 0)
        before = len(lines)
        p.observe(now, {P0: (applied, end)})
        if any(line.startswith("restoring") for line in lines[before:]):
            batches.append(now)
        r = p.partitions[P0]
        assert 0 <= r.remaining <= r.total
        assert r.replayed + r.remaining == r.total
        eta = r.eta()
        assert eta is None or eta >= 0
        if len(r.samples) < 2:
            assert eta is None or r.remaining == 0
    assert all(b - a >= p.interval for a, b in zip(batches, batches[1:], strict=False))
    total = p.partitions[P0].total
    p.end(now, {P0: (applied, end)})
    finals = [line for line in lines if line.startswith("restored")]
    assert len(finals) == 1 if total > 0 else len(finals) <= 1
    assert p.remaining() == {P0: 0}


def test_the_gauge_is_what_remains_per_partition() -> None:
    p, _ = progress()
    registry = CollectorRegistry()
    registry.register(RestoreCollector(p))
    p.begin(0.0)
    p.observe(0.0, {P0: (0, 1_000), P1: (7, 7)})
    text = generate_latest(registry).decode()
    assert (
        'seqkeeper_restore_remaining_records{partition="0",topic="app-state-changelog"} 1000.0'
        in text
    )
    assert (
        'seqkeeper_restore_remaining_records{partition="1",topic="app-state-changelog"} 0.0' in text
    )
    p.end(1.0, {P0: (1_000, 1_000), P1: (7, 7)})
    assert "} 1000.0" not in generate_latest(registry).decode()


def test_ready_only_when_running_on_restored_state_and_not_rebalancing() -> None:
    running = readiness(TaskState.RUNNING, rebalancing=False, stopping=False, remaining={P0: 0})
    assert (running.status, running.body) == (200, {"ready": True})
    restoring = readiness(
        TaskState.RESTORING, rebalancing=True, stopping=False, remaining={P0: 12, P1: 0}
    )
    assert restoring.status == 503
    assert restoring.body == {
        "ready": False,
        "state": "restoring",
        "remaining": {"app-state-changelog/0": 12, "app-state-changelog/1": 0},
    }
    assert readiness(TaskState.RUNNING, True, False, {}).body["state"] == "rebalancing"
    assert readiness(TaskState.CREATED, False, False, {}).body["state"] == "starting"
    assert readiness(TaskState.RUNNING, False, True, {}).body["state"] == "stopping"
    assert readiness(TaskState.SUSPENDED, False, False, {}).status == 503


def test_alive_whatever_the_restore_until_it_stops() -> None:
    for state in (TaskState.CREATED, TaskState.RESTORING, TaskState.RUNNING):
        assert liveness(state, stopping=False).status == 200
    assert liveness(TaskState.RUNNING, stopping=True).status == 503
    assert liveness(TaskState.CLOSED, stopping=False).body == {"alive": False, "state": "stopping"}
