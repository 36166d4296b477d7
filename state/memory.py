"""An in-memory :class:`~state.base.PartitionStore` (tests; no changelog)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterator, Sequence

from seqkeeper.state.base import Change


class MemoryStore:
    def __init__(self, name: str = "memory") -> None:
        self.name = name
        self._data: dict[int, dict[bytes, bytes]] = defaultdict(dict)
        self._keys: dict[int, list[bytes]] = defaultdict(list)
        self._marks: dict[int, bytes] = {}

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self._data[partition].get(key)

    def sync(self) -> None:
        pass  # nothing waits

    def mark(self, partition: int, value: bytes) -> None:
        self._marks[partition] = value

    def take_mark(self, partition: int) -> bytes | None:
        return self._marks.pop(partition, None)

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        self._marks.pop(partition, None)
        data = self._data[partition]
        if key not in data:
            bisect.insort(self._keys[partition], key)
        data[key] = value

    def delete(self, partition: int, key: bytes) -> None:
        self._marks.pop(partition, None)
        if self._data[partition].pop(key, None) is not None:
            keys = self._keys[partition]
            del keys[bisect.bisect_left(keys, key)]

    def write(self, partition: int, changes: Sequence[Change]) -> None:
        for key, value, _ in changes:
            if value is None:
                self.delete(partition, key)
            else:
                self.put(partition, key, value)

    def place(self, partition: int) -> object:
        return None  # (no changelog: a write's place changes nothing)

    def write_placed(
        self, partition: int, placed: Sequence[tuple[object, Sequence[Change]]]
    ) -> None:
        for _, changes in placed:
            self.write(partition, changes)

    def seek(self, partition: int, start: bytes, prefix: bytes) -> tuple[bytes, bytes] | None:
        keys = self._keys[partition]
        i = bisect.bisect_left(keys, start)
        if i < len(keys) and keys[i].startswith(prefix):
            return keys[i], self._data[partition][keys[i]]
        return None

    def items(
        self, partition: int, prefix: bytes = b"", start: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        keys = self._keys[partition]
        for key in keys[bisect.bisect_left(keys, max(prefix, start)) :]:
            if not key.startswith(prefix):
                break
            yield key, self._data[partition][key]
