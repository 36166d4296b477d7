"""Faust glue: an App whose Kafka transport learns partition ends correctly.

Faust's recovery asks the consumer for each changelog partition's
"highwater" (``AIOKafkaConsumerThread._highwaters`` -> ``end_offsets()``, a
ListOffsets request) and refuses to start when the offset persisted in local
RocksDB is above it. On the embedded broker ListOffsets is wrong whenever the
last record batch of a partition holds several records (see
:mod:`state.offsets`), so a worker restarted on its own RocksDB state would
crash with ``ConsistencyError``, and one that does not crash would stop
replaying the changelog early. We replace that one method with the fetch high
watermark, which is exact on Tansu and equal to ``end_offsets()`` on Apache
Kafka, so the override is correct on both and changes nothing on Kafka.

Transactions (``processing_guarantee="exactly_once"``) keep Faust's own path:
there the last stable offset, not the high watermark, is the right bound.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, NamedTuple, cast

import faust
from aiokafka import TopicPartition
from faust.tables.manager import TableManager as FaustTableManager
from faust.tables.recovery import Recovery
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.transports import TransportT
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

from seqkeeper.state.fetch import RawTopics
from seqkeeper.state.fetch import install as install_raw_records
from seqkeeper.state.offsets import end_offsets
from seqkeeper.state.producer import BatchProducer

log = logging.getLogger("seqkeeper.recovery")


class HighwaterConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, with exact partition ends (see module doc)
    and the app's fetch wait (``App.fetch_max_wait_ms``)."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Faust fixes fetch_max_wait_ms at 1500. A broker may hold a fetch
        # that long when nothing was there as it arrived (the embedded one
        # does, even when records arrive meanwhile): up to 1.5 s of latency.
        wait = getattr(self.app, "fetch_max_wait_ms", None)
        if wait is not None:
            consumer._fetch_max_wait_ms = wait
        # Static membership (KIP-345): a restarted worker with the same
        # instance id takes its place in the group without a rebalance.
        consumer._group_instance_id = getattr(self.app, "group_instance_id", None)
        # Batch sources get the fetched records without a ConsumerRecord
        # each (state.fetch); Faust builds the consumer without a key
        # deserializer, and the fetcher is made at its start, after this.
        sources = getattr(self.app, "batch_sources", None)
        if sources is not None and consumer._key_deserializer is None:
            install_raw_records()
            consumer._key_deserializer = RawTopics(sources)  # (live: the app's dict)
        return consumer

    async def pause_unread(self, partitions: Iterable[TP]) -> None:
        """Stop aiokafka fetching ``partitions`` until the next assignment
        (its ``pause``: a new assignment starts unpaused) and drop what it
        fetched of them already (see
        :meth:`SeekFirstRecovery._pause_unread_changelogs`)."""
        tps = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
        await self.call_thread(self._pause_unread, tps)

    async def _pause_unread(self, partitions: list[TopicPartition]) -> None:
        consumer = self._ensure_consumer()
        assigned = consumer.assignment()
        mine = [tp for tp in partitions if tp in assigned]  # a rebalance may have begun
        consumer.pause(*mine)
        prefetched = consumer._fetcher._records
        for tp in mine:
            prefetched.pop(tp, None)

    async def _highwaters(self, partitions: Iterable[TP]) -> Mapping[TP, int]:
        if self.consumer.in_transaction:
            return await super()._highwaters(list(partitions))
        conf = self.app.conf
        transport = cast(faust_aiokafka.Transport, self.transport)
        auth = faust_aiokafka.credentials_to_aiokafka_auth(
            conf.broker_credentials, conf.ssl_context
        )
        ends = await end_offsets(
            faust_aiokafka.server_list(transport.url, transport.default_port),
            [TopicPartition(tp.topic, tp.partition) for tp in partitions],
            timeout=conf.broker_request_timeout,
            client_id=f"{conf.broker_client_id}-highwater",
            **auth,
        )
        return {TP(tp.topic, tp.partition): end for tp, end in ends.items()}


class HighwaterConsumer(faust_aiokafka.Consumer):
    """Faust's consumer with :class:`HighwaterConsumerThread`, running the
    app's ``before_commit`` hooks before every offset commit: they make the
    state and outputs of everything processed durable, so the commit itself
    does not flush the whole producer."""

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return HighwaterConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _commit_offsets(
        self, offsets: Mapping[TP, int], start_new_transaction: bool = True
    ) -> bool:
        hooks = getattr(self.app, "before_commit", ())
        for hook in hooks:
            await hook()
        if not hooks or self.in_transaction:
            return await super()._commit_offsets(offsets, start_new_transaction)
        # Faust's version first flushes the whole producer, which under
        # continuous load waits until its buffer happens to be empty (we saw
        # commits 10-30 s apart instead of every 2.8 s, so a crash replayed
        # far more than needed). The hooks already waited for exactly the
        # writes of everything below ``offsets``; the rest is Faust's own.
        assignment = self.assignment()
        committable = {tp: offset for tp, offset in offsets.items() if tp in assignment}
        if not committable:
            return False
        did_commit = bool(await self._commit(committable))
        if did_commit:
            self.app.tables.on_commit(committable)
        self._committed_offset.update(committable)
        self.app.monitor.on_tp_commit(committable)
        return did_commit

    async def _getmany(self, active_partitions: set[TP] | None, timeout: float) -> Any:
        """Fetched records of the active partitions, none of them lost.

        Faust hands its *live* set of active partitions to the consumer
        thread, where aiokafka reads it whenever records arrive, up to
        ``timeout`` later, and returns every partition's records when the
        set is empty. At the end of a recovery the set is empty for a moment
        (changelogs paused, input not yet resumed), right after the input
        partitions were sought: aiokafka returned the input records, Faust's
        ``getmany`` dropped them as not active, and nothing read them again
        (aiokafka's position had moved on). Seen as a worker that rebuilt
        its state and then never processed its input (tests/integration/
        test_worker.py, about one run in four).

        Here aiokafka gets a copy of the set as it is when the fetch starts,
        and records of a partition that stopped being active meanwhile are
        put back: the partition is sought to its first returned record.
        """
        snapshot = None if active_partitions is None else set(active_partitions)
        if snapshot is not None and not snapshot:
            return {}
        records = dict(await super()._getmany(snapshot, timeout))
        live = self._active_partitions
        if records and live is not None:
            assigned = self.assignment()
            for tp in [tp for tp in records if tp not in live]:
                first = records.pop(tp)[0].offset
                if tp in assigned:
                    self._thread.seek(tp, first)
                    self.log.info("%s paused while fetched: read again from %s", tp, first)
        return records

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - loop body tested
        """Faust's fetch loop (``Consumer._drain_messages``, faust-streaming
        0.11), with one change: the records of a *batch source*
        (:func:`batch_source`) are handed to its channel as they were
        fetched, one :class:`Fetched` per fetch, instead of one Faust
        ``Message`` and callback per record.

        Why: Faust hands each record over with ``wait_first(callback(message),
        suspend_flow.wait())``, i.e. four tasks and an ``asyncio.wait`` per
        record, then the stream's per-event machinery; a forward-only agent
        tops out at a few thousand records per second, the ceiling of every
        Faust app. Even its ``getmany`` costs several microseconds per record
        (a ``Message`` object, partition-end lookups and checks); here the
        checks are made once per partition and fetch.

        Kept from Faust: read offsets, gap tracking for compacted offsets (or
        transaction markers), ``commit_every``, the flow and generation
        checks, and the per-record path for every other topic (table
        changelogs during recovery). Acks are the agent's (:func:`ack_batch`):
        an offset is committed only after its record was processed, as before.
        A batch put while the flow is suspended (rebalance) is abandoned like
        Faust's own pending callbacks; its records were never acked, so the
        new assignment reads them again from the committed offsets.
        """
        sources: dict[str, Any] = getattr(self.app, "batch_sources", {})
        if not sources:
            await super()._drain_messages(fetcher)
            return
        callback = self.callback
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
        acks_enabled_for = self.app.topics.acks_enabled_for
        suspended = self.suspend_flow.wait
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                records, active = await self._wait_next_records(1.0)
                await self.sleep(0)
                if records is None or self.should_stop:
                    continue
                if not self.flow_active:  # as Faust's getmany: read them again later
                    try:
                        await self.perform_seek()
                    except Exception as exc:  # noqa: BLE001 - Faust only warns too
                        self.log.warning("exception performing seek when flow not active %r", exc)
                    continue
                generation_id = self.app.consumer_generation_id
                fetched: dict[str, Fetched] = {}
                for tp, batch in records.items():
                    if not self.flow_active or self.app.consumer_generation_id != generation_id:
                        break  # a rebalance began: the new assignment reads again
                    if not (active is None or tp in active or tp in self._buffered_partitions):
                        continue
                    self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                    r_offset = get_read_offset(tp)
                    if r_offset is not None and batch and batch[0].offset < r_offset:
                        batch = [r for r in batch if r.offset >= r_offset]  # read before
                    if not batch:
                        continue
                    if tp.topic in sources:
                        if acks_enabled_for(tp.topic):
                            previous = r_offset
                            for record in batch:
                                if previous and record.offset - previous > 1:
                                    await self._add_gap(tp, previous + 1, record.offset)
                                previous = record.offset
                        found = fetched.get(tp.topic)
                        if found is None:
                            found = fetched[tp.topic] = Fetched(generation_id, [])
                        found.partitions.append((tp, batch))
                        set_read_offset(tp, batch[-1].offset)
                        continue
                    for record in batch:  # Faust's own path, one record at a time
                        if not self.flow_active or (
                            self.app.consumer_generation_id != generation_id
                        ):
                            break
                        offset = record.offset
                        r_offset = get_read_offset(tp)
                        gap = offset - (r_offset or 0)
                        if gap > 1 and r_offset and acks_enabled_for(tp.topic):
                            await self._add_gap(tp, r_offset + 1, offset)
                        await self.wait_first(callback(self._to_message(tp, record)), suspended())
                        set_read_offset(tp, offset)
                if self._commit_every is not None and self._n_acked >= self._commit_every:
                    self._n_acked = 0
                    await self.commit()
                for topic, batches in fetched.items():
                    await self.wait_first(sources[topic].put(batches), suspended())
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    def ack_records(self, tp: TP, records: Iterable[Any]) -> None:
        """Faust's ``ack`` for fetched records of one partition at once (see
        ``Consumer.ack``: the same bookkeeping, under the same lock)."""
        if not self.app.topics.acks_enabled_for(tp.topic):
            return
        with ack_lock:
            committed = self._committed_offset[tp]
            index = self._acked_index[tp]
            acked = self._acked[tp]
            n = 0
            for record in records:
                offset = record.offset
                if (committed is None or offset >= committed) and offset not in index:
                    index.add(offset)
                    acked.append(offset)
                    n += 1
            self._n_acked += n
        notify(self._waiting_for_ack)


class HighwaterTransport(faust_aiokafka.Transport):
    Consumer = HighwaterConsumer


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
    compacted offsets and commits past it: messages lost. We saw exactly this
    (tests/integration/test_worker.py, rebuild from changelog: the first ~13
    records of every input partition vanished).

    The order here closes the window: seek the input partitions to their
    committed offsets while they are still paused, clear the queues (nothing
    of the input can be in them yet), and only then let the fetcher read the
    input partitions. A crash anywhere in between is harmless: nothing was
    processed, and the next assignment seeks to the committed offsets again.
    The changelog partitions Faust stops reading are paused in aiokafka too
    (:meth:`_pause_unread_changelogs`).
    """

    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        consumer = self.app.consumer
        self.log.info("Restore complete!")
        await self.app.on_rebalance_complete.send()
        self._set_recovery_ended()
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
        if self.app.consumer_generation_id != generation_id:
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
        aiokafka's prefetch backoff (100 ms): the input waited 100-120 ms,
        once per changelog partition, as the first changelog writes came
        back (the 250-400 ms of highest latency in a latency measurement's
        first second). Standby partitions are left alone (Faust reads them).
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
        a killed worker's session had not yet expired, then the full one) we
        saw such partitions never fetched at all: the worker sat idle with
        their whole backlog unread. Seeking them explicitly removes the
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
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = SeekFirstRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


class App(faust.App):
    """A ``faust.App`` with exact partition ends (:class:`HighwaterTransport`)
    and a recovery that loses no input (:class:`SeekFirstRecovery`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("TableManager", TableManager)
        super().__init__(*args, **kwargs)
        #: Awaited before every offset commit (see :class:`HighwaterConsumer`).
        self.before_commit: list[Callable[[], Awaitable[None]]] = []
        #: Awaited at a graceful stop, before the tables close their RocksDB.
        self.before_tables_close: list[Callable[[], Awaitable[None]]] = []
        #: Called when a rebalance reaches the tables, before they close or
        #: recover a partition's RocksDB.
        self.before_rebalance: list[Callable[[], None]] = []
        #: A check of the local state, running in a thread while the worker
        #: starts; tables open their RocksDB only after it is done.
        self.local_state_check: concurrent.futures.Future[None] | None = None
        #: Static group membership id (None: dynamic membership).
        self.group_instance_id: str | None = None
        #: The input consumer's fetch wait (None: Faust's 1500 ms).
        self.fetch_max_wait_ms: int | None = None
        #: Topics consumed as fetched batches: topic name -> channel.
        self.batch_sources: dict[str, Any] = {}
        #: Record batches through Faust's own aiokafka producer.
        self.batch_producer = BatchProducer(lambda: cast(Any, self.producer)._ensure_producer())

    def _new_transport(self) -> TransportT:
        return HighwaterTransport(self.conf.broker_consumer, self)


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


class Fetched(NamedTuple):
    """One fetch of a batch source: each partition's records in offset order,
    as their record batches hold them (:mod:`state.fetch`: ``offset``,
    ``key``, ``value``, ``headers``, ``timestamp`` in milliseconds)."""

    generation_id: int
    partitions: list[tuple[TP, list[Any]]]


def batch_source(app: App, topic: Any, maxsize: int = 4) -> Any:
    """Consume ``topic`` in fetched batches: the returned channel yields, to
    the agent that iterates it, one :class:`Fetched` per fetch. The agent
    processes the records and acknowledges them with :func:`ack_batch`;
    ``maxsize`` batches may wait in the channel (back-pressure on the
    fetcher beyond that)."""
    channel = app.channel(maxsize=maxsize)
    app.topics.add(topic)  # subscribed by the conductor, as an agent's topic is
    app.batch_sources[topic.get_topic_name()] = channel
    return channel


def current(app: Any, fetched: Fetched) -> bool:
    """Whether a fetched batch still belongs to this assignment: not when
    a rebalance began after it was fetched (its records are read again from
    the committed offsets of the new assignment, so it is dropped unacked)."""
    return bool(
        fetched.partitions
        and app.flow_control.is_active()
        and fetched.generation_id == app.consumer_generation_id
    )


def seconds(millis: int | None) -> float | None:
    """A record's timestamp in seconds (as Faust gives it)."""
    return None if millis is None else millis / 1000.0


def ack_batch(app: Any, partitions: Iterable[tuple[TP, list[Any]]]) -> None:
    """Acknowledge processed records (``Fetched.partitions``, or part of
    them): their offsets may now be committed (Faust commits the highest
    contiguous acknowledged offset)."""
    consumer = app.consumer
    for tp, records in partitions:
        consumer.ack_records(tp, records)
