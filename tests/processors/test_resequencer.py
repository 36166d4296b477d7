"""Property tests of the Resequencer's invariants (see its module docstring)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from processors import resequencer
from processors.envelope import Message, Reason
from processors.resequencer import (
    FIRST_SEQ,
    DictBuffer,
    GapSkipped,
    KeyState,
    Policy,
    Step,
)


@dataclass
class Model:
    """Drives the core exactly like the shell does, in memory."""

    policy: Policy
    states: dict[str, KeyState] = field(default_factory=dict)
    buffers: dict[str, DictBuffer] = field(default_factory=lambda: defaultdict(DictBuffer))
    emitted: dict[str, list[GapSkipped | Message]] = field(
        default_factory=lambda: defaultdict(list)
    )
    rejected: list[tuple[Message, resequencer.Rejection]] = field(default_factory=list)
    total: int = 0

    def apply(self, key: str, step: Step) -> None:
        buf = self.buffers[key]
        if step.buffer_put is not None:
            assert step.buffer_put.seq not in buf
            buf[step.buffer_put.seq] = step.buffer_put
        for seq in step.buffer_deletes:
            del buf[seq]
        self.total += step.buffered_delta
        self.states[key] = step.state
        assert step.state.buffered == len(buf), (step, sorted(buf))
        assert all(getattr(e, "key", key) == key for e in step.emitted)
        self.emitted[key] += step.emitted

    def offer(self, m: Message, now: float) -> None:
        state = self.states.get(m.key, KeyState())
        step = resequencer.offer(state, self.buffers[m.key], m, now, self.policy, self.total)
        if step.rejected is not None:
            assert step == Step(state, rejected=step.rejected)
            if step.rejected.reason == Reason.LATE_ARRIVAL:  # only for a range given up
                assert any(a <= m.seq <= b for a, b in state.skipped)
            self.rejected.append((m, step.rejected))
            return
        self.apply(m.key, step)

    def tick(self, now: float) -> None:
        for key, state in list(self.states.items()):
            self.apply(key, resequencer.expire(key, state, self.buffers[key], now, self.policy))


@st.composite
def streams(draw: st.DrawFn) -> list[Message]:
    """Per key a run of sequences with gaps and conflicting copies, in any order."""
    out: list[Message] = []
    for k in range(draw(st.integers(1, 3))):
        n = draw(st.integers(0, 20))
        gaps = draw(st.sets(st.integers(1, max(n, 1)), max_size=3))
        for s in range(1, n + 1):
            if s not in gaps:
                out.append(Message(f"k{k}", f"k{k}-{s}", s, "t", b"{}"))
            if draw(st.integers(0, 9)) == 0:
                out.append(Message(f"k{k}", f"k{k}-{s}-other", s, "t", b"{}"))
    return draw(st.permutations(out))


policies = st.builds(
    Policy,
    first_seq=st.sampled_from(["one", "first-seen"]),
    gap_timeout=st.sampled_from([0.5, 2.0, 1e9]),
    max_buffered_per_key=st.integers(1, 8),
    max_buffered_total=st.integers(1, 20),
    overflow=st.sampled_from(["skip", "dlq"]),
    late=st.sampled_from(["dlq", "drop", "late-topic"]),
    remembered_skips=st.integers(0, 4),
)


@settings(max_examples=300)
@given(streams(), policies, st.lists(st.booleans(), min_size=60, max_size=60))
def test_invariants(messages: list[Message], policy: Policy, ticks: list[bool]) -> None:
    model = Model(policy)
    now = 0.0
    for i, m in enumerate(messages):
        now += 0.25
        model.offer(m, now)
        if ticks[i % len(ticks)]:
            model.tick(now)
        # capacity
        assert all(len(b) <= policy.max_buffered_per_key for b in model.buffers.values())
        assert model.total <= policy.max_buffered_total
    for j in range(1, 30):  # timeouts give every gap up, one head gap per timeout
        model.tick(now + 1e10 * j)

    first_seen: dict[str, int] = {}
    for m in messages:
        first_seen.setdefault(m.key, m.seq)
    released_ids: set[str] = set()
    for key, items in model.emitted.items():
        expected = FIRST_SEQ if policy.first_seq == "one" else first_seen[key]
        for item in items:
            if isinstance(item, GapSkipped):
                assert item.first == expected and item.last >= item.first, (key, items)
                expected = item.last + 1
            else:
                assert item.seq == expected, (key, items)
                assert item.message_id not in released_ids
                released_ids.add(item.message_id)
                expected += 1
        assert model.states[key].next_expected == expected
    # every message accounted for exactly once
    buffered = sum(len(b) for b in model.buffers.values())
    assert len(released_ids) + buffered + len(model.rejected) == len(messages)
    if policy.gap_timeout < 1e9:
        assert buffered == 0
    for _m, rejection in model.rejected:
        if rejection.reason == Reason.LATE_ARRIVAL:
            assert (
                rejection.route == {"dlq": "dlq", "drop": "drop", "late-topic": "late"}[policy.late]
            )
        else:
            assert rejection.reason in (Reason.SEQUENCE_CONFLICT, Reason.BUFFER_OVERFLOW)
            assert rejection.route == "dlq"
        if rejection.reason == Reason.BUFFER_OVERFLOW:
            assert policy.overflow == "dlq"


@given(streams())
def test_without_gaps_or_limits_the_first_arrival_of_a_sequence_wins(
    messages: list[Message],
) -> None:
    model = Model(Policy(gap_timeout=1e9, max_buffered_per_key=10**6, max_buffered_total=10**6))
    for m in messages:
        model.offer(m, 0.0)
    first: dict[tuple[str, int], str] = {}
    for m in messages:
        first.setdefault((m.key, m.seq), m.message_id)
    for m, rejection in model.rejected:
        assert rejection.reason == Reason.SEQUENCE_CONFLICT
        assert first[(m.key, m.seq)] != m.message_id
    for items in model.emitted.values():
        assert all(isinstance(i, Message) and first[(i.key, i.seq)] == i.message_id for i in items)


def msg(seq: int, mid: str | None = None) -> Message:
    return Message("k", mid or f"m{seq}", seq, "t", b"{}")


def test_gap_timeout_emits_marker_then_drains() -> None:
    buf = DictBuffer()
    policy = Policy(gap_timeout=5.0)
    step = resequencer.offer(KeyState(), buf, msg(3), 10.0, policy)
    buf[3] = step.buffer_put  # type: ignore[assignment]
    state = step.state
    assert state.gap_since == 10.0 and resequencer.gap_deadline(state, policy) == 15.0
    assert resequencer.expire("k", state, buf, 14.9, policy) == Step(state)
    step = resequencer.expire("k", state, buf, 15.0, policy)
    marker, released = step.emitted
    assert isinstance(marker, GapSkipped) and (marker.first, marker.last) == (1, 2)
    assert marker.value == (
        b'{"messageId":"seqkeeper.gap:k:1-2","seq":1,"type":"seqkeeper.GapSkipped",'
        b'"data":{"from":1,"to":2}}'
    )
    assert released == msg(3) and step.state == KeyState(4, 0, None, ((1, 2),))
    late = resequencer.offer(step.state, DictBuffer(), msg(2, "late"), 16.0, policy)
    assert late.rejected is not None and late.rejected.reason == Reason.LATE_ARRIVAL


def test_overflow_skip_gives_up_the_gap_early() -> None:
    buf = DictBuffer({3: msg(3)})
    policy = Policy(max_buffered_per_key=1, overflow="skip")
    step = resequencer.offer(KeyState(1, 1, 0.0), buf, msg(5), 1.0, policy)
    assert [type(e).__name__ for e in step.emitted] == ["GapSkipped", "Message"]
    assert step.buffer_put == msg(5) and step.buffer_deletes == (3,)
    assert step.state == KeyState(4, 1, 1.0, ((1, 2),))


def test_overflow_dlq_rejects() -> None:
    policy = Policy(max_buffered_per_key=1, overflow="dlq")
    step = resequencer.offer(KeyState(1, 1, 0.0), DictBuffer({3: msg(3)}), msg(5), 1.0, policy)
    assert step.rejected is not None and step.rejected.reason == Reason.BUFFER_OVERFLOW


@given(st.integers(1, 300))
def test_drain_reads_only_what_it_releases(depth: int) -> None:
    """Cost is proportional to what is released, not to buffer size."""

    class CountingBuffer(DictBuffer):
        reads = 0

        def get(self, seq: int, default: object = None) -> Message | None:  # type: ignore[override]
            CountingBuffer.reads += 1
            return super().get(seq)

    buf = CountingBuffer({s: msg(s) for s in range(3, 3 + depth)})
    step = resequencer.offer(KeyState(1, depth, 0.0), buf, msg(1), 1.0)
    assert [m.seq for m in step.released] == [1] and CountingBuffer.reads == 1
    CountingBuffer.reads = 0
    step = resequencer.offer(step.state, buf, msg(2), 1.0)
    assert len(step.released) == depth + 1 and step.state.buffered == 0
    assert CountingBuffer.reads == depth + 1  # one miss ends the drain
