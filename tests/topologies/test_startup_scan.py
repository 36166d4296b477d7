"""The start-up scan after a crash or a move (no clean stop's index): the
ordered topology looks only at the keys with reorder-buffer entries
(``OrderedTopology.on_assigned``), and must find what reading every key's
state finds: the same gap timers, the same buffered count, the same
outputs emitted again. A key without entries whose ``confirmed`` a crash or
a move left behind has only gap markers in its unconfirmed range, durable
already (the resequencer's docstring, "Start-up"); neither scan emits them
again, nor does any later start once the key has entries again.

The worlds are those of ``test_crash_consistency`` (an in-memory store with
a simulated changelog, crashes that keep any prefix of what was not
acknowledged), plus moves: the owner runs a last cycle and another worker
starts on the changelog (the owner's confirmations only in memory are
lost). At every start both scans run on the same state and are compared.
(Whether the outputs pass the verifier is ``test_crash_consistency``'s
question; the worker here goes on with the buffer scan's topology.)
"""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seqkeeper.settings import Settings
from seqkeeper.state import codecs
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topics import Record
from seqkeeper.topologies.ordered import OrderedTopology
from seqkeeper.verification.workload import generate
from tests.topologies.test_crash_consistency import (
    TOPICS,
    LoggedStore,
    World,
    actions_for,
    reemitted,
)


def armed(topology: OrderedTopology) -> list[tuple[float, str]]:
    """The gap timers armed in partition 0: (deadline, key)."""
    return sorted(topology.timers._heaps.get(0, []))


def compare(fast: OrderedTopology, full: OrderedTopology) -> None:
    """``fast`` scanned the keys with buffer entries, ``full`` every key's
    state, both right after ``on_assigned`` on the same state."""
    store = fast.stores.state
    with_entries = {codecs.key_of(k) for k, _ in store.items(0, codecs.BUFFER)}
    assert fast.buffered == full.buffered
    assert fast.total_buffered == full.total_buffered
    assert armed(fast) == armed(full)
    assert fast.outbox.records == full.outbox.records
    assert fast.outbox.confirms == {
        slot: noted for slot, noted in full.outbox.confirms.items() if slot[1] in with_entries
    }


class ScanWorld(World):
    starts = 0

    def start(self) -> None:
        if hasattr(self, "topology"):
            self.reemitted += reemitted(self.topology)
        full = OrderedTopology(self.config, Stores(LoggedStore(list(self.changelog))))
        full.scan_every_key = True
        full.on_assigned({0})
        self.topology = OrderedTopology(self.config, Stores(LoggedStore(self.changelog)))
        self.topology.on_assigned({0})
        compare(self.topology, full)
        self.starts += 1
        self.position = self.committed

    def move(self) -> None:
        """Another worker takes the partition over: the owner's last cycle,
        then a start on the changelog (confirmations only in memory lost)."""
        self.commit()
        self.start()

    def play(self, action: tuple) -> None:  # type: ignore[type-arg]
        if action[0] == "move":
            self.move()
        else:
            super().play(action)


actions = st.one_of(actions_for(TOPICS), st.just(("move",)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(  # a marker left unconfirmed by a crash, emitted again after a clean stop
    seed=1000,
    script=[("record",)] * 9
    + [("tick",), ("tick",), ("commit",), ("crash", 0.0, None)]
    + [("record",)] * 6
    + [("stop",)],
)
@given(
    st.integers(0, 10_000),
    st.lists(
        st.one_of(
            st.just(("record",)),
            st.just(("record",)),
            st.just(("tick",)),
            st.just(("commit",)),
            actions,
        ),
        min_size=20,
        max_size=160,
    ),
)
def test_the_buffer_scan_finds_what_reading_every_key_finds(
    seed: int,
    script: list[tuple],  # type: ignore[type-arg]
) -> None:
    w = generate(messages=40, keys=3, duplicate_rate=0.2, malformed=2, seed=seed, lost=6)
    inputs = [
        Record("in", 0, i, k, v, (), 1_000_000 + 100 * i) for i, (k, v) in enumerate(w.records)
    ]
    # short gap timeouts and a small buffer: gaps given up by timers and
    # overflows, so markers wait for confirmation too
    config = Settings.of(bootstrap="unused", gap_timeout=0.5, max_buffered_per_key=4)
    world = ScanWorld(inputs, config)
    for action in script:
        world.play(action)
    world.finish()
    world.move()  # (drained: nothing waits any more)


def _event(seq: int) -> bytes:
    return b'{"messageId":"m%d","seq":%d,"type":"t"}' % (seq, seq)


def _restarted(store: MemoryStore, scan_every_key: bool = False) -> OrderedTopology:
    """A new worker on ``store`` without a clean stop's index."""
    topology = OrderedTopology(Settings.of(bootstrap="unused", gap_timeout=5.0), Stores(store))
    topology.scan_every_key = scan_every_key
    topology.on_assigned({0})
    return topology


def test_a_key_waiting_for_a_gap_is_found_and_a_quiet_key_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    topology = _restarted(store)
    topology.on_record(0, 0, b"quiet", _event(1), 100.0, wall=1.0)  # released
    topology.on_record(0, 1, b"waits", _event(2), 100.0, wall=1.0)  # buffered: 1 is missing
    topology.confirm(topology.take())  # the release confirmed, its entry deleted
    with caplog.at_level(logging.INFO, "seqkeeper.ordered"):
        restarted = _restarted(store)
    assert "partition 0: looked at 1 keys (keys with reorder-buffer entries)" in caplog.text
    assert restarted.timers.keys(0) == {"waits"} and restarted.buffered == {0: 1}
    assert restarted.timers.due(0, math.inf) == ["waits"]


def test_markers_confirmed_before_a_move_are_not_emitted_again() -> None:
    """The confirmation deleted the released message, its new ``confirmed``
    stayed in memory, and the partition moved: the marker before that
    message is durable, and neither scan emits it again; nor does a start
    after the key's next message gave it a buffer entry (found by
    hypothesis: a clean stop's next start emitted it again)."""
    store = MemoryStore()
    topology = _restarted(store)
    topology.on_record(0, 0, b"k", _event(3), 100.0, wall=1.0)  # 1 and 2 are missing
    topology.on_tick({0: (1, 1)}, wall=10.0)  # caught up: the gap times out
    batch = topology.take()
    assert [v for _, _, v, _ in batch.records if v and b"GapSkipped" in v]  # 1-2 given up
    topology.confirm(batch)  # 3 deleted from the buffer; confirmed=4 in memory only
    full = _restarted(store, scan_every_key=True)
    assert full.outbox.records == []
    fast = _restarted(store)
    assert fast.outbox.records == [] and not fast.outbox.confirms
    fast.on_record(0, 1, b"k", _event(5), 100.0, wall=11.0)  # waits for 4: an entry
    assert list(fast.stores.buffered_keys(0)) == ["k"]
    again = _restarted(store)
    assert again.outbox.records == []
