"""Waiting in a test for a worker's records on a topic."""

from __future__ import annotations

import asyncio
import time

from seqkeeper.fleet.processes import WorkerProcess
from seqkeeper.topics import Record, read_topic


def wait_for(
    bootstrap: str, topic: str, count: int, worker: WorkerProcess, timeout: float = 120.0
) -> list[Record]:
    """``topic``'s records once it holds ``count`` (within ``timeout`` s, while
    ``worker`` stays alive; else the assertion names the topic, the counts
    and the end of the worker's log)."""
    deadline = time.monotonic() + timeout
    while True:
        records = asyncio.run(read_topic(bootstrap, topic))
        if len(records) >= count:
            return records
        worker.check_alive()
        assert time.monotonic() < deadline, (topic, len(records), count, worker.log()[-3000:])
        time.sleep(0.5)
