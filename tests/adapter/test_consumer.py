"""The consumer's fetch (seqkeeper.adapter.getmany) never
loses records when the set of active partitions changes during a fetch.

Faust hands aiokafka its live set of active partitions; aiokafka reads it
when records arrive and returns *every* partition's records when the set is
empty. The stand-in below behaves the same way (read late, empty = all), so
these tests fail on Faust's own ``_getmany``."""

from __future__ import annotations

import asyncio
import logging
from collections import namedtuple
from typing import Any

from faust.transport import consumer as faust_consumer
from faust.types import TP
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.adapter.transport import Consumer as HighwaterConsumer

Rec = namedtuple("Rec", "offset")
CHANGELOG, INPUT = TP("app-state-changelog", 0), TP("in", 0)


class Thread:
    """aiokafka as Faust's consumer thread drives it: records are looked up
    in ``partitions`` only once they arrive (``arrived``)."""

    def __init__(self, fetched: dict[TP, list[Rec]]) -> None:
        self.fetched = fetched
        self.arrived = asyncio.Event()
        self.calls: list[Any] = []
        self.seeks: list[tuple[TP, int]] = []

    async def getmany(self, partitions: set[TP] | None, timeout: float) -> dict[TP, list[Rec]]:
        self.calls.append(partitions)
        await self.arrived.wait()
        return {tp: r for tp, r in self.fetched.items() if not partitions or tp in partitions}

    def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))

    def assignment(self) -> set[TP]:
        return {CHANGELOG, INPUT}


def consumer(thread: Thread, active: set[TP]) -> Any:
    c: Any = object.__new__(HighwaterConsumer)
    c._thread, c._active_partitions, c.log = thread, active, logging.getLogger("test")
    return c


def test_records_of_partitions_resumed_during_a_fetch_wait_for_the_next_one() -> None:
    """End of a recovery: changelog paused, the input sought, then resumed,
    all while a fetch for the changelog waits."""

    async def run() -> tuple[dict[TP, list[Rec]], Thread]:
        thread = Thread({INPUT: [Rec(5), Rec(6)], CHANGELOG: [Rec(9)]})
        active = {CHANGELOG}
        c = consumer(thread, active)
        fetch = asyncio.ensure_future(c._getmany(active, 1.0))
        await asyncio.sleep(0)
        active.discard(CHANGELOG)  # recovery done: changelog paused
        thread.arrived.set()  # input records arrive before the input is resumed
        got = await fetch
        active.add(INPUT)
        return got, thread

    got, thread = asyncio.run(run())
    assert INPUT not in got  # not handed to Faust, which would drop them as inactive
    assert (INPUT, 5) not in thread.seeks  # and they stay fetched for the next call
    assert thread.calls == [{CHANGELOG}]


def test_records_of_partitions_paused_during_a_fetch_are_read_again() -> None:
    async def run() -> tuple[dict[TP, list[Rec]], Thread]:
        thread = Thread({INPUT: [Rec(5), Rec(6)], CHANGELOG: [Rec(9)]})
        active = {CHANGELOG, INPUT}
        c = consumer(thread, active)
        fetch = asyncio.ensure_future(c._getmany(active, 1.0))
        await asyncio.sleep(0)
        active.discard(INPUT)
        thread.arrived.set()
        return await fetch, thread

    got, thread = asyncio.run(run())
    assert got == {CHANGELOG: [Rec(9)]}
    assert thread.seeks == [(INPUT, 5)]


def test_no_fetch_without_active_partitions() -> None:
    thread = Thread({INPUT: [Rec(5)]})
    thread.arrived.set()
    assert asyncio.run(consumer(thread, set())._getmany(set(), 1.0)) == {}
    assert thread.calls == []


class Topics:
    def acks_enabled_for(self, topic: str) -> bool:
        return topic != "no-acks"


class Msg:
    """What Faust's ``Consumer.ack`` reads of a message."""

    def __init__(self, tp: TP, offset: int) -> None:
        self.tp, self.topic, self.offset, self.acked = tp, tp.topic, offset, False


def bookkeeping(committed: int | None) -> Any:
    from collections import defaultdict
    from types import SimpleNamespace
    from weakref import WeakSet

    c: Any = object.__new__(HighwaterConsumer)
    c.app = SimpleNamespace(topics=Topics())
    c._committed_offset = defaultdict(lambda: committed)
    c._acked, c._acked_index, c._n_acked = defaultdict(list), defaultdict(set), 0
    c._unacked_messages, c._waiting_for_ack = WeakSet(), None
    return c


@given(
    st.lists(st.lists(st.integers(0, 30), max_size=12), max_size=4),
    st.none() | st.integers(0, 20),
    st.sampled_from(["in", "no-acks"]),
)
def test_acking_a_fetch_at_once_keeps_fausts_bookkeeping(
    batches: list[list[int]], committed: int | None, topic: str
) -> None:
    """ack_records over fetched batches = Faust's ack of each record."""
    tp = TP(topic, 0)
    ours, fausts = bookkeeping(committed), bookkeeping(committed)
    for offsets in batches:
        ours.ack_records(tp, [Rec(o) for o in offsets])
        for o in offsets:
            faust_consumer.Consumer.ack(fausts, Msg(tp, o))
    for book in ("_acked", "_acked_index"):  # (defaultdicts: compare what they hold)
        assert {k: v for k, v in getattr(ours, book).items() if v} == {
            k: v for k, v in getattr(fausts, book).items() if v
        }
    assert ours._n_acked == fausts._n_acked
