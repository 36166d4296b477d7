"""``kill -USR1 <worker>``: a stuck worker explains itself.

Private members: ``Consumer._thread``, ``._read_offset``,
``._committed_offset``, ``._active_partitions`` (Faust);
``AIOKafkaConsumer._fetcher``, ``._subscription`` and the fetcher's
``_records``, ``_fetch_task``, ``_in_flight``, ``_pending_tasks``;
Faust's ``Producer._producer``, ``AIOKafkaProducer._message_accumulator``
(its ``_batches``, each batch's ``_ctime``) and ``._sender`` (its
``_sender_task``, ``_in_flight``, ``_muted_partitions``) (aiokafka 0.14).
Read only, and a failure is logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("seqkeeper.shell")


def install_diagnostics(app: Any, *probes: Callable[[], dict[str, Any]]) -> None:
    """``kill -USR1 <worker>`` logs every asyncio task's stack, the consumer's
    partition state and the probes' values (a stuck worker explains itself)."""

    def dump() -> None:
        lines = []
        for task in asyncio.all_tasks():
            lines.append(f"task {task.get_name()}:")
            lines.extend(f"  {where}" for where in _awaiting(task.get_coro()))
        state: dict[str, Any] = {}
        for probe in probes:
            state.update(probe())
        try:
            state["producer"] = _producer_state(app)
        except Exception as exc:  # noqa: BLE001 - diagnostics never fail the worker
            state["producer"] = repr(exc)
        consumer: Any = app.consumer
        try:
            kafka_consumer = consumer._thread._ensure_consumer()
            state["paused"] = kafka_consumer.paused()
            state["read offsets"] = dict(consumer._read_offset)
            state["committed offsets"] = dict(consumer._committed_offset)
            state["active partitions"] = consumer._active_partitions
            state["fetcher"] = _fetcher_state(kafka_consumer)
        except Exception as exc:  # noqa: BLE001 - diagnostics never fail the worker
            state["consumer"] = repr(exc)
        log.warning("state: %s", state)
        log.warning("asyncio tasks:\n%s", "\n".join(lines))

    @app.task  # type: ignore[untyped-decorator]
    async def dump_tasks_on_sigusr1() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump)


def _fetcher_state(kafka_consumer: Any) -> dict[str, Any]:
    """aiokafka's view of the assignment: per partition its position, pause
    and prefetched records, and whether the fetch routine still runs."""
    fetcher = kafka_consumer._fetcher
    assignment = kafka_consumer._subscription.subscription.assignment
    partitions = {}
    for tp in assignment.tps if assignment is not None else ():
        st = assignment.state_value(tp)
        partitions[f"{tp.topic}/{tp.partition}"] = (
            st.position if st.has_valid_position else None,
            "paused" if st.paused else "",
            "prefetched" if tp in fetcher._records else "",
            st.highwater,
        )
    task = fetcher._fetch_task
    return {
        "partitions (position, paused, prefetched, highwater)": partitions,
        "fetch routine": "done" if task.done() else "running",
        "in flight": set(fetcher._in_flight),
        "pending": len(fetcher._pending_tasks),
    }


def _producer_state(app: Any) -> dict[str, Any]:
    """Where the records of a send that waits for its acknowledgements are:
    queued in aiokafka's accumulator (and whether their partition's leader
    is known), sent and in flight, or neither (acknowledged by nobody)."""
    now = time.monotonic()
    waiting = [
        (round(now - began, 1), sorted({f"{t}/{p}" for t, p in tps}))
        for began, tps in app.batch_producer.waiting.values()
    ]
    producer = getattr(app.producer, "_producer", None)
    if producer is None:
        return {"sends waiting (s, partitions)": waiting, "aiokafka producer": None}
    cluster = producer.client.cluster
    queued = {
        f"{tp.topic}/{tp.partition}": (
            len(batches),
            round(now - batches[0]._ctime, 1),
            cluster.leader_for_partition(tp),
        )
        for tp, batches in producer._message_accumulator._batches.items()
        if batches
    }
    sender = producer._sender
    task = sender._sender_task
    return {
        "sends waiting (s, partitions)": waiting,
        "queued (batches, oldest s, leader)": queued,
        "in flight to": set(sender._in_flight),
        "muted": sorted(f"{tp.topic}/{tp.partition}" for tp in sender._muted_partitions),
        "sender routine": "none" if task is None else "done" if task.done() else "running",
    }


def _awaiting(coro: Any) -> list[str]:
    """Where a coroutine (or async generator) and what it awaits are suspended."""
    out = []
    while coro is not None:
        frame = next(
            (f for a in ("cr_frame", "ag_frame", "gi_frame") if (f := getattr(coro, a, None))),
            None,
        )
        if frame is not None:
            out.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = next(
            (n for a in ("cr_await", "ag_await", "gi_yieldfrom") if (n := getattr(coro, a, None))),
            None,
        )
    return out
