"""The one poller: what it returns, when it stops, what it calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest

from seqkeeper.fleet.poll import poll


def reader(values: list[int]) -> tuple[list[int], Callable[[], Awaitable[int]]]:
    """A ``read`` returning ``values`` in turn (the last one from then on),
    and the list of what it returned."""
    seen: list[int] = []
    source: Iterator[int] = iter(values)

    async def read() -> int:
        seen.append(next(source, values[-1]))
        return seen[-1]

    return seen, read


def test_returns_the_first_value_that_passes() -> None:
    seen, read = reader([1, 2, 3, 4])
    shown: list[int] = []
    got = asyncio.run(poll(read, lambda n: n >= 3, time.monotonic() + 10, 0, progress=shown.append))
    assert got == 3
    assert seen == shown == [1, 2, 3]


def test_past_the_deadline_it_returns_the_last_value_read_after_timed_out() -> None:
    seen, read = reader([1])
    calls: list[str] = []
    got = asyncio.run(
        poll(
            read,
            lambda n: False,
            time.monotonic() - 1,
            0,
            alive=lambda: calls.append("alive"),
            timed_out=lambda: calls.append("timed out"),
        )
    )
    assert got == 1 and seen == [1]  # read once, even when the deadline has gone by
    assert calls == ["timed out"]


def test_a_dead_worker_stops_it_between_reads() -> None:
    seen, read = reader([1, 2])

    def alive() -> None:
        raise RuntimeError("the worker exited")

    with pytest.raises(RuntimeError, match="exited"):
        asyncio.run(poll(read, lambda n: False, time.monotonic() + 10, 0, alive=alive))
    assert seen == [1]
