"""Property tests of the Resequencer's invariants (see its module docstring)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.processors import resequencer
from seqkeeper.processors.envelope import Message, Reason
from seqkeeper.processors.resequencer import (
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
    #: per key: how many emissions are confirmed (durable downstream)
    confirmed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    snapshots: list[dict[str, tuple[int, int]]] = field(default_factory=list)

    def apply(self, key: str, step: Step) -> None:
        buf = self.buffers[key]
        if step.buffer_put is not None:
            assert step.buffer_put.seq not in buf
            buf[step.buffer_put.seq] = step.buffer_put
        for seq in step.buffer_deletes:
            del buf[seq]
        self.total += step.buffered_delta
        self.states[key] = step.state
        nxt = step.state.next_expected or 0
        assert step.state.buffered == sum(1 for s in buf if s >= nxt), (step, sorted(buf))
        assert all(getattr(e, "key", key) == key for e in step.emitted)
        self.emitted[key] += step.emitted
        self.check_pending(key)

    def check_pending(self, key: str) -> None:
        """The crash-consistency invariant: what is not confirmed can be
        emitted again, exactly as it was first emitted."""
        again, missing = resequencer.pending(key, self.states[key], self.buffers[key])
        assert missing == []
        assert again == self.emitted[key][self.confirmed[key] :]

    def snapshot(self) -> None:
        """What the shell does before a flush: note each key's position."""
        self.snapshots.append(
            {k: (s.next_expected or 0, len(self.emitted[k])) for k, s in self.states.items()}
        )

    def confirm_oldest(self) -> None:
        """What the shell does once the flush after a snapshot completed."""
        if not self.snapshots:
            return
        for key, (upto, count) in self.snapshots.pop(0).items():
            released = [
                e.seq
                for e in self.emitted[key][self.confirmed[key] : count]
                if isinstance(e, Message)
            ]
            step = resequencer.confirm(self.states[key], released, upto, self.policy)
            assert step.emitted == () and step.buffered_delta == 0
            self.confirmed[key] = max(self.confirmed[key], count)
            self.apply(key, step)
            # never more than the remembered ranges plus the unconfirmed ones
            unconfirmed = [r for r in self.states[key].skipped if r[1] >= upto]
            assert len(self.states[key].skipped) <= self.policy.remembered_skips + len(unconfirmed)

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
@given(
    streams(),
    policies,
    st.lists(st.sampled_from(["", "tick", "snapshot", "confirm"]), min_size=60, max_size=60),
)
def test_invariants(messages: list[Message], policy: Policy, actions: list[str]) -> None:
    model = Model(policy)
    now = 0.0
    for i, m in enumerate(messages):
        now += 0.25
        model.offer(m, now)
        action = actions[i % len(actions)]
        if action == "tick":
            model.tick(now)
        elif action == "snapshot":
            model.snapshot()
        elif action == "confirm":
            model.confirm_oldest()
        # capacity (of the messages waiting)
        for key, buf in model.buffers.items():
            waiting = sum(1 for s in buf if s >= (model.states[key].next_expected or 0))
            assert waiting <= policy.max_buffered_per_key
        assert model.total <= policy.max_buffered_total
    for j in range(1, 30):  # timeouts give every gap up, one head gap per timeout
        model.tick(now + 1e10 * j)
    model.snapshot()
    while model.snapshots:
        model.confirm_oldest()

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
    # every message accounted for exactly once; a confirm leaves only waiters
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
    assert released == msg(3) and step.state == KeyState(4, 0, None, ((1, 2),), 1)
    late = resequencer.offer(step.state, DictBuffer(), msg(2, "late"), 16.0, policy)
    assert late.rejected is not None and late.rejected.reason == Reason.LATE_ARRIVAL


def test_the_gap_timeout_counts_from_when_the_gap_began_blocking() -> None:
    """Messages buffered behind a gap that already blocks do not restart
    its timeout (a steady trickle behind a lost message must not hold it
    back for ever); a new head gap after a release starts its own."""
    buf = DictBuffer()
    policy = Policy(gap_timeout=5.0)
    state = KeyState()
    for seq, now in ((3, 10.0), (4, 12.0), (6, 14.0)):
        step = resequencer.offer(state, buf, msg(seq), now, policy)
        buf[seq] = step.buffer_put  # type: ignore[assignment]
        state = step.state
    assert state.gap_since == 10.0 and resequencer.gap_deadline(state, policy) == 15.0
    step = resequencer.expire("k", state, buf, 15.0, policy)  # 1..2 given up, 3 and 4 out
    assert [getattr(e, "seq", None) for e in step.emitted] == [None, 3, 4]
    assert step.state.gap_since == 15.0  # 5 is missing now: a new head gap


def test_overflow_skip_gives_up_the_gap_early() -> None:
    buf = DictBuffer({3: msg(3)})
    policy = Policy(max_buffered_per_key=1, overflow="skip")
    step = resequencer.offer(KeyState(1, 1, 0.0), buf, msg(5), 1.0, policy)
    assert [type(e).__name__ for e in step.emitted] == ["GapSkipped", "Message"]
    assert step.buffer_put == msg(5) and step.buffer_deletes == ()
    assert step.state == KeyState(4, 1, 1.0, ((1, 2),), 1)


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
    assert CountingBuffer.reads == depth  # the count ends the drain: no miss
    CountingBuffer.reads = 0
    step = resequencer.offer(step.state, buf, msg(depth + 3), 1.0)
    assert [m.seq for m in step.released] == [depth + 3] and CountingBuffer.reads == 0


def test_released_messages_stay_until_confirmed_and_can_be_emitted_again() -> None:
    buf = DictBuffer()
    policy = Policy(gap_timeout=5.0)
    state = KeyState()
    for m in (msg(2), msg(4), msg(1)):
        step = resequencer.offer(state, buf, m, 0.0, policy)
        buf[m.seq] = step.buffer_put  # type: ignore[assignment]
        state = step.state
    assert [e.seq for e in step.emitted] == [1, 2] and state.buffered == 1
    step = resequencer.expire("k", state, buf, 5.0, policy)  # gives 3 up, releases 4
    state = step.state
    again, missing = resequencer.pending("k", state, buf)
    assert missing == [] and again == [msg(1), msg(2), GapSkipped("k", 3, 3), msg(4)]
    step = resequencer.confirm(state, [1, 2, 4], 3, policy)  # only 1 and 2 were flushed
    assert step.buffer_deletes == (1, 2) and step.state.confirmed == 3
    for seq in step.buffer_deletes:
        del buf[seq]
    assert resequencer.pending("k", step.state, buf)[0] == [GapSkipped("k", 3, 3), msg(4)]
    final = resequencer.confirm(step.state, [4], 5, policy)
    assert final.buffer_deletes == (4,) and final.state.confirmed == 5
    again = resequencer.confirm(final.state, [], 5, policy)
    assert again == Step(final.state)
    assert again.state is final.state  # nothing changed: the shell writes nothing


def test_a_message_held_but_not_counted_is_buffered_again() -> None:
    """A crash cut the buffer write from the key state: the replayed message
    finds itself in the buffer and is taken, not rejected as a conflict."""
    buf = DictBuffer({5: msg(5)})
    step = resequencer.offer(KeyState(1, 0, None, (), 1), buf, msg(5), 1.0)
    assert step.rejected is None and step.state.buffered == 1 and step.buffered_delta == 1
    copy = resequencer.offer(KeyState(3, 0, None, (), 1), DictBuffer({2: msg(2)}), msg(2), 1.0)
    assert copy.rejected is not None and copy.rejected.route == "drop"
