"""Background publication: a failure is kept and told, ``stop`` ends it
(the publications themselves run on a broker: chaos and bench tests)."""

from __future__ import annotations

import asyncio
import threading

from seqkeeper.fleet.publishing import Background


def test_a_failed_publication_is_kept_and_told() -> None:
    told: list[BaseException] = []

    async def broken(stop: threading.Event) -> None:
        raise ConnectionError("broker gone")

    publisher = Background(broken, report=told.append)
    publisher.join(10)
    assert [type(e) for e in publisher.failed] == [ConnectionError]
    assert told == publisher.failed


def test_stop_ends_a_publication_at_its_next_batch() -> None:
    batches: list[int] = []

    async def endless(stop: threading.Event) -> None:
        while not stop.is_set():
            batches.append(len(batches))
            await asyncio.sleep(0.01)

    publisher = Background(endless)
    while len(batches) < 3:
        threading.Event().wait(0.01)
    publisher.stop()
    publisher.join(10)
    assert not publisher.thread.is_alive() and not publisher.failed
    assert len(batches) >= 3
