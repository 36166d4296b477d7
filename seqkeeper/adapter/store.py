"""The tables' RocksDB store: Faust's, applying changelog records (a
restore, a standby's updates) under seqkeeper's rule for local state
(:mod:`seqkeeper.state.rocksdb`): each partition's records and the offset
they bring it up to in one ``WriteBatch`` (faust-streaming 0.15.3,
``faust.stores.rocksdb.Store.apply_changelog_batch``, writes the records,
then the offset in a separate put).

Private members: ``Store._db_for_partition`` (Faust).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from faust.stores import STORES
from faust.stores.rocksdb import Store

from seqkeeper.state.formats import UnreadableState
from seqkeeper.state.rocksdb import apply_changelog

#: The worker's exit code when its state is in a format it cannot read.
NEWER_STATE_EXIT = 4


def refuse_newer(error: UnreadableState) -> NoReturn:
    """A restore or a standby met state newer than this release reads (or
    with a marker that is none): say so in one line and stop now, writing
    nothing more (Faust would log the recovery's crash with a traceback and
    go on without the partition)."""
    logging.shutdown()
    sys.stdout.flush()
    # to file descriptor 2 itself: a running Faust worker has replaced
    # sys.stderr by a proxy that turns each line into a log record
    os.write(2, f"error: {error}\n".encode())
    os._exit(NEWER_STATE_EXIT)


def apply_or_refuse(
    db_for: Callable[[int], Any], records: Iterable[tuple[int, int, bytes, bytes | None]]
) -> dict[int, int]:
    """:func:`~seqkeeper.state.rocksdb.apply_changelog`, or the stop of
    :func:`refuse_newer` (before the call's records are written)."""
    try:
        return apply_changelog(db_for, records)
    except UnreadableState as error:
        refuse_newer(error)


#: The store URL of seqkeeper's tables (``App(store=...)``).
STORE_URL = "seqkeeper://"


class FaustStore(Store):
    """Faust's RocksDB store with :func:`~seqkeeper.state.rocksdb.apply_changelog`."""

    def apply_changelog_batch(
        self,
        batch: Iterable[Any],
        to_key: Callable[[Any], Any],
        to_value: Callable[[Any], Any],
    ) -> None:
        apply_or_refuse(
            self._db_for_partition,
            ((m.partition, m.offset, m.key, m.value) for m in (event.message for event in batch)),
        )


STORES.aliases.setdefault("seqkeeper", f"{__name__}:FaustStore")
