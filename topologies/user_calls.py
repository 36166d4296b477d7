"""Sync user functions (command handlers, ordered processors) run in worker
threads, so that the event loop, and with it the consumer's heartbeats, go
on while one runs, and so that the handler timeout applies to them too.

A batch of calls goes to one thread in one hop (a hop costs tens of
microseconds, a call of a small function well under one): the calls run
one after another there, and the loop watches the one running. A call past
the timeout is given up: its outcome is a :class:`TimeoutError`, the calls
after it in the batch do not run (the caller offers them again), and its
thread, which nothing can stop, is *stuck* until the function returns; what
it returns then is dropped.

Two rules keep a stuck call harmless:

* A slot (the caller's key: an ordered key, a command's entity) with a
  stuck call gets no other call until that one returned
  (:meth:`UserCalls.blocked`; ``on_free(slot)`` says when), so a retry never
  runs beside the call it retries.
* At most :data:`STUCK_THREADS` calls may be stuck at once; while that many
  are, no call starts (:meth:`UserCalls.full`): the worker keeps its
  partitions and its heartbeats, and processes nothing that needs a user's
  sync function until one returns (logged once per time it fills up).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

log = logging.getLogger("seqkeeper.calls")

#: Calls past the timeout whose threads may still run at once.
STUCK_THREADS = 4
#: Batches that may run at once besides the stuck ones (a fetch's and a timer's).
RUNNING_BATCHES = 2


class _Progress:
    """Shared by the loop and the batch's thread: the outcomes so far, the
    index of the call started last and when (set under ``lock``), and
    whether the loop gave up on the batch (set under ``lock``). The call
    at ``index`` runs while ``len(outcomes) == index``."""

    __slots__ = ("lock", "outcomes", "index", "started", "given_up")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: list[Any] = []
        self.index = -1
        self.started = time.monotonic()
        self.given_up = False


def _run(calls: Sequence[Callable[[], Any]], progress: _Progress) -> None:
    """The thread's part: each call in order until the loop gives up. An
    outcome is appended without the lock (one atomic append): the loop,
    which gives up under it, keeps only the outcomes it counted then, so
    one that comes after is dropped."""
    lock, outcomes, monotonic = progress.lock, progress.outcomes, time.monotonic
    for index, call in enumerate(calls):
        with lock:
            if progress.given_up:
                return
            progress.index = index
            progress.started = monotonic()
        outcomes.append(call())  # (never raises: the caller wraps the user's function)


class _Threads:
    """A pool of daemon threads, started as needed up to ``most``: a stuck
    call must not hold up the process's exit (``concurrent.futures``'
    threads are joined at exit)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.jobs: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]]]
        self.jobs = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.started = 0
        self.idle = 0

    def submit(self, job: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self.lock:
            if self.idle == 0 and self.started < self.most:
                self.started += 1
                self.idle += 1
                threading.Thread(target=self._work, name="seqkeeper-user", daemon=True).start()
            self.idle -= 1
        # the caller's context goes with the call, as asyncio.to_thread's
        # does: a span current in the agent is the handler's parent
        self.jobs.put((future, functools.partial(contextvars.copy_context().run, job)))
        return future

    def _work(self) -> None:
        while True:
            future, job = self.jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(job())
                except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
                    future.set_exception(exc)
            with self.lock:
                self.idle += 1


class UserCalls:
    """Runs batches of sync calls in worker threads (see the module
    docstring); ``limit``: the handler timeout in seconds (``None``: none)."""

    def __init__(
        self,
        limit: float | None,
        on_free: Callable[[Hashable], None] = lambda slot: None,
        stuck_threads: int = STUCK_THREADS,
    ) -> None:
        self.limit = limit
        self.on_free = on_free
        self.stuck_threads = stuck_threads
        self.stuck: dict[Hashable, int] = {}  # slot -> its stuck calls (at most one)
        self.stuck_count = 0
        self.warned = False
        self.pool = _Threads(stuck_threads + RUNNING_BATCHES)

    def blocked(self, slot: Hashable) -> bool:
        """Whether ``slot`` has a call that is still running past its timeout."""
        return slot in self.stuck

    def full(self) -> bool:
        """Whether no call may start: :data:`STUCK_THREADS` are stuck."""
        if self.stuck_count < self.stuck_threads:
            self.warned = False
            return False
        if not self.warned:
            self.warned = True
            log.error(
                "%d calls of a sync user function are still running past "
                "SEQKEEPER_HANDLER_TIMEOUT: no further call starts until one returns",
                self.stuck_count,
            )
        return True

    async def run(
        self, slots: Sequence[Hashable], calls: Sequence[Callable[[], Any]]
    ) -> tuple[list[Any], Hashable | None]:
        """Run ``calls`` (of ``slots``, one each) in one thread, in order:
        the outcomes of those that returned (a prefix), and the slot of the
        call that ran past the timeout, if one did (its outcome is the
        caller's to make; the calls after it did not run)."""
        progress = _Progress()
        future = asyncio.wrap_future(self.pool.submit(lambda: _run(calls, progress)))
        limit = self.limit
        try:
            while True:
                if limit is None:
                    await asyncio.shield(future)
                    return progress.outcomes, None
                wait = progress.started + limit - time.monotonic()
                done, _ = await asyncio.wait({future}, timeout=max(wait, 0.01))
                if done:
                    future.result()  # (a failure of seqkeeper's own is raised)
                    return progress.outcomes, None
                with progress.lock:
                    done_count = len(progress.outcomes)
                    if done_count != progress.index or time.monotonic() < progress.started + limit:
                        continue  # between two calls, or a new one started meanwhile
                    progress.given_up = True
                    outcomes = progress.outcomes[:done_count]
                slot = slots[len(outcomes)]
                self._stuck(slot, future)
                return outcomes, slot
        except asyncio.CancelledError:  # (a stop): the thread stops after its call
            with progress.lock:
                progress.given_up = True
                done_count = len(progress.outcomes)
                if done_count == progress.index:
                    self._stuck(slots[done_count], future)
            raise

    def _stuck(self, slot: Hashable, future: asyncio.Future[None]) -> None:
        self.stuck[slot] = self.stuck.get(slot, 0) + 1
        self.stuck_count += 1
        log.warning(
            "a sync user function ran past SEQKEEPER_HANDLER_TIMEOUT (%g s) on %s: "
            "its thread goes on until it returns (%d such now)",
            self.limit,
            slot,
            self.stuck_count,
        )

        def returned(_: Any) -> None:
            self.stuck_count -= 1
            left = self.stuck[slot] - 1
            if left:
                self.stuck[slot] = left
            else:
                del self.stuck[slot]
                self.on_free(slot)
            log.info("a sync user function past its timeout returned on %s", slot)

        future.add_done_callback(returned)
