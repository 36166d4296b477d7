"""A record whose event time runs too far ahead of the wall clock
(``SEQKEEPER_MAX_CLOCK_SKEW``) is dead-lettered and cannot move its
partition's stream time: other keys' gaps and seen ids are left alone."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.settings import Settings
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topologies.ordered import OrderedTopology

DAY = 24 * 3600.0
WALL = 1_700_000_000.0


def event(key: str, seq: int, ts: float | None = None, mid: str | None = None) -> bytes:
    doc: dict[str, object] = {"messageId": mid or f"{key}-{seq}", "seq": seq, "type": "t"}
    if ts is not None:
        doc["at"] = int(ts * 1000)
    return orjson.dumps(doc)


def topology(**kw: object) -> OrderedTopology:
    t = OrderedTopology(Settings.of(bootstrap="unused", **kw), Stores(MemoryStore()))
    t.on_assigned({0})
    return t


def ordered(records: list, key: bytes) -> list[object]:
    out: list[object] = []
    for topic, k, value, _ in records:
        if topic == "ordered" and k == key:
            doc = orjson.loads(value)
            out.append(tuple(doc["data"].values()) if "GapSkipped" in doc["type"] else doc["seq"])
    return out


def reasons(records: list) -> list[bytes]:
    return [dict(h)["seqkeeper.reason"] for topic, _, _, h in records if topic == "dlq"]


def users_scenario(t: OrderedTopology, field: bool) -> list:
    """Gap timeout 60 s; key A's seq 1 and 3; a stranger 30 days ahead on
    the same partition; ticks as the worker's timer makes them; A's seq 2
    5 s later. ``field``: the time is the event-time field, else the record
    timestamp."""
    records: list = []

    def send(offset: int, key: str, seq: int, ts: float, wall: float) -> None:
        value = event(key, seq, ts if field else None)
        t.on_record(0, offset, key.encode(), value, ts if not field else wall, wall)

    send(0, "A", 1, WALL, WALL)
    send(1, "A", 3, WALL + 0.1, WALL + 0.1)
    send(2, "stranger", 1, WALL + 30 * DAY, WALL + 0.2)
    for i in range(1, 11):  # caught up: ticks every 0.5 s
        t.on_tick({0: (3, 3)}, WALL + 0.2 + i * 0.5)
        records += t.take().records
    send(3, "A", 2, WALL + 5.2, WALL + 5.2)
    t.on_tick({0: (4, 4)}, WALL + 5.3)
    return records + t.take().records


def test_the_users_scenario_with_an_event_time_field() -> None:
    t = topology(gap_timeout=60.0, event_time_field="at")
    records = users_scenario(t, field=True)
    assert ordered(records, b"A") == [1, 2, 3]
    assert ordered(records, b"stranger") == []
    assert reasons(records) == [b"future-event-time"]
    (headers,) = [dict(h) for topic, _, _, h in records if topic == "dlq"]
    detail = headers["seqkeeper.detail"].decode()
    assert "'stranger' seq 1: its event-time field" in detail
    assert "SEQKEEPER_MAX_CLOCK_SKEW=300 s" in detail
    assert (
        t.metrics.registry.get_sample_value(
            "seqkeeper_dead_lettered_total", {"reason": "future-event-time"}
        )
        == 1
    )


def test_the_users_scenario_with_record_timestamps() -> None:
    records = users_scenario(topology(gap_timeout=60.0), field=False)
    assert ordered(records, b"A") == [1, 2, 3]
    assert reasons(records) == [b"future-event-time"]


def test_without_a_bound_the_stranger_gives_the_gap_up() -> None:
    """The scenario as the user met it (the bound off): the expectation
    above is not met by chance."""
    t = topology(gap_timeout=60.0, event_time_field="at", max_clock_skew=float("inf"))
    records = users_scenario(t, field=True)
    assert ordered(records, b"A") == [1, (2, 2), 3]
    assert reasons(records) == [b"late-arrival"]


def test_seen_ids_do_not_age_by_a_future_record() -> None:
    """Seen-id ages use stream time: the stranger would have aged every
    remembered id by 30 days, past SEQKEEPER_SEEN_MAX_AGE."""
    t = topology(seen_max_age=DAY, event_time_field="at")
    t.on_record(0, 0, b"A", event("A", 1, WALL), WALL, WALL)
    t.confirm(t.take())
    t.on_record(0, 1, b"B", event("B", 1, WALL + 30 * DAY), WALL, WALL + 1)
    for i in range(4):
        t.on_tick({0: (2, 2)}, WALL + 1 + i)  # the sweep runs at stream time
    t.on_record(0, 2, b"A", event("A", 1, WALL + 5), WALL, WALL + 5)  # a redelivery
    records = t.take().records
    assert [topic for topic, *_ in records] == ["dlq"]  # the stranger's only
    assert t.metrics.duplicates._value.get() == 1


def test_an_invalid_record_with_a_future_timestamp_moves_nothing_either() -> None:
    t = topology(gap_timeout=60.0)
    t.on_record(0, 0, b"A", event("A", 2), WALL, WALL)  # waits for seq 1
    t.on_record(0, 1, b"A", b"not json", WALL + 30 * DAY, WALL + 0.1)
    t.on_tick({0: (2, 2)}, WALL + 0.2)
    assert ordered(t.take().records, b"A") == []


# -- property: beyond the bound, nothing but a dead letter ------------------------

SKEW = 60.0
step = st.one_of(
    st.tuples(
        st.just("record"),
        st.sampled_from(["a", "b", "c"]),
        st.integers(1, 6),
        st.floats(-100, 50),  # event time minus wall: within the bound
        st.booleans(),  # pushed beyond the bound
        st.floats(0, 3),  # wall clock step
    ),
    st.tuples(st.just("tick"), st.booleans(), st.floats(0, 5)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=40), st.floats(0.01, 1e8))
def test_records_beyond_the_bound_change_nothing_but_their_dead_letter(
    steps: list, beyond: float
) -> None:
    """Two workers see the same steps; one has the bound, the other has none
    and never sees the records beyond it. Their outputs are the same but for
    one ``future-event-time`` dead letter per record beyond the bound, and
    their stream clocks are equal after every step."""
    bounded = topology(gap_timeout=5.0, event_time_field="at", max_clock_skew=SKEW)
    plain = topology(gap_timeout=5.0, event_time_field="at", max_clock_skew=float("inf"))
    wall, offset, skipped, futures = WALL, 0, 0, 0
    for s in steps:
        if s[0] == "tick":
            _, caught_up, dt = s
            wall += dt
            high = offset + (0 if caught_up else 1)
            bounded.on_tick({0: (high, offset)}, wall)
            plain.on_tick({0: (high - skipped, offset - skipped)}, wall)
        else:
            _, key, seq, ahead, future, dt = s
            wall += dt
            at = wall + (SKEW + beyond if future else ahead)
            value = event(key, seq, at, mid=f"{key}-{seq}-{offset}")
            bounded.on_record(0, offset, key.encode(), value, wall, wall)
            if future:
                futures += 1
                skipped += 1
            else:
                plain.on_record(0, offset - skipped, key.encode(), value, wall, wall)
            offset += 1
        assert bounded.clocks.get(0) == plain.clocks.get(0)
    mine = bounded.take().records
    theirs = plain.take().records
    dead = [
        r for r in mine if r[0] == "dlq" and dict(r[3])["seqkeeper.reason"] == b"future-event-time"
    ]
    assert len(dead) == futures
    rest = [r for r in mine if r not in dead]

    def comparable(records: list) -> list:  # offsets differ in dead letters' headers
        return [(topic, key, value) for topic, key, value, _ in records]

    assert comparable(rest) == comparable(theirs)
