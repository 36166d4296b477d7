"""The topology's own decisions, on an in-memory store (no broker)."""

from __future__ import annotations

import gc

import orjson

from seqkeeper.settings import Settings
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topologies.ordered import OrderedTopology


def event(seq: int, ts: object) -> bytes:
    return orjson.dumps({"messageId": f"m{seq}", "seq": seq, "type": "t", "metadata": {"ts": ts}})


def markers(topology: OrderedTopology) -> list[bytes]:
    values = [value or b"" for _, _, value, _ in topology.take().records]
    return [v for v in values if b"GapSkipped" in v]


def run(field: str) -> OrderedTopology:
    topology = OrderedTopology(
        Settings.of(bootstrap="unused", gap_timeout=5.0, event_time_field=field),
        Stores(MemoryStore()),
    )
    topology.on_assigned({0})
    # record timestamps stay at 100 s; the payload says 1000 s, then 1010 s
    topology.on_record(0, 0, b"k", event(2, 1_000_000), 100.0, wall=1.0)
    topology.on_record(0, 1, b"other", event(1, "1970-01-01T00:16:50+00:00"), 100.0, wall=1.1)
    topology.on_tick({0: (10, 2)}, wall=1.2)  # not caught up: stream time only
    return topology


def test_the_event_time_field_drives_gap_timeouts() -> None:
    assert markers(run("metadata.ts")) == [
        b'{"messageId":"seqkeeper.gap:k:1-1","seq":1,"type":"seqkeeper.GapSkipped",'
        b'"data":{"from":1,"to":1}}'
    ]
    assert markers(run("")) == []  # record time has not moved: nothing is due


def test_a_bad_event_time_is_dead_lettered() -> None:
    topology = OrderedTopology(
        Settings.of(bootstrap="unused", event_time_field="metadata.ts"), Stores(MemoryStore())
    )
    topology.on_assigned({0})
    topology.on_record(0, 0, b"k", event(1, "soon"), 100.0, wall=1.0)
    ((topic, _, _, headers),) = topology.take().records
    assert topic == "dlq" and dict(headers or [])["seqkeeper.reason"] == b"invalid-field"


def test_the_timer_sweep_forgets_aged_ids_of_quiet_keys() -> None:
    settings = Settings.of(bootstrap="unused", seen_max_age=60.0)
    topology = OrderedTopology(settings, Stores(MemoryStore()))
    topology.on_assigned({0})
    keys = 150  # more than one sweep round
    for i in range(keys):
        value = orjson.dumps({"messageId": f"id{i}", "seq": 1, "type": "t"})
        topology.on_record(0, i, f"k{i}".encode(), value, 100.0, wall=1.0)
    topology.confirm(topology.take())  # produced: the buffer lets the messages go
    topology.on_tick({0: (keys, keys)}, wall=1.5)  # within max age: nothing forgotten
    assert all(w.size == 1 for _, _, w in topology.stores.key_states(0))
    copy = orjson.dumps({"messageId": "id0", "seq": 1, "type": "t"})
    for wall in (100.0, 100.5, 101.0):  # caught up and quiet: time passes max age
        topology.on_tick({0: (keys, keys)}, wall=wall)
    assert all(w.size == 0 for _, _, w in topology.stores.key_states(0))
    assert (
        topology.metrics.registry.get_sample_value("seqkeeper_seen_ids_forgotten_by_sweep_total")
        == keys
    )
    # a forgotten id is no longer a duplicate: its sequence was released, so
    # the copy is a conflict (dead-lettered), never emitted again
    topology.on_record(0, keys, b"k0", copy, 100.0, wall=101.5)
    ((topic, *_),) = topology.take().records
    assert topic == "dlq"


def test_queued_outputs_are_not_tracked_by_the_garbage_collector() -> None:
    """Every message queues two outputs until the next outbox cycle; as plain
    tuples of bytes the collector stops traversing them at its first pass
    (a dataclass or a tuple subclass stays tracked: every collection
    traverses it until the cycle takes it, issue 7)."""
    topology = run("")
    records = topology.outbox.records
    assert len(records) == 3  # two accepted (deduped), one of them released (ordered)
    gc.collect()
    assert not any(gc.is_tracked(r) for r in records)
