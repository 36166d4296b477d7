"""The tables' RocksDB store: Faust's, applying changelog records (a
restore, a standby's updates) under seqkeeper's rule for local state
(:mod:`seqkeeper.state.rocksdb`): each partition's records and the offset
they bring it up to in one ``WriteBatch`` (faust-streaming 0.15.3,
``faust.stores.rocksdb.Store.apply_changelog_batch``, writes the records,
then the offset in a separate put).

Private members: ``Store._db_for_partition`` (Faust).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from faust.stores import STORES
from faust.stores.rocksdb import Store

from seqkeeper.state.rocksdb import apply_changelog

#: The store URL of seqkeeper's tables (``App(store=...)``).
STORE_URL = "seqkeeper://"


class RocksStore(Store):
    """Faust's RocksDB store with :func:`~seqkeeper.state.rocksdb.apply_changelog`."""

    def apply_changelog_batch(
        self,
        batch: Iterable[Any],
        to_key: Callable[[Any], Any],
        to_value: Callable[[Any], Any],
    ) -> None:
        apply_changelog(
            self._db_for_partition,
            ((m.partition, m.offset, m.key, m.value) for m in (event.message for event in batch)),
        )


STORES.aliases.setdefault("seqkeeper", f"{__name__}:RocksStore")
