"""FaustRocksStore keeps no partition's DB alive: Faust closes a revoked
partition's RocksDB by dropping its last reference (``revoke_partitions``),
and a DB still open holds RocksDB's lock when the partition comes back to
the worker ("lock hold by current process": the worker crashed)."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace
from typing import Any

from state.rocksdb import FaustRocksStore


class FakeDB:
    def __init__(self) -> None:
        self.options: Any = None
        self.data: dict[bytes, bytes] = {}

    def set_write_options(self, options: Any) -> None:
        self.options = options

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        self.data.pop(key, None)


def test_a_revoked_partition_s_db_is_not_kept_open() -> None:
    dbs: dict[int, FakeDB] = {}

    def db_for_partition(partition: int) -> FakeDB:
        return dbs.setdefault(partition, FakeDB())

    table = SimpleNamespace(
        name="t", data=SimpleNamespace(_dbs=dbs, _db_for_partition=db_for_partition)
    )
    store = FaustRocksStore(table, producer=None)  # type: ignore[arg-type]
    store.put(0, b"k", b"v")
    assert store.get(0, b"k") == b"v"
    assert dbs[0].options is not None  # tuned: no write-ahead log
    gone = weakref.ref(dbs[0])
    del dbs[0]  # Faust's revoke_partitions
    gc.collect()
    assert gone() is None
    store.put(0, b"k2", b"v2")  # the partition is back: a new DB
    assert dbs[0].get(b"k2") == b"v2" and dbs[0].get(b"k") is None
