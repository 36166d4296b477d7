"""With a value codec, every value the ordered topology writes itself is in
it: gap markers on the ordered topic, processor outputs (a gap's too);
records passed on (the ordered and deduplicated copies of an input, dead
letters) keep their bytes. No broker: an in-memory store."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import orjson

from seqkeeper.processors.envelope import Shape
from seqkeeper.settings import Settings
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topologies.ordered import OrderedTopology


class Base64Json:
    def decode(self, value: bytes) -> Any:
        return orjson.loads(base64.b64decode(value, validate=True))

    def encode(self, document: Any) -> bytes:
        return base64.b64encode(orjson.dumps(document))


CODEC = Base64Json()


def totals(state: Any, message: Any) -> tuple[Any, list[Any]]:
    total = (state or 0) + message.data.get("amount", 0)
    return total, [{"total": total, "type": message.type}]


def run() -> tuple[list[tuple[str, bytes | None, bytes | None, Any]], list[bytes]]:
    topology = OrderedTopology(
        Settings.of(bootstrap="unused", gap_timeout=5.0, processor="x:y"),
        Stores(MemoryStore(), packed=True),
        totals,
        Shape(codec=CODEC),
    )
    topology.on_assigned({0})
    inputs = [
        CODEC.encode(
            {"messageId": f"m{seq}", "seq": seq, "type": "Posted", "data": {"amount": seq}}
        )
        for seq in (1, 3)
    ]
    bad = orjson.dumps({"messageId": "m9", "seq": 9, "type": "Posted"})  # JSON: not the codec's
    for offset, value in enumerate([*inputs, bad]):
        topology.on_record(0, offset, b"k", value, 100.0, wall=1.0)
    for wall in (200.0, 200.5, 201.0):  # caught up: stream time follows the wall, the gap is due
        pending = topology.on_tick({0: (3, 3)}, wall=wall)
        if pending is not None:
            asyncio.run(pending)  # type: ignore[arg-type]
    stage = topology.stage
    assert stage is not None
    while (pending := stage.pending()) is not None:
        asyncio.run(pending)
    return topology.take().records, [*inputs, bad]


def test_markers_and_processor_outputs_are_in_the_codec_copies_keep_their_bytes() -> None:
    records, (one, three, bad) = run()
    by_topic: dict[str, list[bytes]] = {}
    for topic, _, value, _ in records:
        by_topic.setdefault(topic, []).append(value or b"")
    assert by_topic["deduped"] == [one, three]
    assert by_topic["dlq"] == [bad]
    ordered = by_topic["ordered"]
    assert ordered[0] == one and ordered[2] == three
    assert CODEC.decode(ordered[1]) == {
        "messageId": "seqkeeper.gap:k:2-2",
        "seq": 2,
        "type": "seqkeeper.GapSkipped",
        "data": {"from": 2, "to": 2},
    }
    processed = [CODEC.decode(v) for v in by_topic["processed"]]
    assert [(d["seq"], d["data"]) for d in processed] == [
        (1, {"total": 1, "type": "Posted"}),
        (2, {"total": 1, "type": "seqkeeper.GapSkipped"}),
        (3, {"total": 4, "type": "Posted"}),
    ]
    # no JSON among what seqkeeper wrote itself
    for value in [ordered[1], *by_topic["processed"]]:
        assert not value.startswith(b"{"), value
