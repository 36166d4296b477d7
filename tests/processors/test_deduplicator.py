from hypothesis import given
from hypothesis import strategies as st

from processors import deduplicator
from processors.envelope import Message


def msg(mid: str) -> Message:
    return Message("k", mid, 1, "t", b"{}")


@given(st.lists(st.sampled_from([f"m{i}" for i in range(8)]), max_size=60))
def test_each_id_accepted_exactly_once(arrivals: list[str]) -> None:
    seen: set[str] = set()
    accepted: list[str] = []
    for t, mid in enumerate(arrivals):
        decision = deduplicator.offer(seen, msg(mid), float(t))
        assert decision.message_id == mid and decision.seen_at == float(t)
        if decision.accepted:
            seen.add(decision.message_id)
            accepted.append(mid)
    assert accepted == list(dict.fromkeys(arrivals))  # first arrivals, in order


def test_decision_does_not_depend_on_time() -> None:
    assert deduplicator.offer({"a"}, msg("a"), 0.0).accepted is False
    assert deduplicator.offer({"a"}, msg("a"), 1e12).accepted is False
    assert deduplicator.offer(set(), msg("a"), 1e12).accepted is True
