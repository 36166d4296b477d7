"""``kill -USR1 <worker>``: a stuck worker explains itself.

Private members: ``Consumer._thread``, ``._read_offset``,
``._committed_offset``, ``._active_partitions`` (Faust);
``AIOKafkaConsumer._fetcher``, ``._subscription`` and the fetcher's
``_records``, ``_fetch_task``, ``_in_flight``, ``_pending_tasks``
(aiokafka 0.14). Read only, and a failure is logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
import signal
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
