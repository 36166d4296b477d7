"""A :class:`~state.base.PartitionStore` over a Faust table on RocksDB.

Reads and writes go straight to the partition's RocksDB database (rocksdict,
raw mode), and every write is sent to the table's changelog topic, to the
same partition, through Faust (``Table.send_changelog``), so Faust's recovery,
standby and persisted-offset bookkeeping work unchanged. Going around
``Table.__setitem__`` gives two things Faust's table API does not: writes
outside of an event (timers) and no per-access Python mapping overhead.

:meth:`FaustRocksStore.pending_writes` gives, per partition, the future of the
last changelog record sent: once they resolve, every write made before the
call is on the broker (aiokafka keeps one request in flight per partition,
so records of a partition are acknowledged in order).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class FaustRocksStore:
    def __init__(self, table: Any) -> None:
        self.table = table
        self.name: str = table.name
        self._last: dict[int, Any] = {}

    def pending_writes(self) -> list[Any]:
        """Futures that resolve once all writes made so far are durable."""
        return list(self._last.values())

    def _db(self, partition: int) -> Any:
        return self.table.data._db_for_partition(partition)

    def get(self, partition: int, key: bytes) -> bytes | None:
        value: bytes | None = self._db(partition).get(key)
        return value

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        self._db(partition).put(key, value)
        self._last[partition] = self.table.send_changelog(partition, key, value)

    def delete(self, partition: int, key: bytes) -> None:
        self._db(partition).delete(key)
        self._last[partition] = self.table.send_changelog(partition, key, None)

    def seek(self, partition: int, start: bytes, prefix: bytes) -> tuple[bytes, bytes] | None:
        it = self._db(partition).iter()
        it.seek(start)
        if it.valid():
            key: bytes = it.key()
            if key.startswith(prefix):
                return key, it.value()
        return None

    def items(
        self, partition: int, prefix: bytes = b"", start: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        it = self._db(partition).iter()
        it.seek(max(prefix, start))
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(prefix):
                return
            if key != b"__faust\x00offset__":
                yield key, it.value()
            it.next()
