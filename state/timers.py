"""In-memory index of deadlines per partition (a lazy min-heap per
partition): the ordered topology's gap timeouts, the command topology's
retries.

Entries may go stale (the key's gap closed or moved, the retry was made);
the caller re-reads the key's state when an entry comes due and re-arms it
if needed. The index is rebuilt from the state whenever partitions are
assigned, so nothing here needs to be durable.
"""

from __future__ import annotations

import heapq
from collections import defaultdict


class Deadlines:
    def __init__(self) -> None:
        self._heaps: dict[int, list[tuple[float, str]]] = defaultdict(list)

    def arm(self, partition: int, key: str, deadline: float) -> None:
        heapq.heappush(self._heaps[partition], (deadline, key))

    def due(self, partition: int, now: float, limit: int = 10_000) -> list[str]:
        """Pop the distinct keys whose deadline has passed (up to ``limit``)."""
        heap = self._heaps.get(partition)
        keys: dict[str, None] = {}
        while heap and heap[0][0] <= now and len(keys) < limit:
            keys[heapq.heappop(heap)[1]] = None
        return list(keys)

    def keys(self, partition: int) -> set[str]:
        """The keys with an entry in ``partition`` (stale ones included)."""
        return {key for _, key in self._heaps.get(partition, ())}

    def partitions(self) -> list[int]:
        return list(self._heaps)

    def drop(self, partition: int) -> None:
        self._heaps.pop(partition, None)

    def __len__(self) -> int:
        return sum(len(h) for h in self._heaps.values())


#: The ordered topology's name for it: keys with a gap, by when it times out.
GapTimers = Deadlines
