"""Property tests of the Resequencer's invariants (see its module docstring)."""

from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from processors import resequencer
from processors.envelope import Message, Reason
from processors.resequencer import FIRST_SEQ


def run(
    messages: list[Message],
) -> tuple[dict[str, list[int]], dict[str, dict[int, Message]], list[Message]]:
    """Drive the core like the shell does; return released, buffers, rejected."""
    next_expected: dict[str, int] = defaultdict(lambda: FIRST_SEQ)
    buffers: dict[str, dict[int, Message]] = defaultdict(dict)
    released: dict[str, list[int]] = defaultdict(list)
    rejected: list[Message] = []
    for m in messages:
        buf = buffers[m.key]
        step = resequencer.offer(next_expected[m.key], buf, m)
        if step.rejected:
            assert step.rejected.reason == Reason.SEQUENCE_CONFLICT
            assert not step.released and step.buffer_put is None and not step.buffer_deletes
            rejected.append(m)
            continue
        if step.buffer_put is not None:
            assert step.buffer_put.seq not in buf
            buf[step.buffer_put.seq] = step.buffer_put
        for seq in step.buffer_deletes:
            del buf[seq]
        next_expected[m.key] = step.next_expected
        released[m.key] += [r.seq for r in step.released]
        assert all(r.key == m.key for r in step.released)
    return released, buffers, rejected


@st.composite
def streams(draw: st.DrawFn) -> list[Message]:
    """Per key a run of sequences with optional gaps and conflicting copies,
    interleaved in any order (duplicates are the Deduplicator's, not here)."""
    out: list[Message] = []
    for k in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 25))
        gaps = draw(st.sets(st.integers(1, max(n, 1)), max_size=2))
        for s in range(1, n + 1):
            if s in gaps:
                continue
            out.append(Message(f"k{k}", f"k{k}-{s}", s, "t", b"{}"))
            if draw(st.integers(0, 9)) == 0:
                out.append(Message(f"k{k}", f"k{k}-{s}-conflict", s, "t", b"{}"))
    return draw(st.permutations(out))


@given(streams())
def test_released_in_order_once_and_everything_accounted_for(messages: list[Message]) -> None:
    released, buffers, rejected = run(messages)
    for seqs in released.values():
        # strictly increasing and contiguous from the first sequence
        assert seqs == list(range(FIRST_SEQ, FIRST_SEQ + len(seqs)))
    accounted = (
        sum(len(s) for s in released.values())
        + sum(len(b) for b in buffers.values())
        + len(rejected)
    )
    assert accounted == len(messages)
    for key, buf in buffers.items():
        # whatever waits, waits behind a gap
        assert all(seq > FIRST_SEQ + len(released[key]) for seq in buf)


@given(streams())
def test_first_arrival_of_a_sequence_wins(messages: list[Message]) -> None:
    released, buffers, rejected = run(messages)
    first: dict[tuple[str, int], str] = {}
    for m in messages:
        first.setdefault((m.key, m.seq), m.message_id)
    for m in rejected:
        assert first[(m.key, m.seq)] != m.message_id


@given(st.integers(1, 300))
def test_drain_reads_only_what_it_releases(depth: int) -> None:
    """Cost is proportional to what is released, not to buffer size."""

    class CountingBuffer(dict[int, Message]):
        reads = 0

        def get(self, seq: int, default: object = None) -> Message | None:  # type: ignore[override]
            CountingBuffer.reads += 1
            return super().get(seq)

    buf = CountingBuffer({s: Message("k", f"m{s}", s, "t", b"") for s in range(3, 3 + depth)})
    CountingBuffer.reads = 0
    step = resequencer.offer(1, buf, Message("k", "m1", 1, "t", b""))
    assert [m.seq for m in step.released] == [1] and CountingBuffer.reads == 1
    CountingBuffer.reads = 0
    step = resequencer.offer(2, buf, Message("k", "m2", 2, "t", b""))
    assert len(step.released) == depth + 1
    assert CountingBuffer.reads == depth + 1  # one miss ends the drain
