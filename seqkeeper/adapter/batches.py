"""Batch sources: Faust's fetch loop hands a topic's records over as
fetched, one :class:`Fetched` per fetch (faust-streaming 0.15.3,
``Consumer._drain_messages`` and ``Consumer.ack``).

Private members: ``Consumer._read_offset``, ``._committed_offset``,
``._acked``, ``._acked_index``, ``._n_acked``, ``._waiting_for_ack``,
``._commit_every``, ``._buffered_partitions``, ``._add_gap``,
``._wait_next_records``, ``._to_message``, ``._stopped`` (Faust);
``fetcher._stopped``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, NamedTuple

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

from seqkeeper.adapter.lifecycle import lifecycle_app
from seqkeeper.adapter.recovery import BatchRestore


class BatchFetchConsumer(faust_aiokafka.Consumer):
    """Faust's consumer whose fetch loop serves batch sources."""

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - loop body tested
        """Faust's fetch loop (``Consumer._drain_messages``, faust-streaming
        0.15.3), with one change: the records of a *batch source*
        (:func:`batch_source`) are handed to its channel as they were
        fetched, one :class:`Fetched` per fetch, instead of one Faust
        ``Message`` and callback per record.

        Why: Faust hands each record over with ``wait_first(callback(message),
        suspend_flow.wait())``, i.e. four tasks and an ``asyncio.wait`` per
        record, then the stream's per-event machinery: that per-record
        overhead, not the agent's work, bounds every Faust app's throughput.
        Even its ``getmany`` does work per record (a ``Message`` object,
        partition-end lookups and checks); here the
        checks are made once per partition and fetch.

        Kept from Faust: read offsets, gap tracking for compacted offsets (or
        transaction markers), ``commit_every``, the flow and generation
        checks, and the per-record path for every other topic (a standby's
        changelog partitions). A restore's active changelog partitions are
        applied a fetch at a time too (:class:`~seqkeeper.adapter.recovery.BatchRestore`). Acks are the agent's (:func:`ack_batch`):
        an offset is committed only after its record was processed, as on
        Faust's own path.
        A batch put while the flow is suspended (rebalance) is abandoned like
        Faust's own pending callbacks; its records were never acked, so the
        new assignment reads them again from the committed offsets.
        """
        sources = lifecycle_app(self.app).batch_sources
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
        restore = BatchRestore(self.app)
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
                    if restore.takes(tp):  # a table's restore, the fetch at once
                        restore.apply(tp, batch)
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


class Fetched(NamedTuple):
    """One fetch of a batch source: each partition's records in offset order,
    as their record batches hold them (:mod:`seqkeeper.adapter.records`: ``offset``,
    ``key``, ``value``, ``headers``, ``timestamp`` in milliseconds)."""

    generation_id: int
    partitions: list[tuple[TP, list[Any]]]


def batch_source(app: Any, topic: Any, maxsize: int = 4) -> Any:
    """Consume ``topic`` in fetched batches: the returned channel yields, to
    the agent that iterates it, one :class:`Fetched` per fetch. The agent
    processes the records and acknowledges them with :func:`ack_batch`;
    ``maxsize`` batches may wait in the channel (back-pressure on the
    fetcher beyond that)."""
    channel = app.channel(maxsize=maxsize)
    app.topics.add(topic)  # subscribed by the conductor, as an agent's topic is
    lifecycle_app(app).batch_sources[topic.get_topic_name()] = channel
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


def ack_batch(app: Any, partitions: Iterable[tuple[TP, list[Any]]]) -> None:
    """Acknowledge processed records (``Fetched.partitions``, or part of
    them): their offsets may now be committed (Faust commits the highest
    contiguous acknowledged offset)."""
    consumer = app.consumer
    for tp, records in partitions:
        consumer.ack_records(tp, records)


def read_offset(app: Any, tp: TP) -> int | None:
    """The offset of the last record of ``tp`` the fetch loop handed over
    (Faust's read offset; ``None`` before the first)."""
    offset = app.consumer._read_offset.get(tp)
    return None if offset is None else int(offset)
