"""Key retention (processors/key_retention.py): what is idle, what is
forgotten, the marker, and what a message for a forgotten key gets."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors import deduplicator, key_retention, resequencer
from seqkeeper.processors.deduplicator import Retention, Seen, SeenWindow
from seqkeeper.processors.envelope import Message, Reason
from seqkeeper.processors.key_retention import Forgotten, KeyRetention
from seqkeeper.processors.resequencer import DictBuffer, GapSkipped, KeyState, Policy, Rejection


class Fifo:
    """A SeenLog of FIFO entries only (what plan and last_active read)."""

    def __init__(self, entries: dict[int, tuple[str, float]]) -> None:
        self.fifo = entries

    def get(self, message_id: str) -> Seen | None:
        return None

    def at(self, position: int) -> tuple[str, float] | None:
        return self.fifo.get(position)


states = st.builds(
    KeyState,
    next_expected=st.one_of(st.none(), st.integers(1, 50)),
    buffered=st.integers(0, 3),
    gap_since=st.one_of(st.none(), st.floats(0, 100)),
    confirmed=st.one_of(st.none(), st.integers(1, 50)),
)


@given(
    states,
    st.integers(0, 5),
    st.lists(st.floats(0, 100), max_size=12),
    st.sets(st.integers(0, 11)),
    st.floats(0, 300),
    st.floats(0, 150),
    st.integers(1, 5),
)
def test_a_plan_forgets_only_an_idle_key_and_deletes_at_most_limit_ids(
    state: KeyState,
    head: int,
    times: list[float],
    missing: set[int],
    now: float,
    idle: float,
    limit: int,
) -> None:
    times.sort()
    tail = head + len(times)
    entries = {head + i: (f"m{head + i}", t) for i, t in enumerate(times) if i not in missing}
    window = SeenWindow(head, tail, times[0] if times else 40.0)
    fifo = Fifo(entries)
    retention = KeyRetention(idle=idle)
    plan = key_retention.plan(state, window, fifo, now, retention, limit)
    since = key_retention.last_active(window, fifo)
    busy = (
        state.buffered > 0
        or state.gap_since is not None
        or state.next_expected is None
        or state.confirmed != state.next_expected
    )
    if busy or since is None or now - since < idle:
        assert plan is None
        return
    assert plan is not None
    assert len(plan.forget) <= limit
    assert all(entries[p][0] == mid for p, mid in plan.forget)
    assert [p for p, _ in plan.forget] == sorted(p for p in entries if p < plan.window.head)
    if plan.marker is None:
        assert plan.window.head < tail  # ids left: the key stays, trimmed
    else:
        assert plan.window.size == 0 and set(entries) == {p for p, _ in plan.forget}
        assert plan.marker == Forgotten(state.next_expected or -1, now)


def test_retention_off_forgets_nothing() -> None:
    state = KeyState(next_expected=5, confirmed=5)
    retention = KeyRetention(idle=math.inf)
    assert key_retention.plan(state, SeenWindow(), Fifo({}), 1e12, retention, 64) is None


@given(st.integers(1, 100), st.integers(0, 200), st.sampled_from(["dlq", "drop", "late-topic"]))
def test_a_forgotten_key_admits_what_is_at_or_past_its_marker(
    marker_seq: int, seq: int, late: str
) -> None:
    policy = Policy(late=late)  # type: ignore[arg-type]
    admitted = key_retention.admit(Forgotten(marker_seq, 10.0), "k", seq, policy)
    if seq < marker_seq:
        assert isinstance(admitted, Rejection)
        assert admitted.reason == Reason.LATE_ARRIVAL
        assert admitted.route == {"dlq": "dlq", "drop": "drop", "late-topic": "late"}[late]
    else:
        assert admitted == KeyState(next_expected=marker_seq, confirmed=marker_seq)


@given(st.lists(st.floats(1, 50), min_size=1, max_size=6))
def test_a_window_emptied_by_the_age_sweep_keeps_when_the_key_was_last_active(
    gaps: list[float],
) -> None:
    """The age sweep keeps the newest id's time in an emptied window, so a
    key whose ids aged out is still measured from its last accept."""
    fifo: dict[int, tuple[str, float]] = {}
    window, now = SeenWindow(), 0.0
    for i, gap in enumerate(gaps):
        now += gap
        decision = deduplicator.offer(
            Fifo(fifo), window, Message("k", f"m{i}", i + 1, "t", b""), now
        )
        assert decision.remember is not None
        fifo[decision.remember[1].position] = (f"m{i}", now)
        window = decision.window
    newest = now
    assert key_retention.last_active(window, Fifo(fifo)) == newest
    later = newest + 100.0
    swept, forget = deduplicator.sweep(Fifo(fifo), window, later, Retention(max_age=60.0), 64)
    assert swept.size == 0 and len(forget) == len(gaps)
    assert key_retention.last_active(swept, Fifo({})) == newest


@given(
    st.lists(
        st.tuples(st.integers(1, 14), st.floats(0, 40), st.booleans()), min_size=1, max_size=40
    ),
    st.floats(1, 60),
)
def test_forgetting_never_releases_a_sequence_twice_or_out_of_order(
    arrivals: list[tuple[int, float, bool]], idle: float
) -> None:
    """A key offered messages (sequence, time step, a sweep after it), with
    sweeps that forget it whenever it is idle: over all its lives, released
    sequences and given-up ranges are strictly increasing and contiguous,
    and a message below the marker is a late arrival."""
    policy = Policy(gap_timeout=5.0)
    retention = KeyRetention(idle=idle, forgotten=math.inf)
    state, buffer = KeyState(), DictBuffer()
    marker: Forgotten | None = None
    out: list[tuple[int, int]] = []  # released (seq, seq) and given-up (first, last)
    now = 0.0

    def settle(step: resequencer.Step) -> KeyState:
        if step.buffer_put is not None:
            buffer[step.buffer_put.seq] = step.buffer_put
        for item in step.emitted:
            out.append(
                (item.first, item.last) if isinstance(item, GapSkipped) else (item.seq, item.seq)
            )
        new = step.state
        if new.next_expected is not None:  # confirmed at once (durable downstream)
            c = resequencer.confirm(new, [e.seq for e in step.released], new.next_expected, policy)
            for seq in c.buffer_deletes:
                buffer.pop(seq, None)
            new = c.state
        return new

    for i, (seq, dt, sweep) in enumerate(arrivals):
        now += dt
        message = Message("k", f"m{i}", seq, "t", b"")
        start = state
        if state.next_expected is None and marker is not None:
            admitted = key_retention.admit(marker, "k", seq, policy)
            if isinstance(admitted, Rejection):
                assert seq < marker.next_expected and admitted.reason == Reason.LATE_ARRIVAL
                continue
            start, marker = admitted, None
        step = resequencer.offer(start, buffer, message, now, policy)
        if step.rejected is None:
            state = settle(step)
        state = settle(resequencer.expire("k", state, buffer, now, policy))
        if sweep:
            seen = Fifo({0: ("last", now - dt)})  # last active: the previous arrival
            plan = key_retention.plan(state, SeenWindow(0, 1), seen, now, retention, 64)
            if plan is not None and plan.marker is not None:
                assert not buffer  # nothing kept is lost
                marker, state = plan.marker, KeyState()
    flat = [s for first, last in out for s in range(first, last + 1)]
    assert flat == list(range(flat[0], flat[0] + len(flat))) if flat else True
