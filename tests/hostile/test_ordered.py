"""The ordered topology (in-memory store, no broker) fed hostile records
among good ones that arrive out of order, so the good ones wait in the
reorder buffer with their headers (null values included): every hostile
record is dead-lettered once with a documented reason, the good ones come
out once each, in order per key, with their headers as they came, and
nothing goes anywhere but the ordered, deduplicated and dead-letter outputs."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqkeeper.processors.envelope import DEFAULT_SHAPE, Shape
from seqkeeper.settings import Settings
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topologies.ordered import OrderedTopology
from tests.hostile.hostile import event_reasons, header_values, hostile_events, rng

REASONS = event_reasons()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.integers(0, 2**32),
    st.integers(0, 40),
    st.permutations([(k, s) for k in range(3) for s in range(1, 6)]),
    st.lists(st.lists(st.tuples(st.sampled_from(["traceparent", "x"]), header_values()), max_size=2), min_size=15, max_size=15),
    st.booleans(),
    st.data(),
)  # fmt: skip
def test_hostile_records_among_good_ones_out_of_order(
    seed: int,
    hostile: int,
    order: list[tuple[int, int]],
    headers: list[Any],
    packed: bool,
    data: Any,
) -> None:
    shape = Shape(seq_path=("seq",), id_path=("messageId",)) if packed else DEFAULT_SHAPE
    topology = OrderedTopology(
        Settings.of(bootstrap="unused"), Stores(MemoryStore(), packed=packed), shape=shape
    )
    topology.on_assigned({0})
    good = [
        (b"g%d" % k, orjson.dumps({"messageId": f"g{k}-{s}", "seq": s, "type": "t"}), h)
        for (k, s), h in zip(order, headers, strict=True)
    ]
    bad = hostile_events(rng(seed), hostile)
    records = list(good)
    for item in bad:  # the hostile ones anywhere among them
        records.insert(data.draw(st.integers(0, len(records))), item)
    out = []
    for offset, (key, value, hs) in enumerate(records):
        topology.on_record(0, offset, key, value, 1.0, 2.0, tuple(hs))
        if data.draw(st.booleans()):
            batch = topology.take()
            out += batch.records
            topology.confirm(batch)
    out += topology.take().records
    assert {role for role, *_ in out} <= {"ordered", "deduped", "dlq"}
    letters = defaultdict(list)
    for role, _, _, hs in out:
        if role == "dlq":
            h = dict(hs or [])
            offset = int.from_bytes(h["kafka_dlt-original-offset"], "big", signed=True)
            letters[offset].append(h["seqkeeper.reason"].decode())
    hostile_offsets = [i for i, r in enumerate(records) if r in bad and r not in good]
    assert sorted(letters) == hostile_offsets
    assert all(len(v) == 1 and v[0] in REASONS for v in letters.values())
    came = {(k, v): list(h) for k, v, h in good}
    for role in ("ordered", "deduped"):
        got = [(key, value, list(hs or [])) for r, key, value, hs in out if r == role]
        assert sorted((k, v) for k, v, _ in got) == sorted(came), role
        assert all(came[(k, v)] == h for k, v, h in got), role
    for k in range(3):
        seqs = [
            orjson.loads(v)["seq"] for r, key, v, _ in out if r == "ordered" and key == b"g%d" % k
        ]
        assert seqs == [1, 2, 3, 4, 5]
