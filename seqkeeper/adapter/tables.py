"""Tables: the table manager's hooks, and tables of raw bytes.

:class:`TableManager` is Faust's (faust-streaming 0.15.3,
``faust.tables.manager.TableManager``) with :class:`SeekFirstRecovery`, no
fixed one-second wait at start, and the app's ``before_tables_close`` and
``before_rebalance`` hooks. :func:`raw_table` makes a changelogged table of
raw keys and values (the codecs are seqkeeper's) and counts what a recovery
replays.

Private members: ``TableManager._recovery``, ``._update_channels``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, cast

import faust
from faust.tables.manager import TableManager as FaustTableManager
from faust.tables.recovery import Recovery
from faust.types import TP

from seqkeeper.adapter.recovery import SeekFirstRecovery

log = logging.getLogger("seqkeeper.recovery")


class TableManager(FaustTableManager):
    """Faust's table manager with :class:`SeekFirstRecovery`, starting
    without Faust's fixed one-second wait for tables defined late (ours all
    exist before the app starts; the wait counts against every restart), and
    running the app's ``before_tables_close`` hooks when it stops."""

    async def on_start(self) -> None:
        await asyncio.sleep(0)
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()

    async def on_stop(self) -> None:
        # Before the tables close: the app's last words to its local state.
        for hook in cast(Any, self.app).before_tables_close:
            try:
                await hook()
            except Exception:  # a failed hook costs a slower start, never the stop
                log.exception("before_tables_close hook %r failed", hook)
        await super().on_stop()

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        # No table opens its local RocksDB before that was checked
        # (App.local_state_check runs while the worker starts and joins).
        check = cast(Any, self.app).local_state_check
        if check is not None:
            await asyncio.wrap_future(check)
        for hook in cast(Any, self.app).before_rebalance:
            hook()  # before Faust closes a revoked DB or recovers into one
        for after in cast(Any, self.app).before_recovery:
            await after(assigned)
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = SeekFirstRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


class ReplayCounter:
    """Counts the changelog records a table replays during recovery and logs
    the total after each recovery (``replayed N changelog records``), so a
    restart on intact local state can be told from a rebuild."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.replayed = 0

    async def on_changelog_event(self, event: Any) -> None:
        self.replayed += 1

    async def on_recover(self) -> None:
        log.info("table %s: replayed %d changelog records", self.name, self.replayed)


def raw_table(app: faust.App, name: str, partitions: int, **kwargs: Any) -> Any:
    """A changelogged table of raw bytes keys and values (codecs are ours)."""
    counter = ReplayCounter(name)
    table: Any = app.Table(
        name,
        key_type=bytes,
        value_type=bytes,
        partitions=partitions,
        on_changelog_event=counter.on_changelog_event,
        on_recover=counter.on_recover,
        **kwargs,
    )
    # Faust derives a table's serializers from its types ("json" for bytes);
    # its store and changelog topic are created lazily, after this.
    table.key_serializer = table.value_serializer = "raw"
    return table


class RocksTable:
    """A Faust table on RocksDB as :class:`seqkeeper.state.base.LocalTable`
    (what :class:`~seqkeeper.state.rocksdb.FaustRocksStore` reads and writes
    directly, around ``Table.__setitem__``).

    Private members: ``table.data._dbs`` (Faust's dict of open databases:
    Faust closes a revoked partition's database by dropping it from there)
    and ``table.data._db_for_partition`` (faust-streaming 0.15.3,
    ``faust.stores.rocksdb.Store``).
    """

    __slots__ = ("table", "name")

    def __init__(self, table: Any) -> None:
        self.table = table
        self.name: str = table.name

    @property
    def changelog_topic(self) -> str:
        # created lazily by Faust: read when first needed, not at wiring
        return str(self.table.changelog_topic.get_topic_name())

    def open_dbs(self) -> Mapping[int, Any]:
        return cast(Mapping[int, Any], self.table.data._dbs)

    def db_for(self, partition: int) -> Any:
        return self.table.data._db_for_partition(partition)

    def persisted_offset(self, partition: int) -> int | None:
        offset = self.table.data.persisted_offset(TP(self.changelog_topic, partition))
        return None if offset is None else int(offset)

    def set_persisted_offset(self, partition: int, offset: int) -> None:
        self.table.data.set_persisted_offset(TP(self.changelog_topic, partition), offset)
