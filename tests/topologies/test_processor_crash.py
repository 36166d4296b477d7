"""An ordered processor under crashes anywhere, without a broker.

The world of ``test_crash_consistency`` (an in-memory store with a
simulated changelog, the runtime's outbox cycle, crashes that keep any
prefix of what was not acknowledged) runs the ordered topology with a
user's function that is *not* deterministic: every output carries a random
nonce. The function may be sync or async, and may fail transiently or for
good. Whatever the crashes:

* per key, ``fn`` saw each released item once, in sequence order: every
  output lists the sequences its key's state had seen, and that list is
  the prefix of the key's ordered output up to the output's own input;
* every output messageId is the input's within its key (:func:`output_id`,
  ``<len(key)>:<key>/<input messageId>:1``), one per released item
  (given up ranges included) or a dead letter instead, and all copies of it
  are byte-identical (the stored outbox is produced again, ``fn`` never
  re-runs on a processed item);
* an output to another topic (``Output(topic=...)``) goes with the
  processed one of the same run: once, byte-identical copies, never lost;
* the ordered, deduplicated and dead-letter outputs still pass the verifier.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqkeeper.processors.envelope import output_id
from seqkeeper.processors.processor import TOPIC_ROLE, Message, Output
from seqkeeper.settings import Settings
from seqkeeper.state.stores import Stores
from seqkeeper.topics import Record
from seqkeeper.topologies.ordered import OrderedTopology
from seqkeeper.verification.verify import verify
from seqkeeper.verification.workload import generate
from tests.topologies.test_crash_consistency import LoggedStore, World, actions_for

#: the processor's outputs also go to another topic (``Output(topic=SIDE)``)
SIDE = "side.commands"
TOPICS = ("ordered", "deduped", "dlq", "late", "processed", TOPIC_ROLE + SIDE)


def make_fn(kind: str, fail_every: int, poison: int) -> Any:
    """``fn``: appends the sequence to its state and outputs the state with
    a random nonce. Fails on the first attempts at every ``fail_every``-th
    sequence (transient), and always at sequence ``poison`` (dead letter)."""
    tries: dict[tuple[str, int], int] = defaultdict(int)

    def decide(state: Any, message: Message) -> tuple[Any, list[Any]]:
        tries[(message.key, message.seq)] += 1
        if message.seq == poison and message.type != "seqkeeper.GapSkipped":
            raise ValueError("poison")
        if fail_every and message.seq % fail_every == 0 and tries[(message.key, message.seq)] < 3:
            raise ConnectionError("transient")
        seen = [*(state or []), [message.seq, message.type]]
        nonce = random.random()
        return seen, [{"seen": seen, "nonce": nonce}, Output({"nonce": nonce}, topic=SIDE)]

    if kind == "sync":
        return decide

    async def fn(state: Any, message: Message) -> tuple[Any, list[Any]]:
        await asyncio.sleep(0)
        return decide(state, message)

    return fn


class ProcessorWorld(World):
    def __init__(self, inputs: list[Record], config: Settings, fn: Any) -> None:
        self.fn = fn
        super().__init__(inputs, config)

    def start(self) -> None:
        self.topology = OrderedTopology(self.config, Stores(LoggedStore(self.changelog)), self.fn)
        self.topology.stage.clock = lambda: self.wall  # type: ignore[union-attr]
        self.topology.on_assigned({0})
        self.position = self.committed

    def stop(self) -> None:
        self.drain()
        self.commit()
        self.topology.stores.settle()
        self.durable = len(self.changelog)
        self.topology.save_index()
        store = self.topology.stores.state
        self.topology = OrderedTopology(self.config, Stores(store), self.fn)
        self.topology.stage.clock = lambda: self.wall  # type: ignore[union-attr]
        self.topology.on_assigned({0})
        assert self.topology.outbox.records == []  # all confirmed
        self.position = self.committed

    def crash(self, cut: float, delivered: dict[str, int] | None) -> None:
        # What a crash may keep of the writes not durable yet is a prefix of
        # a cycle taken: the take writes the queue entries still without a
        # result where they belong (the runtime's take, OrderedTopology.taken).
        stage = self.topology.stage
        assert stage is not None
        if delivered is not None:
            self.cycle(delivered)
        stage.write_queued()
        super().crash(cut, None)

    def drain(self) -> None:
        stage = self.topology.stage
        assert stage is not None
        pending = stage.pending()
        if pending is not None:
            asyncio.run(pending)

    def tick(self, seconds: float) -> None:
        self.wall += seconds
        pending = self.topology.on_tick({0: (len(self.inputs), self.position)}, self.wall)
        if pending is not None:
            asyncio.run(pending)  # type: ignore[arg-type]

    def commit(self) -> None:
        self.drain()  # the agent awaits the processor before the commit
        super().commit()

    def play(self, action: tuple) -> None:  # type: ignore[type-arg]
        if action[0] == "drain":
            self.drain()
        else:
            super().play(action)

    def finish(self) -> None:
        while self.position < len(self.inputs):
            self.record()
            self.drain()
        self.commit()
        for _ in range(8):  # idle: gaps time out, retries come due
            self.tick(10_000.0)
            self.commit()


actions = st.one_of(st.just(("drain",)), actions_for(TOPICS))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.sampled_from(["sync", "async"]),
    st.sampled_from([0, 4]),
    st.sampled_from([0, 7]),
    st.lists(st.one_of(st.just(("record",)), actions), min_size=20, max_size=160),
)
def test_each_item_is_processed_once_in_order_and_outputs_repeat_identically(
    seed: int, kind: str, fail_every: int, poison: int, script: list[tuple]
) -> None:
    w = generate(messages=40, keys=3, duplicate_rate=0.2, malformed=2, seed=seed, lost=2)
    inputs = [
        Record("in", 0, i, k, v, (), 1_000_000 + 100 * i) for i, (k, v) in enumerate(w.records)
    ]
    config = Settings.of(
        bootstrap="unused",
        gap_timeout=2.0,
        max_buffered_per_key=6,
        processor="test:fn",
        processor_topics=SIDE,
        command_attempts=3 if poison else 5,
        command_retry_delay=0.5,
    )
    world = ProcessorWorld(inputs, config, make_fn(kind, fail_every, poison))
    for action in script:
        world.play(action)
    world.finish()
    out = world.outputs
    failed = [r for r in out["dlq"] if (b"seqkeeper.reason", b"processor-failed") in _h(r)]
    others = [r for r in out["dlq"] if r not in failed]
    report = verify(inputs, out["ordered"], out["deduped"], others + out["late"], drained=True)
    assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]

    # repeats are byte-identical
    first: dict[str, bytes] = {}
    for rec in out["processed"]:
        doc = orjson.loads(rec.value)
        assert first.setdefault(doc["messageId"], rec.value) == rec.value
    # per key: the released items, in order, as the ordered output has them
    released: dict[str, list[Any]] = defaultdict(list)
    ids: dict[str, list[str]] = defaultdict(list)
    for rec in out["ordered"]:
        doc = orjson.loads(rec.value)
        if doc["messageId"] in ids[rec.key.decode()]:
            continue  # a repeat
        ids[rec.key.decode()].append(doc["messageId"])
        released[rec.key.decode()].append([doc["seq"], doc["type"]])
    dead = {orjson.loads(r.value)["messageId"] for r in failed}
    expected = {output_id(key, mid, "1") for key in ids for mid in ids[key] if mid not in dead}
    assert set(first) == expected
    # the output to another topic: as the processed one, its step's, once
    # (copies byte-identical), never lost
    side: dict[str, bytes] = {}
    for rec in out[TOPIC_ROLE + SIDE]:
        doc = orjson.loads(rec.value)
        assert side.setdefault(doc["messageId"], rec.value) == rec.value
        partner = orjson.loads(first[doc["messageId"][:-1] + "1"])
        assert doc["data"]["nonce"] == partner["data"]["nonce"]  # (the same run of fn)
    assert set(side) == {mid[:-1] + "2" for mid in expected}
    dead_seqs = {(r.key.decode(), orjson.loads(r.value)["seq"]) for r in failed}
    for value in first.values():
        doc = orjson.loads(value)
        key, seen = doc["key"], doc["data"]["seen"]
        position = released[key].index(seen[-1]) + 1
        # the state saw exactly the key's released items up to this one,
        # less the messages dead-lettered
        kept = [
            s
            for s in released[key][:position]
            if s[1] == "seqkeeper.GapSkipped" or (key, s[0]) not in dead_seqs
        ]
        assert seen == kept, (key, seen, kept)
        assert seen[-1][0] == doc["seq"]
    if poison:
        assert all(orjson.loads(r.value)["seq"] == poison for r in failed)


def _h(rec: Record) -> list[tuple[str, bytes]]:
    return [(k.encode() if isinstance(k, str) else k, v) for k, v in rec.headers]
