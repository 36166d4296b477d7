"""The topology's own decisions, on an in-memory store (no broker)."""

from __future__ import annotations

import gc
import math

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
        # (the walls are long before these times: no bound on how far ahead)
        Settings.of(
            bootstrap="unused", gap_timeout=5.0, event_time_field=field, max_clock_skew=math.inf
        ),
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
    assert [w.size for _, _, w in topology.stores.key_states(0)] == [1] * keys
    copy = orjson.dumps({"messageId": "id0", "seq": 1, "type": "t"})
    for wall in (100.0, 100.5, 101.0):  # caught up and quiet: time passes max age
        topology.on_tick({0: (keys, keys)}, wall=wall)
    assert [w.size for _, _, w in topology.stores.key_states(0)] == [0] * keys
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
    traverses it until the cycle takes it)."""
    topology = run("")
    records = topology.outbox.records
    assert len(records) == 3  # two accepted (deduped), one of them released (ordered)
    gc.collect()
    assert not any(gc.is_tracked(r) for r in records)


def test_input_headers_reach_every_output_byte_for_byte_also_after_a_restart() -> None:
    trace = ("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    config = Settings.of(bootstrap="unused", late_policy="late-topic", gap_timeout=5.0)
    store = MemoryStore()
    t = OrderedTopology(config, Stores(store))
    t.on_assigned({0})

    def send(offset: int, seq: int, extra: bytes = b"") -> None:
        value = orjson.dumps({"messageId": f"m{seq}{extra.decode()}", "seq": seq, "type": "t"})
        headers = (trace, ("x-bin", bytes([seq, 0, 255])))
        t.on_record(0, offset, b"k", value, 1.0, 1.0, headers)

    send(0, 3)  # buffered: waits for 1 and 2
    send(1, 2)
    t.take()
    # a restart: the buffered messages are read from the store, not memory
    t = OrderedTopology(config, Stores(store))
    t.on_assigned({0})
    send(2, 1)
    t.on_record(0, 3, b"k", b"not json", 1.0, 1.0, (trace,))
    t.on_tick({0: (4, 4)}, 1.0)
    send(4, 2, b"-again")  # a sequence conflict: dead-lettered
    records = t.take().records
    ordered = [(orjson.loads(v)["seq"], h) for topic, _, v, h in records if topic == "ordered"]
    assert ordered == [(s, (trace, ("x-bin", bytes([s, 0, 255])))) for s in (1, 2, 3)]
    deduped = [h for topic, _, _, h in records if topic == "deduped"]
    assert deduped == [(trace, ("x-bin", bytes([1, 0, 255])))]
    dead = [list(h) for topic, _, _, h in records if topic == "dlq"]
    assert [h[0] for h in dead] == [trace, trace]  # the input's first, then the reasons
    assert dead[1][1] == ("x-bin", bytes([2, 0, 255]))
    assert [dict(h)["seqkeeper.reason"] for h in dead] == [b"invalid-json", b"sequence-conflict"]
