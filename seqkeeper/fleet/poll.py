"""One loop for every wait on the topics a worker writes: read, test what was
read, and again until the test passes or the deadline goes by."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from seqkeeper.topics import end_offsets_of

T = TypeVar("T")


async def poll(
    read: Callable[[], Awaitable[T]],
    done: Callable[[T], bool],
    deadline: float,
    every: float,
    alive: Callable[[], object] | None = None,
    progress: Callable[[T], object] | None = None,
    timed_out: Callable[[], object] | None = None,
) -> T:
    """``read()`` every ``every`` seconds until ``done`` passes what it
    returned or ``deadline`` (a :func:`time.monotonic` time) has gone by;
    return the last value read either way, read at least once (a
    verification's last report says what failed).

    ``progress`` sees each value read; ``alive()`` runs before each wait
    (a worker's ``check_alive``: it raises once the worker has died);
    ``timed_out()`` runs when the deadline has gone by (a worker's ``dump``:
    its log shows where it was stuck)."""
    while True:
        value = await read()
        if progress is not None:
            progress(value)
        if done(value):
            return value
        if time.monotonic() > deadline:
            if timed_out is not None:
                timed_out()
            return value
        if alive is not None:
            alive()
        await asyncio.sleep(every)


async def records_in(bootstrap: str, topics: Sequence[str]) -> int:
    """How many records ``topics`` hold (their end offsets, summed)."""
    return sum((await end_offsets_of(bootstrap, list(topics))).values())
