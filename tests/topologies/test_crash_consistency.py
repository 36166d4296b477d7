"""Crash consistency of the ordered/deduplicated topology, without a broker.

The topology runs on an in-memory store whose every write is appended to a
simulated changelog; a simulated shell runs the outbox cycle and the commit
exactly as the runtime's commit protocol (seqkeeper.runtime.task) does (state durable -> outputs produced -> confirm;
commit after a cycle). Hypothesis then crashes the worker anywhere: between
any two writes (the changelog keeps an arbitrary prefix of what was not yet
acknowledged), in the middle of producing a batch (each output topic keeps
an arbitrary prefix of it, and the next batch may be taken meanwhile, its
state writes durable: the shell's two stages overlap), or between cycles.
A new worker starts from the surviving changelog and the committed input
offset. The outputs must pass the verifier: nothing lost, per-key order
kept, repeats byte-identical.
Clean stops happen too: the next start reads only the keys the stop named
(``save_index``) and must find what reading every key would, and re-emit
nothing.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqkeeper.runtime.protocol import Batch
from seqkeeper.settings import Settings
from seqkeeper.state.base import Change
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topics import Record
from seqkeeper.topologies.ordered import OrderedTopology
from seqkeeper.verification.verify import verify
from seqkeeper.verification.workload import generate

TOPICS = ("ordered", "deduped", "dlq", "late")


class LoggedStore(MemoryStore):
    """A store whose writes are also appended to a changelog."""

    def __init__(self, changelog: list[tuple[int, bytes, bytes | None]]) -> None:
        super().__init__("state")
        for partition, key, value in changelog:  # recovery
            if value is None:
                super().delete(partition, key)
            else:
                super().put(partition, key, value)
        self.changelog = changelog
        self.appended = len(changelog)
        #: the places of the writes placed (:meth:`write_placed`), in order
        self.inserted: list[int] = []

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        super().put(partition, key, value)
        self.changelog.append((partition, key, value))
        self.appended += 1

    def delete(self, partition: int, key: bytes) -> None:
        super().delete(partition, key)
        self.changelog.append((partition, key, None))
        self.appended += 1

    def place(self, partition: int) -> object:
        return self.appended  # (counted without the writes placed since)

    def write_placed(
        self, partition: int, placed: Sequence[tuple[object, Sequence[Change]]]
    ) -> None:
        for place, changes in placed:
            at = int(place)  # type: ignore[call-overload]
            before = bisect.bisect_right(self.inserted, at)  # (after those placed there before)
            self.changelog[at + before : at + before] = [
                (partition, key, value) for key, value, _ in changes
            ]
            self.inserted[before:before] = [at] * len(changes)
            for key, value, _ in changes:
                if value is None:
                    MemoryStore.delete(self, partition, key)
                else:
                    MemoryStore.put(self, partition, key, value)


def reemitted(topology: OrderedTopology) -> int:
    registry = topology.metrics.registry
    return int(
        sum(
            registry.get_sample_value("seqkeeper_reemitted_total", {"topic": t}) or 0
            for t in ("ordered", "deduped")
        )
    )


class World:
    def __init__(self, inputs: list[Record], config: Settings) -> None:
        self.inputs = inputs
        self.config = config
        self.changelog: list[tuple[int, bytes, bytes | None]] = []
        self.durable = 0  # changelog records acknowledged by the broker
        self.outputs: dict[str, list[Record]] = defaultdict(list)
        self.committed = 0
        self.wall = 1000.0
        self.crashes = 0
        self.reemitted = 0  # as counted by the workers' metrics
        self.start()

    def start(self) -> None:
        if hasattr(self, "topology"):
            self.reemitted += reemitted(self.topology)
        self.topology = OrderedTopology(self.config, Stores(LoggedStore(self.changelog)))
        self.topology.on_assigned({0})
        self.position = self.committed

    def record(self) -> None:
        if self.position < len(self.inputs):
            rec = self.inputs[self.position]
            self.wall += 0.01
            self.topology.on_record(
                0, rec.offset, rec.key, rec.value, rec.timestamp / 1000, self.wall
            )
            self.position += 1

    def tick(self, seconds: float) -> None:
        self.wall += seconds
        self.topology.on_tick({0: (len(self.inputs), self.position)}, self.wall)

    def cycle(self, delivered: dict[str, int] | None = None) -> None:
        batch = self.topology.take()
        self.durable = len(self.changelog)  # the shell awaits these writes first
        self.produce(batch, delivered)

    def produce(self, batch: Batch, delivered: dict[str, int] | None = None) -> None:
        """Deliver ``batch`` (each topic a prefix of its part, with
        ``delivered``; then it is not confirmed)."""
        by_topic: dict[str, list[Record]] = defaultdict(list)
        for topic, key, value, headers in batch.records:
            self.outputs.setdefault(topic, [])  # the topic exists, even if nothing reaches it
            by_topic[topic].append(Record(topic, 0, 0, key, value, tuple(headers or ()), 0))
        for name, records in by_topic.items():
            keep = len(records) if delivered is None else min(delivered[name], len(records))
            for rec in records[:keep]:
                out_topic = self.outputs[name]
                out_topic.append(
                    Record(name, 0, len(out_topic), rec.key, rec.value, rec.headers, 0)
                )
        if delivered is None:
            self.topology.confirm(batch)

    def commit(self) -> None:
        self.cycle()
        self.durable = len(self.changelog)
        self.committed = self.position

    def stop(self) -> None:
        """A clean stop (the shell's ``save_index``: a cycle, the
        confirmations durable, the index) and a start on the same local
        state, which must find what reading every key's state would."""
        self.commit()
        self.topology.stores.settle()  # the confirmations too
        self.durable = len(self.changelog)
        self.topology.save_index()
        self.reemitted += reemitted(self.topology)
        store = self.topology.stores.state
        self.topology = OrderedTopology(self.config, Stores(store))
        self.topology.on_assigned({0})
        scan = OrderedTopology(self.config, Stores(LoggedStore(list(self.changelog))))
        scan.on_assigned({0})
        assert self.topology.buffered == scan.buffered
        assert self.topology.timers.keys(0) == scan.timers.keys(0)
        assert self.topology.outbox.records == scan.outbox.records == []  # all confirmed
        self.position = self.committed

    def crash(self, cut: float, delivered: dict[str, int] | None) -> None:
        if delivered is not None:
            self.cycle(delivered)  # killed while producing a batch
        keep = self.durable + int(cut * (len(self.changelog) - self.durable))
        del self.changelog[keep:]
        self.durable = keep
        self.crashes += 1
        self.start()

    def crash_pipelined(self, more: int, cut: float, delivered: dict[str, int]) -> None:
        """Killed while a batch is produced and the next one is taken (the
        shell's two stages overlap): ``more`` records processed after the
        batch was taken, any prefix of their state writes durable, and each
        output topic holding a prefix of the batch."""
        batch = self.topology.take()
        self.durable = len(self.changelog)
        for _ in range(more):
            self.record()
        self.produce(batch, delivered)
        self.crash(cut, None)

    def play(self, action: tuple) -> None:  # type: ignore[type-arg]
        """One step of a script (:func:`actions_for`)."""
        if action[0] == "record":
            self.record()
        elif action[0] == "tick":
            self.tick(1.5)
        elif action[0] == "cycle":
            self.cycle()
        elif action[0] == "commit":
            self.commit()
        elif action[0] == "stop":
            self.stop()
        elif action[0] == "crash-pipelined":
            self.crash_pipelined(action[1], action[2], action[3])
        else:
            self.crash(action[1], action[2])

    def finish(self) -> None:
        while self.position < len(self.inputs):
            self.record()
        self.commit()
        for _ in range(3):  # idle: stream time follows the wall clock, gaps time out
            self.tick(10_000.0)
            self.commit()


def actions_for(topics: tuple[str, ...]) -> st.SearchStrategy[tuple]:  # type: ignore[type-arg]
    """What a script may do (``World.play``), delivered prefixes per topic."""
    return st.one_of(
        st.just(("record",)),
        st.just(("tick",)),
        st.just(("cycle",)),
        st.just(("commit",)),
        st.just(("stop",)),
        st.tuples(
            st.just("crash"),
            st.floats(0, 1),
            st.none() | st.fixed_dictionaries({t: st.integers(0, 6) for t in topics}),
        ),
        st.tuples(
            st.just("crash-pipelined"),
            st.integers(0, 6),
            st.floats(0, 1),
            st.fixed_dictionaries({t: st.integers(0, 6) for t in topics}),
        ),
    )


actions = actions_for(TOPICS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.lists(st.one_of(st.just(("record",)), actions), min_size=20, max_size=160),
)
def test_a_crash_anywhere_loses_nothing_and_keeps_order(seed: int, script: list[tuple]) -> None:
    w = generate(messages=40, keys=3, duplicate_rate=0.2, malformed=2, seed=seed, lost=2)
    inputs = [
        Record("in", 0, i, k, v, (), 1_000_000 + 100 * i) for i, (k, v) in enumerate(w.records)
    ]
    # A small buffer: overflows give gaps up early (the verifier cannot
    # predict dead-lettered overflows, so the policy is "skip").
    config = Settings.of(bootstrap="unused", gap_timeout=2.0, max_buffered_per_key=6)
    world = World(inputs, config)
    for action in script:
        world.play(action)
    world.finish()
    out = world.outputs
    report = verify(inputs, out["ordered"], out["deduped"], out["dlq"] + out["late"], drained=True)
    assert report.ok, (world.crashes, [(c.name, c.count, c.detail) for c in report.failures()])
    # every repeat seen downstream was counted by a worker (a worker may also
    # count one whose first emission never made it)
    counted = world.reemitted + reemitted(world.topology)
    assert counted >= report.reemitted["ordered"] + report.reemitted["deduped"]
    if world.crashes == 0:
        assert counted == 0 and sum(report.reemitted.values()) == 0
