"""The ordered processor's shell on an in-memory store (no broker):
timeouts, retries on the timer, dead letters, and a key held back alone."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from seqkeeper import Message
from seqkeeper.settings import Settings
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topologies.ordered import OrderedTopology


def event(key: str, seq: int) -> tuple[bytes, bytes]:
    doc = {"messageId": f"{key}-{seq}", "seq": seq, "type": "t", "data": seq}
    return key.encode(), orjson.dumps(doc)


def topology(fn: Any, **overrides: Any) -> tuple[OrderedTopology, list[float]]:
    config = Settings.of(
        **{
            "bootstrap": "unused",
            "processor": "x:fn",
            "command_attempts": 3,
            "command_retry_delay": 1.0,
            **overrides,
        }
    )
    t = OrderedTopology(config, Stores(MemoryStore()), fn)
    wall = [100.0]
    assert t.stage is not None
    t.stage.clock = lambda: wall[0]
    t.on_assigned({0})
    return t, wall


def feed(t: OrderedTopology, wall: list[float], *records: tuple[bytes, bytes]) -> None:
    for offset, (key, value) in enumerate(records):
        t.on_record(0, offset, key, value, wall[0], wall[0])
    pending = t.stage.pending() if t.stage else None
    if pending is not None:
        asyncio.run(pending)


def tick(t: OrderedTopology, wall: list[float], seconds: float) -> None:
    wall[0] += seconds
    pending = t.on_tick({0: (None, None)}, wall[0])
    if pending is not None:
        asyncio.run(pending)  # type: ignore[arg-type]


def outputs(t: OrderedTopology, topic: str) -> list[tuple[bytes | None, bytes | None, Any]]:
    return [(k, v, h) for name, k, v, h in t.take().records if name == topic]


def test_an_async_processor_past_the_timeout_is_retried_then_dead_lettered() -> None:
    calls: list[int] = []

    async def slow(state: Any, message: Message) -> tuple[Any, list[Any]]:
        calls.append(message.seq)
        await asyncio.sleep(1.0)
        return state, []

    t, wall = topology(slow, handler_timeout=0.05)
    feed(t, wall, event("a", 1))
    assert calls == [1]
    tick(t, wall, 0.5)  # not due yet (1 s)
    assert calls == [1]
    tick(t, wall, 0.6)
    tick(t, wall, 2.1)  # the third and last attempt
    assert calls == [1, 1, 1]
    [(key, value, headers)] = [o for o in outputs(t, "dlq")]
    h = dict(headers)
    assert key == b"a" and orjson.loads(value)["messageId"] == "a-1"
    assert h["seqkeeper.reason"] == b"processor-failed" and h["seqkeeper.attempts"] == b"3"
    assert b"SEQKEEPER_HANDLER_TIMEOUT (0.05 s)" in h["seqkeeper.detail"]
    assert h["kafka_dlt-original-offset"] == b"\x00" * 8  # (Spring: a long)


def test_a_failing_key_waits_alone_and_then_goes_on_in_order() -> None:
    seen: list[tuple[str, int]] = []
    failures = {("a", 2): 1}

    def fn(state: Any, message: Message) -> tuple[Any, list[Any]]:
        if failures.get((message.key, message.seq), 0) > 0:
            failures[(message.key, message.seq)] -= 1
            raise ConnectionError("flaky")
        seen.append((message.key, message.seq))
        return (state or 0) + message.data, [{"sum": (state or 0) + message.data}]

    t, wall = topology(fn)
    feed(t, wall, event("a", 1), event("a", 2), event("a", 3), event("b", 1), event("b", 2))
    assert seen == [("a", 1), ("b", 1), ("b", 2)]  # a:3 waits behind a:2, b goes on
    tick(t, wall, 1.0)
    assert seen == [("a", 1), ("b", 1), ("b", 2), ("a", 2), ("a", 3)]
    sums = [(k, orjson.loads(v or b"")["data"]["sum"]) for k, v, _ in outputs(t, "processed")]
    assert sums == [(b"a", 1), (b"b", 1), (b"b", 3), (b"a", 3), (b"a", 6)]


def test_a_result_that_cannot_be_stored_counts_as_a_failure() -> None:
    t, wall = topology(lambda state, message: ({"bad": {1, 2}}, []), command_attempts=1)
    feed(t, wall, event("a", 1))
    [(_, _, headers)] = outputs(t, "dlq")
    assert b"not JSON-serialisable" in dict(headers)["seqkeeper.detail"]
