"""``adapt_fetch_wait``: the short wait follows a fetch that brought records."""

from __future__ import annotations

import asyncio
from typing import Any

from state.fetch import adapt_fetch_wait


class Fetcher:
    """What ``adapt_fetch_wait`` uses of aiokafka's ``Fetcher``."""

    def __init__(self, results: list[bool]) -> None:
        self._fetch_max_wait_ms = 20
        self.results = results
        self.waits: list[int] = []  # the wait each fetch was sent with

    async def _proc_fetch_request(self, assignment: Any, node_id: int, request: Any) -> bool:
        self.waits.append(self._fetch_max_wait_ms)
        return self.results.pop(0)


def test_the_wait_is_short_after_records_and_long_after_none() -> None:
    fetcher = Fetcher([True, True, False, False, True, False])
    adapt_fetch_wait(fetcher, 5)

    async def fetch_all() -> list[bool]:
        return [await fetcher._proc_fetch_request(None, 0, None) for _ in range(6)]

    assert asyncio.run(fetch_all()) == [True, True, False, False, True, False]
    assert fetcher.waits == [20, 5, 5, 20, 20, 5]
    assert fetcher._fetch_max_wait_ms == 20


def test_a_busy_wait_not_shorter_changes_nothing() -> None:
    fetcher = Fetcher([True])
    method = fetcher._proc_fetch_request
    adapt_fetch_wait(fetcher, 20)
    assert fetcher._proc_fetch_request == method
