"""The ordered processor's shell on an in-memory store (no broker):
timeouts, retries on the timer, dead letters, and a key held back alone."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from seqkeeper import Message, Output
from seqkeeper.processors.processor import TOPIC_ROLE
from seqkeeper.settings import Settings
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topologies.ordered import OrderedTopology, wiring


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


def test_an_output_to_an_allowed_topic_is_addressed_and_produced_there() -> None:
    def fn(state: Any, message: Message) -> tuple[Any, list[Any]]:
        return state, [Output({"n": message.seq}, type="Reserve", topic="stock.commands"), 1]

    t, wall = topology(fn, processor_topics="stock.*")
    feed(t, wall, event("a", 1))
    batch = t.take()
    mine = [(name, k) for name, k, _, _ in batch.records if name not in ("deduped", "ordered")]
    assert mine == [(TOPIC_ROLE + "stock.commands", b"a"), ("processed", b"a")]
    assert batch.addressed == {TOPIC_ROLE + "stock.commands"}
    topic_of = wiring(t.settings, fn).output_topic
    assert [topic_of(name) for name, _ in mine] == ["stock.commands", "events.processed"]


def test_an_output_to_a_topic_not_allowed_dead_letters_the_input_at_once() -> None:
    calls: list[int] = []

    def fn(state: Any, message: Message) -> tuple[Any, list[Any]]:
        calls.append(message.seq)
        return {"n": message.seq}, [Output(1, topic="elsewhere")]

    t, wall = topology(fn, processor_topics="stock.*")  # (3 attempts)
    feed(t, wall, event("a", 1), event("a", 2))
    assert calls == [1, 2]  # no retry: the settings decide; the key goes on
    records = t.take().records
    letters = [(k, h) for name, k, _, h in records if name == "dlq"]
    assert len(letters) == 2 and not [r for r in records if r[0].startswith(TOPIC_ROLE)]
    h = dict(letters[0][1])
    assert h["seqkeeper.reason"] == b"processor-failed" and h["seqkeeper.attempts"] == b"1"
    assert (
        b"topic 'elsewhere' is not among SEQKEEPER_PROCESSOR_TOPICS (stock.*)"
        in h["seqkeeper.detail"]
    )


def test_an_undeliverable_output_is_dead_lettered_naming_its_topic() -> None:
    t, _ = topology(lambda state, message: (state, []), processor_topics="stock.*")
    role, key, value, headers = t.undeliverable(
        0, (TOPIC_ROLE + "stock.x", b"a", b"{}", None), "stock.x", "no such topic"
    )
    h = dict(headers)
    assert (role, key, value) == ("dlq", b"a", b"{}")
    assert h["seqkeeper.reason"] == b"processor-failed"
    assert b"'stock.x': no such topic" in h["seqkeeper.detail"]
