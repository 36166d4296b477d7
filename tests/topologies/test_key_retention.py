"""Key retention in the ordered topology, on an in-memory store (no broker):
what the sweep forgets and keeps, the markers, and what a message for a
forgotten key gets (processors/key_retention.py)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import orjson

from seqkeeper import Message
from seqkeeper.settings import Settings
from seqkeeper.state import codecs
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topologies.ordered import SWEEP_KEYS_PER_TICK, OrderedTopology

KEYS = 150  # more than two sweep batches
RETENTION = 600.0
MARKERS = 3600.0


def event(key: str, seq: int, mid: str | None = None) -> tuple[bytes, bytes]:
    doc = {"messageId": mid or f"{key}-{seq}", "seq": seq, "type": "t", "data": seq}
    return key.encode(), orjson.dumps(doc)


class World:
    def __init__(self, fn: Any = None) -> None:
        overrides: dict[str, Any] = {}
        if fn is not None:
            overrides["processor"] = "x:fn"
        self.settings = Settings.of(
            bootstrap="unused",
            key_retention=RETENTION,
            forgotten_key_retention=MARKERS,
            gap_timeout=math.inf,  # a gap waits: its key is never idle
            max_clock_skew=math.inf,
            **overrides,
        )
        self.store = MemoryStore()
        self.t = OrderedTopology(self.settings, Stores(self.store), fn)
        self.t.on_assigned({0})
        self.offset = 0
        self.wall = 1000.0

    def feed(self, *records: tuple[bytes, bytes]) -> None:
        for key, value in records:
            self.t.on_record(0, self.offset, key, value, self.wall, self.wall)
            self.offset += 1
        self.drain()

    def drain(self) -> None:
        if self.t.stage is not None and (pending := self.t.stage.pending()) is not None:
            asyncio.run(pending)

    def cycle(self) -> list[tuple[str, bytes | None, bytes | None, Any]]:
        batch = self.t.take()
        self.t.confirm(batch)
        self.drain()
        return list(batch.records)

    def sweep_all(self, wall: float) -> None:
        """Ticks enough for a full round over every key and marker (caught up)."""
        self.wall = wall
        for _ in range(KEYS // SWEEP_KEYS_PER_TICK + 2):
            pending = self.t.on_tick({0: (self.offset, self.offset)}, wall)
            if pending is not None:
                asyncio.run(pending)  # type: ignore[arg-type]

    def families(self, key: str) -> set[bytes]:
        prefix = codecs.key_prefix(key)
        return {k[:1] for k, _ in self.store.items(0) if k[1:].startswith(prefix)}

    def metric(self, name: str) -> float | None:
        return self.t.metrics.registry.get_sample_value(name)


def test_idle_keys_are_forgotten_busy_ones_kept_and_markers_decide_what_comes_later() -> None:
    w = World()
    keys = [f"k{i}" for i in range(KEYS)]
    w.feed(*[event(k, s) for k in keys for s in (1, 2)])
    w.feed(event("gap", 2))  # waits for seq 1
    w.cycle()  # produced and confirmed
    w.feed(event("unconfirmed", 1))  # taken below, never confirmed
    w.t.take()
    w.sweep_all(1000.0 + RETENTION / 2)  # within the retention: all kept
    assert all(w.families(k) == {b"s", b"i"} for k in keys)
    assert w.metric("seqkeeper_keys_live") == KEYS + 2
    w.sweep_all(1000.0 + RETENTION + 1)
    for k in keys:  # state gone, a marker of the next sequence kept
        assert w.families(k) == {b"F"}
        assert w.t.stores.marker(0, k) is not None
        assert w.t.stores.marker(0, k).next_expected == 3  # type: ignore[union-attr]
    assert w.families("gap") == {b"s", b"b", b"i"}
    assert b"s" in w.families("unconfirmed") and b"F" not in w.families("unconfirmed")
    assert w.metric("seqkeeper_keys_forgotten_total") == KEYS
    assert w.metric("seqkeeper_keys_live") == 2
    # a late copy (a new messageId: its id would be forgotten anyway) of a
    # released sequence: dead-lettered late, never emitted again
    w.feed(event("k0", 2, mid="k0-2-again"), event("k1", 3), event("k2", 5))
    out = w.cycle()
    dlq = [(k, dict(h or [])) for topic, k, _, h in out if topic == "dlq"]
    assert [(k, h["seqkeeper.reason"]) for k, h in dlq] == [(b"k0", b"late-arrival")]
    ordered = [(k, orjson.loads(v or b"")["seq"]) for topic, k, v, _ in out if topic == "ordered"]
    assert ordered == [(b"k1", 3)]  # continues from the marker; k2 waits for 3 and 4
    assert w.families("k1") == {b"s", b"i"}  # alive again, marker gone
    assert {b"s", b"b", b"F"} <= w.families("k2") | {b"F"} and b"F" not in w.families("k2")
    assert w.families("k0") == {b"F"}


def test_markers_are_dropped_after_their_horizon_then_the_key_starts_anew() -> None:
    w = World()
    w.feed(*[event(f"k{i}", 1) for i in range(KEYS)])
    w.cycle()
    w.sweep_all(1000.0 + RETENTION + 1)
    assert w.families("k0") == {b"F"}
    w.sweep_all(1000.0 + RETENTION + 1 + MARKERS + 1)
    assert all(not w.families(f"k{i}") for i in range(KEYS))
    assert w.metric("seqkeeper_forgotten_markers_dropped_total") == KEYS
    w.feed(event("k0", 1, mid="k0-1-new"))  # fully gone: a new key's first message
    assert [t for t, *_ in w.cycle() if t == "ordered"] == ["ordered"]


def test_a_processors_state_is_forgotten_with_its_key() -> None:
    seen: list[tuple[Any, int]] = []

    def fn(state: Any, message: Message) -> tuple[Any, list[Any]]:
        seen.append((state, message.seq))
        return (state or 0) + 1, []

    w = World(fn)
    w.feed(event("a", 1), event("a", 2))
    w.cycle()
    assert b"P" in w.families("a")
    w.sweep_all(1000.0 + RETENTION + 1)
    assert w.families("a") == {b"F"}
    w.feed(event("a", 3))
    w.cycle()
    assert seen == [(None, 1), (1, 2), (None, 3)]  # the state starts again empty


def test_a_key_with_a_processor_step_not_confirmed_is_kept() -> None:
    def fn(state: Any, message: Message) -> tuple[Any, list[Any]]:
        return state, [{"value": {"seq": message.seq}}]

    w = World(fn)
    key, value = event("a", 1)
    w.t.on_record(0, 0, key, value, w.wall, w.wall)  # released, not yet processed
    w.t.confirm(w.t.take())  # the ordered output is confirmed
    # the ticks run the processor: its output waits for the next cycle
    w.sweep_all(1000.0 + RETENTION + 1)
    assert w.families("a") >= {b"s", b"P", b"O"} and b"F" not in w.families("a")
    w.cycle()  # produced: now idle
    w.sweep_all(1000.0 + RETENTION + 3)
    assert w.families("a") == {b"F"}


def test_markers_of_keys_forgotten_later_are_dropped_at_their_own_horizon() -> None:
    """The marker sweep skips a partition until its oldest marker is due;
    markers made after that round are still dropped at their horizon."""
    w = World()
    w.feed(*[event(f"a{i}", 1) for i in range(KEYS)])
    w.cycle()
    t_a = 1000.0 + RETENTION + 1
    w.sweep_all(t_a)  # the a keys forgotten at t_a
    w.sweep_all(t_a + 10)  # a full round over the markers: none due before t_a + MARKERS
    w.wall = t_a + 20
    w.feed(*[event(f"b{i}", 1) for i in range(KEYS)])
    w.cycle()
    t_b = t_a + 20 + RETENTION + 1
    w.sweep_all(t_b)  # the b keys forgotten at t_b
    assert w.metric("seqkeeper_keys_forgotten_total") == 2 * KEYS
    w.sweep_all(t_a + MARKERS + 1)
    assert w.metric("seqkeeper_forgotten_markers_dropped_total") == KEYS
    assert w.families("a0") == set() and w.families("b0") == {b"F"}
    w.sweep_all(t_b + MARKERS + 1)
    assert w.metric("seqkeeper_forgotten_markers_dropped_total") == 2 * KEYS
    assert w.families("b0") == set()
    w.sweep_all(t_b + MARKERS + 10)  # a full round over no marker at all
    w.wall = t_b + MARKERS + 20
    w.feed(event("c", 1))
    w.cycle()
    t_c = w.wall + RETENTION + 1
    w.sweep_all(t_c)
    assert w.families("c") == {b"F"}
    w.sweep_all(t_c + MARKERS + 1)
    assert w.families("c") == set()
