"""Tables: the table manager's hooks, and tables of raw bytes.

:class:`TableManager` is Faust's (faust-streaming 0.15.3,
``faust.tables.manager.TableManager``) with :class:`SeekFirstRecovery`, no
fixed one-second wait at start, and the app's lifecycle at a rebalance and
a stop (:mod:`seqkeeper.adapter.lifecycle`). :func:`raw_table` makes a
changelogged table of raw keys and values (the codecs are seqkeeper's),
counts what a recovery replays, per changelog partition and role
(:class:`ReplayCounter`), and tells the app's lifecycle it is restored.

Private members: ``TableManager._recovery``, ``._update_channels``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, cast

import faust
from faust.tables.manager import TableManager as FaustTableManager
from faust.tables.recovery import Recovery
from faust.types import TP

from seqkeeper.adapter.lifecycle import lifecycle_app
from seqkeeper.adapter.recovery import SeekFirstRecovery

log = logging.getLogger("seqkeeper.recovery")


class TableManager(FaustTableManager):
    """Faust's table manager with :class:`SeekFirstRecovery`, starting
    without Faust's fixed one-second wait for tables defined late (ours all
    exist before the app starts; the wait counts against every restart), and
    running the app's lifecycle (``before_close`` when it stops; at a
    rebalance ``rebalancing``, ``recovering``, ``tables_opened``)."""

    async def on_start(self) -> None:
        await asyncio.sleep(0)
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()

    async def on_stop(self) -> None:
        # Before the tables close: the app's last words to its local state.
        lifecycle = lifecycle_app(self.app).lifecycle
        try:
            await lifecycle.before_close()
        except Exception:  # a failure costs a slower start, never the stop
            log.exception("before_close of %r failed", lifecycle)
        await super().on_stop()

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        app = lifecycle_app(self.app)
        # No table opens its local RocksDB before that was checked
        # (the app's local_state_check runs while the worker starts and joins).
        check = app.local_state_check
        if check is not None:
            await asyncio.wrap_future(check)
        lifecycle = app.lifecycle
        lifecycle.rebalancing()  # before Faust closes a revoked DB or recovers into one
        await lifecycle.recovering(assigned)
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
        lifecycle.tables_opened()

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = SeekFirstRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


#: The role of a changelog partition in a worker: it restores a partition it
#: owns (``active``) or keeps a copy of another worker's up to date
#: (``standby``, Faust's ``table_standby_replicas``).
ACTIVE, STANDBY = "active", "standby"
ROLES = (ACTIVE, STANDBY)


@dataclass
class Replay:
    """The changelog records one partition applied since the last report:
    how many, and the offsets of the first and the last."""

    first: int
    last: int
    count: int = 0


def replay_line(
    table: str, partition: int, role: str, replay: Replay | None, local: int | None
) -> str:
    """What one partition replayed: ``replay`` (None: nothing), or, when it
    replayed nothing, where its local state ends (``local``: the offset of
    the last changelog record it holds; None or negative: none)."""
    head = f"table {table}: partition {partition} ({role}) replayed"
    if replay is not None and replay.count:
        return (
            f"{head} {replay.count:,} changelog records, offsets {replay.first:,} → {replay.last:,}"
        )
    if local is None or local < 0:
        return f"{head} 0 changelog records, no local state"
    return f"{head} 0 changelog records, local state up to offset {local:,}"


class Replays:
    """Changelog records applied per partition and role since the last
    report, as plain values (nothing here logs or talks to Faust).

    ``totals`` counts every record since the start, by role (the app's
    ``changelog_replayed``, behind ``seqkeeper_changelog_replayed_total``)."""

    def __init__(self, table: str, totals: MutableMapping[str, int] | None = None) -> None:
        self.table = table
        self.totals: MutableMapping[str, int] = (
            totals if totals is not None else dict.fromkeys(ROLES, 0)
        )
        #: (role, partition) -> what it applied since the last report
        self.since: dict[tuple[str, int], Replay] = {}

    def add(self, role: str, partition: int, offset: int, count: int = 1, first: int = -1) -> None:
        """``count`` records of ``partition`` up to ``offset`` (from
        ``first``; one record: itself) applied as ``role``."""
        replay = self.since.get((role, partition))
        if replay is None:
            start = offset if count == 1 or first < 0 else first
            replay = self.since[(role, partition)] = Replay(start, offset)
        replay.count += count
        replay.last = offset
        self.totals[role] = self.totals.get(role, 0) + count

    def report(self, local: Mapping[tuple[str, int], int | None]) -> list[str]:
        """The lines of a completed recovery, and start over: one per
        partition of ``local`` (each (role, partition) the table has now,
        with the offset its local state ends at) and per other partition
        that applied records since the last report (one given up since),
        actives first; then the table's total."""
        keys = sorted(set(local) | set(self.since), key=lambda k: (ROLES.index(k[0]), k[1]))
        lines = [
            replay_line(
                self.table,
                partition,
                role,
                self.since.get((role, partition)),
                local.get((role, partition)),
            )
            for role, partition in keys
        ]
        counts = dict.fromkeys(ROLES, 0)
        for (role, _), replay in self.since.items():
            counts[role] += replay.count
        lines.append(
            f"table {self.table}: replayed {sum(counts.values())} changelog records "
            f"({counts[ACTIVE]} active, {counts[STANDBY]} standby)"
        )
        self.since.clear()
        return lines


class ReplayCounter:
    """Counts the changelog records a table applies to its local state, per
    partition and role, and logs them after each recovery (logger
    ``seqkeeper.recovery``), a line per partition of the table:

    ``table state: partition 3 (active) replayed 1,234 changelog records,
    offsets 4,566,999 → 4,568,233`` (the first and the last offset
    applied), or ``... replayed 0 changelog records, local state up to
    offset 4,568,233`` (``no local state``: none), then the total ``table
    state: replayed 1234 changelog records (1234 active, 0 standby)``. A
    restart on intact local state replays 0 per partition; a rebuild, the
    whole changelog partition.

    The role is Faust's (``Recovery.active_tps``, ``.standby_tps``): a
    standby partition applies records between recoveries too; they are
    reported at the next one. A recovery overtaken by a rebalance reports
    nothing; its records are reported with the next."""

    def __init__(self, name: str, totals: MutableMapping[str, int] | None = None) -> None:
        self.name = name
        self.replays = Replays(name, totals)
        self.table: Any = None  #: the table (set by :func:`raw_table`)
        self.recovery: Any = None  #: its app's recovery (at the first record)

    async def on_changelog_event(self, event: Any) -> None:
        recovery = self.recovery
        if recovery is None:
            recovery = self.recovery = self.table.app.tables.recovery
        message = event.message
        tp = message.tp
        if tp in recovery.active_tps:  # (Faust's order: an active first)
            self.replays.add(ACTIVE, tp.partition, message.offset)
        elif tp in recovery.standby_tps:
            self.replays.add(STANDBY, tp.partition, message.offset)

    async def on_recover(self) -> None:
        # (a failure here costs the lines, never the callbacks after it)
        try:
            table = self.table
            recovery = table.app.tables.recovery
            local: dict[tuple[str, int], int | None] = {}
            for role, tps in (
                (ACTIVE, recovery.actives_for_table.get(table, ())),
                (STANDBY, recovery.standbys_for_table.get(table, ())),
            ):
                for tp in tps:
                    local[(role, tp.partition)] = table.persisted_offset(tp)
            for line in self.replays.report(local):
                log.info("%s", line)
        except Exception:
            log.exception("table %s: the replay report failed", self.name)


def raw_table(app: faust.App, name: str, partitions: int, **kwargs: Any) -> Any:
    """A changelogged table of raw bytes keys and values (codecs are ours),
    counting what its recoveries replay (:class:`ReplayCounter`, into the
    app's ``changelog_replayed``); each completed recovery is the app's
    lifecycle's ``restored``."""
    owner = lifecycle_app(app)
    counter = ReplayCounter(name, owner.changelog_replayed)
    table: Any = app.Table(
        name,
        key_type=bytes,
        value_type=bytes,
        partitions=partitions,
        on_changelog_event=counter.on_changelog_event,
        on_recover=counter.on_recover,
        **kwargs,
    )
    counter.table = table

    @table.on_recover  # type: ignore[untyped-decorator]
    async def restored() -> None:
        await owner.lifecycle.restored()  # (the one installed by then)

    table.replay_counter = counter  # (batch restores count through it: adapter.recovery)
    # Faust derives a table's serializers from its types ("json" for bytes);
    # its store and changelog topic are created lazily, after this.
    table.key_serializer = table.value_serializer = "raw"
    return table


class FaustLocalTable:
    """A Faust table on RocksDB as :class:`seqkeeper.state.base.LocalTable`
    (what :class:`~seqkeeper.state.rocksdb.LayeredPartitionStore` reads and writes
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
