"""Faust's table recovery, resuming the input only after it was sought
(faust-streaming 0.15.3, ``Recovery.on_recovery_completed``), the
changelog partitions Faust stops reading paused in aiokafka too, and each
recovery's progress told to listeners (:func:`watch_restores`).

A partition's local state whose changelog offset lies outside its
changelog is reset before the restore reads it (:func:`misplaced`), and
active partitions are restored a fetch at a time (:class:`BatchRestore`).

Private members: ``Consumer._get_active_partitions``, ``._committed_offset``,
``._read_offset``, ``._thread`` (Faust); ``App._fetcher``;
``Recovery._set_recovery_ended``, ``._wait``, ``._is_changelog_tp``,
``._seek_offsets`` (extended: where a restore starts), ``._build_offsets``
(extended: local state outside the changelog is reset);
``Store._db_for_partition`` (Faust's RocksDB store);
``AIOKafkaConsumer._fetcher._records``, ``._fetcher._pending_tasks``
(aiokafka 0.14).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from time import monotonic
from typing import Any, Protocol, cast

from aiokafka import TopicPartition
from faust.tables.recovery import Recovery
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from mode import Service

from seqkeeper.adapter.store import FaustStore, apply_or_refuse
from seqkeeper.state.rocksdb import reset_db

log = logging.getLogger("seqkeeper.recovery")

#: Where a changelog partition's restore is, by (topic, partition): (next
#: offset to apply, end offset).
Positions = Mapping[tuple[str, int], tuple[int, int]]


def misplaced(local: int | None, last: int | None, start: int | None) -> str | None:
    """Why a partition's local state cannot resume from its changelog
    offset ``local`` (the offset of the last record it holds; ``None`` or
    -1: none), given the changelog's ``last`` record offset (-1: empty) and
    its log start offset ``start``; ``None`` if it can. Past the end: the
    topic was deleted and recreated, or truncated (Faust would stop with a
    ``ConsistencyError``); before the start: records after it are gone
    (retention, ``delete-records``), so its tail cannot be replayed."""
    if local is None or local < 0:
        return None
    if last is not None and local > last:
        return f"past the changelog's end {last + 1:,}"
    if start is not None and local + 1 < start:
        return f"before the changelog's start {start:,}"
    return None


class BatchRestore:
    """Restores the changelog partitions of seqkeeper's tables, active and
    standby, from whole fetches
    (:class:`seqkeeper.adapter.batches.BatchFetchConsumer`): each fetched
    partition's records go to its RocksDB as one batch with their offset
    (:func:`~seqkeeper.state.rocksdb.apply_changelog`).

    Faust hands a changelog record to its table one at a time (a Faust
    message, a callback and its tasks, the changelog queue, the recovery
    loop's bookkeeping): tens of microseconds per record on the event loop,
    the bulk of a restore's time. Faust's recovery state is kept as its loop
    keeps it (``active_offsets``; records at or below them are skipped), the
    table's replay accounting is told, and the recovery's end is signalled
    as soon as no active partition needs more (Faust's loop notices it only
    on its queue's five-second timeout). A standby partition (Faust's
    ``table_standby_replicas``) is read along with the input by the
    worker's one consumer for as long as it is assigned: at Faust's cost
    per record it could not keep up with a busy peer."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def takes(self, tp: TP) -> bool:
        """Whether ``tp`` is restored here: an active or standby changelog
        partition of a table on seqkeeper's store."""
        recovery = self.app.tables.recovery
        if tp not in recovery.active_tps and tp not in recovery.standby_tps:
            return False
        table = recovery.tp_to_table.get(tp)
        return table is not None and isinstance(table.data, FaustStore)

    def apply(self, tp: TP, records: list[Any]) -> None:
        recovery = self.app.tables.recovery
        # (Faust's order: an active first)
        active = tp in recovery.active_tps
        offsets = recovery.active_offsets if active else recovery.standby_offsets
        seen = offsets.get(tp)
        if seen is not None and records and records[0].offset <= seen:
            records = [r for r in records if r.offset > seen]
        if records:
            table = recovery.tp_to_table[tp]
            apply_or_refuse(
                table.data._db_for_partition,
                ((tp.partition, r.offset, r.key, r.value) for r in records),
            )
            last = records[-1].offset
            offsets[tp] = last
            counter = getattr(table, "replay_counter", None)
            if counter is not None:
                role = "active" if active else "standby"
                counter.replays.add(role, tp.partition, last, len(records), records[0].offset)
        if active and recovery.in_recovery and not recovery.need_recovery():
            recovery.flush_buffers()  # (standbys' records on Faust's path)
            recovery._set_recovery_ended()
            recovery.signal_recovery_end.set()


class RestoreListener(Protocol):
    """Hears of every recovery (:class:`seqkeeper.runtime.progress.RestoreProgress`);
    ``now`` is ``time.monotonic()``."""

    def begin(self, now: float) -> None: ...

    def observe(self, now: float, positions: Positions) -> None: ...

    def end(self, now: float, positions: Positions) -> None: ...


def watch_restores(app: Any, listener: RestoreListener) -> None:
    """``listener`` hears of every recovery of ``app``'s tables, from the
    rebalance that starts it to its completion (:class:`SeekFirstRecovery`)."""
    cast(SeekFirstRecovery, app.tables.recovery).listeners.append(listener)


class PauseUnreadThread(faust_aiokafka.AIOKafkaConsumerThread):
    """The consumer thread's half of
    :meth:`SeekFirstRecovery._pause_unread_changelogs`."""

    async def pause_unread(self, partitions: Iterable[TP]) -> None:
        """Stop aiokafka fetching ``partitions`` until the next assignment
        (its ``pause``: a new assignment starts unpaused) and drop what it
        fetched of them already (see
        :meth:`SeekFirstRecovery._pause_unread_changelogs`)."""
        tps = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        await self.call_thread(self._pause_unread, tps)

    async def _pause_unread(self, partitions: list[TopicPartition]) -> None:
        pause_and_drop(self._ensure_consumer(), partitions)


def pause_and_drop(consumer: Any, partitions: list[TopicPartition]) -> asyncio.Future[Any] | None:
    """Pause ``partitions`` of aiokafka's ``consumer`` that it still has and
    drop what it fetched of them, now and from the fetches in flight.

    A fetch already in flight stores its records even for a partition
    paused meanwhile (aiokafka checks only the position); those are dropped
    when it lands, without holding up the end of the recovery. Returns the
    task that drops them, if any."""
    assigned = consumer.assignment()
    mine = [tp for tp in partitions if tp in assigned]  # a rebalance may have begun
    consumer.pause(*mine)
    fetcher = consumer._fetcher
    for tp in mine:
        fetcher._records.pop(tp, None)
    in_flight = [task for task in fetcher._pending_tasks if not task.done()]
    if not in_flight:
        return None

    async def drop_landed() -> None:
        await asyncio.wait(in_flight)
        paused = consumer.paused()  # still ours and paused: no new assignment began
        for tp in mine:
            if tp in paused:
                fetcher._records.pop(tp, None)

    task = asyncio.ensure_future(drop_landed())
    _dropping.add(task)  # the loop keeps only a weak reference to a task
    task.add_done_callback(_dropping.discard)
    return task


_dropping: set[asyncio.Future[Any]] = set()


class SeekFirstRecovery(Recovery):
    """Faust's table recovery, resuming the input partitions only after they
    were sought to their committed offsets and the stream queues were cleared.

    Faust 0.15.3 ends a recovery with (``Recovery.on_recovery_completed``):
    ``resume_partitions(input) -> perform_seek() -> flow_control.resume() ->
    resume_flow()``. The fetcher is already running then (it was reading the
    changelogs), so between the first two steps it can fetch input records
    and hand them to the stream queues, advancing Faust's read offset; the
    ``flow_control.resume()`` that follows *clears those queues*. The records
    are never processed, and Faust's gap tracking later treats the hole as
    compacted offsets and commits past it: messages lost (the first records
    of every input partition, after a rebuild from the changelog;
    tests/integration/test_worker.py).

    The order here closes the window: seek the input partitions to their
    committed offsets while they are still paused, clear the queues (nothing
    of the input can be in them yet), and only then let the fetcher read the
    input partitions. A crash anywhere in between is harmless: nothing was
    processed, and the next assignment seeks to the committed offsets again.
    The changelog partitions Faust stops reading are paused in aiokafka too
    (:meth:`_pause_unread_changelogs`).

    Progress: each recovery's :meth:`positions` go to the ``listeners``
    (:func:`watch_restores`) when a rebalance starts it, once the start
    offsets are sought (``_seek_offsets``), every ``progress_interval``
    seconds while it reads the changelogs, and when it completes. Faust's
    own report (``Recovery._publish_stats``: a table of what remains, every
    5 s once 1,000 records were applied) has no totals and one ETA for all
    partitions; it is left as it is.
    """

    #: Seconds between two looks at the positions during a recovery.
    progress_interval = 0.5

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listeners: list[RestoreListener] = []

    def positions(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(next offset to apply, end offset) of each active changelog
        partition whose end this recovery has read. Faust keeps the offset
        of the last record applied (``active_offsets``: the offset persisted
        with the local state, -1 for none) and of the last record to apply
        (``active_highwaters``, from the end offsets: -1 for none); both
        are one below ours."""
        found = {}
        for tp in self.active_tps:
            applied = self.active_offsets.get(tp)
            last = self.active_highwaters.get(tp)
            if applied is not None and last is not None:
                found[(tp.topic, tp.partition)] = (applied + 1, last + 1)
        return found

    def tell(self, news: Callable[[RestoreListener, float, Positions], None]) -> None:
        """Each listener the ``news`` of the positions now; a failing
        listener costs its own reports, never the recovery."""
        now, positions = monotonic(), self.positions()
        for listener in self.listeners:
            try:
                news(listener, now, positions)
            except Exception:
                log.exception("restore listener %r failed", listener)

    async def on_rebalance(
        self,
        assigned: set[TP],
        revoked: set[TP],
        newly_assigned: set[TP],
        generation_id: int = 0,
    ) -> None:
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
        if generation_id == self.app.consumer_generation_id:  # (else Faust ignored it)
            self.tell(lambda listener, now, positions: listener.begin(now))

    async def _seek_offsets(self, consumer: Any, tps: set[TP], offsets: Any, title: str) -> None:
        # Where the active partitions' restore starts is known here: their
        # ends and start offsets are built, nothing is read yet (a restore
        # may end before the first look of report_progress).
        await super()._seek_offsets(consumer, tps, offsets, title)
        if title == "active":
            self.tell(lambda listener, now, positions: listener.observe(now, positions))

    async def _build_offsets(
        self, consumer: Any, tps: set[TP], destination: Any, title: str
    ) -> None:
        # Where each partition's restore starts: Faust's, unless the local
        # offset (read from the DB when the partition was added) lies
        # outside the changelog; such a DB is emptied and restored whole.
        # Standbys too: Faust checks their offsets against their ends only
        # after it sought them, and stops with a ConsistencyError where an
        # active partition would have been reset (faust-streaming/faust#597).
        local = {tp: destination.get(tp) for tp in tps}
        await super()._build_offsets(consumer, tps, destination, title)
        if not tps:
            return
        if title == "active":
            last: Mapping[TP, int] = self.active_highwaters
        else:  # (Faust builds a standby's end only after this)
            ends = await consumer.highwaters(*tps)
            last = {tp: -1 if end is None else end - 1 for tp, end in ends.items()}
        wrong = {}
        for tp in tps:
            # (Faust starts at the later of the local offset and the log start)
            start = destination[tp] + 1 if destination[tp] != local[tp] else None
            why = misplaced(local[tp], last.get(tp), start)
            if why is not None:
                wrong[tp] = why
        if not wrong:
            return
        earliest = await consumer.earliest_offsets(*wrong)
        for tp, why in wrong.items():
            reset_db(cast(Any, self.tp_to_table[tp]).data._db_for_partition(tp.partition))
            first = earliest.get(tp)
            destination[tp] = -1 if first is None else first - 1
            log.warning(
                "changelog %s/%d (%s): the local state's offset %s is %s: local state reset, "
                "rebuilt from the changelog",
                tp.topic,
                tp.partition,
                title,
                f"{local[tp]:,}",
                why,
            )

    @Service.task
    async def report_progress(self) -> None:
        """The positions, every ``progress_interval`` s of a recovery."""
        while not self.should_stop:
            await self.sleep(self.progress_interval)
            if self.in_recovery and self.listeners:
                self.tell(lambda listener, now, positions: listener.observe(now, positions))

    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        consumer = self.app.consumer
        if self.app.consumer_generation_id != generation_id or self.signal_recovery_start.is_set():
            # A rebalance overtook this recovery. Faust calls this through
            # ``_wait``, which gives up on it (RebalanceAgain) and cancels it,
            # but only after it started, and Faust's own version runs the
            # tables' recovery callbacks before its generation check: the
            # task would run on state half restored (the revoked partitions'
            # highwaters are dropped, so the wait for the end returns at
            # once), then the next recovery ends again. Nothing is done here;
            # the recovery of the new assignment completes.
            self.log.warning(
                "Recovery of generation %s overtaken by generation %s: not completed",
                generation_id,
                self.app.consumer_generation_id,
            )
            return
        self.log.info("Restore complete!")
        await self.app.on_rebalance_complete.send()
        self._set_recovery_ended()
        self.tell(lambda listener, now, positions: listener.end(now, positions))
        callback_coros = [
            asyncio.ensure_future(
                table.on_recovery_completed(
                    self.actives_for_table[table], self.standbys_for_table[table]
                )
            )
            for table in self.tables.values()
        ]
        if callback_coros:
            await asyncio.wait(callback_coros)
        assignment = consumer.assignment()
        if self.app.consumer_generation_id != generation_id:  # (during the callbacks)
            self.log.warning(
                "Recovery rebalancing again app id %s param %s",
                self.app.consumer_generation_id,
                generation_id,
            )
            return
        if assignment:
            self.log.info("Seek stream partitions to committed offsets.")
            await self._wait(consumer.perform_seek(), timeout=self.app.conf.broker_request_timeout)
            await self._seek_uncommitted(consumer, assignment)
            await self._pause_unread_changelogs(consumer, assignment)
        self.completed.set()
        self.app.flow_control.resume()  # clears the stream queues: still empty
        consumer.resume_partitions({tp for tp in assignment if not self._is_changelog_tp(tp)})
        consumer.resume_flow()
        # From here on as in Faust: make sure the fetcher runs, signal ready.
        await cast(Any, self.app)._fetcher.maybe_start()
        self.tables.on_actives_ready()
        if not self.app.assignor.assigned_standbys():
            self.tables.on_standbys_ready()
        self.app.on_rebalance_end()
        self.log.info("Worker ready")

    async def _pause_unread_changelogs(self, consumer: Any, assignment: set[TP]) -> None:
        """Changelog partitions Faust does not read until the next
        assignment (its active tables' own) are paused in aiokafka too.

        Faust stops reading them only in its own bookkeeping (they leave its
        active partitions; aiokafka is never told), so aiokafka's fetcher
        goes on fetching them, and the records it gets (this worker's own
        changelog writes) are never taken. A partition holding records
        nobody takes holds back the next fetch from its broker for
        aiokafka's prefetch backoff (100 ms): the input would wait that long,
        once per changelog partition, as the first changelog writes come
        back. Standby partitions are left alone (Faust reads them).
        """
        reads = consumer._get_active_partitions()
        unread = [tp for tp in assignment if self._is_changelog_tp(tp) and tp not in reads]
        if unread:
            await consumer._thread.pause_unread(unread)
            self.log.info("Paused %d changelog partitions this worker only writes", len(unread))

    async def _seek_uncommitted(self, consumer: Any, assignment: set[TP]) -> None:
        """Input partitions without a committed offset start at the beginning.

        ``perform_seek`` leaves them where the consumer happened to be, and
        after a rebalance within one process (the first assignment made while
        a killed worker's session had not yet expired, then the full one)
        such a partition may never be fetched at all: the worker sits idle
        with its whole backlog unread. Seeking them explicitly removes the
        dependence on the consumer's earlier position.
        """
        if self.app.conf.consumer_auto_offset_reset != "earliest":
            return
        fresh = [
            tp
            for tp in assignment
            if not self._is_changelog_tp(tp) and consumer._committed_offset.get(tp) is None
        ]
        if fresh:
            self.log.info("Seek partitions without a committed offset to the beginning: %s", fresh)
            await consumer._thread.seek_to_beginning(
                *(TopicPartition(tp.topic, tp.partition) for tp in fresh)
            )
            for tp in fresh:
                consumer._read_offset[tp] = None
