"""Input for workers: published all at once (:func:`publish`, :func:`send`),
or in the background while faults happen (:class:`Background` running
:func:`spread` or :func:`trickle`)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaProducer

from seqkeeper.security import kafka_options

if TYPE_CHECKING:
    from rich.progress import Progress

#: A record to publish: key, value.
Records = Sequence[tuple[bytes | None, bytes | None]]
#: A record to publish with its headers: key, value, headers.
WithHeaders = Sequence[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]]


async def publish(
    bootstrap: str,
    topic: str,
    records: Records,
    progress: Progress | None = None,
) -> None:
    """Produce ``records`` (key, value) in order, in pipelined batches."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, **kafka_options(), linger_ms=5, acks="all"
    )
    await producer.start()
    task = progress.add_task("publishing", total=len(records)) if progress else None
    try:
        pending = []
        for i, (key, value) in enumerate(records, 1):
            pending.append(await producer.send(topic, value, key=key))
            if i % 5_000 == 0:
                await asyncio.gather(*pending)
                pending.clear()
                if progress and task is not None:
                    progress.update(task, completed=i)
        await asyncio.gather(*pending)
        if progress and task is not None:
            progress.update(task, completed=len(records))
    finally:
        await producer.stop()


async def send(bootstrap: str, topic: str, records: WithHeaders) -> None:
    """Produce ``records`` (key, value, headers) in order, requests up to
    1 MiB (the bad-input corpus holds records near that size)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        **kafka_options(),
        acks="all",
        max_request_size=1_048_576,
        linger_ms=5,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(topic, v, key=k, headers=list(h) or None) for k, v, h in records
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def spread(
    bootstrap: str, topic: str, records: Records, seconds: float, stop: threading.Event
) -> None:
    """Publish ``records`` evenly over ``seconds``: a batch every half
    second, each by a producer of its own (:func:`publish`), so a batch
    after a frozen broker or a dead worker starts afresh (chaos's input)."""
    batches = max(1, int(seconds * 2))
    size = -(-len(records) // batches)
    t0 = time.monotonic()
    for i in range(batches):
        if stop.is_set():
            return
        await publish(bootstrap, topic, records[i * size : (i + 1) * size])
        await asyncio.sleep(max(0.0, t0 + (i + 1) * seconds / batches - time.monotonic()))


async def trickle(
    bootstrap: str,
    topic: str,
    records: Records,
    stop: threading.Event,
    chunk: int = 1_000,
    pause: float = 0.05,
) -> None:
    """Publish ``records`` in chunks of ``chunk``, ``pause`` seconds after
    each one is acknowledged (up to 20,000 records per second by default:
    input flowing while a worker is killed, the bench's failover), by one
    producer, until they are all out or ``stop`` is set."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, **kafka_options(), linger_ms=5, acks="all"
    )
    await producer.start()
    try:
        for i in range(0, len(records), chunk):
            if stop.is_set():
                return
            sent = [
                await producer.send(topic, value, key=key) for key, value in records[i : i + chunk]
            ]
            await asyncio.gather(*sent)
            await asyncio.sleep(pause)
    finally:
        await producer.stop()


class Background:
    """A publication (:func:`spread`, :func:`trickle`) running in a daemon
    thread of its own while the caller injects faults: :meth:`join` waits
    for it, :meth:`stop` ends it at its next batch; what it raised is in
    :attr:`failed` (a measurement or a scenario says so, the thread does
    not die unseen; ``report`` is told at once)."""

    def __init__(
        self,
        publication: Callable[[threading.Event], Awaitable[None]],
        name: str = "publish",
        report: Callable[[BaseException], object] | None = None,
    ) -> None:
        self._stop = threading.Event()
        self._report = report
        #: what the publication raised, if anything
        self.failed: list[BaseException] = []
        self._publication = publication
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            asyncio.run(self._publication(self._stop))  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - kept for the caller
            self.failed.append(exc)
            if self._report is not None:
                self._report(exc)

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)
