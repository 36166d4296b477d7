"""How long until output flows again after a fault: the first output past
the ends a topic had (:func:`until_output`, polled end offsets, chaos's
recovery), or the first output that was not there before (the bench's
restart and failover: records read, an at-least-once re-emission is
byte-identical to an earlier output and does not count)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from seqkeeper.fleet.offsets import exactly_once, output_ends
from seqkeeper.fleet.poll import poll, records_in
from seqkeeper.security import kafka_options
from seqkeeper.settings import Settings
from seqkeeper.topics import TopicCache


def until_output(
    settings: Settings,
    topic: str,
    since: dict[int, int],
    every_partition: bool = False,
    timeout: float = 180.0,
    alive: Callable[[], object] | None = None,
    done: Callable[[], Awaitable[bool]] | None = None,
) -> float | None:
    """Seconds until ``topic`` (output of workers with ``settings``:
    :func:`~seqkeeper.fleet.offsets.output_ends`) grows past ``since`` (on
    every partition that ``every_partition`` asks for), polled every 0.2 s;
    ``None`` on timeout or once ``done()`` says there is nothing left to
    output. ``alive``: a worker's ``check_alive``."""
    t0 = time.monotonic()
    moved: set[int] = set()
    took: list[float] = []

    async def read() -> dict[int, int] | None:
        if done is not None and await done():
            return None  # nothing left to output
        return await output_ends(settings, topic)

    def flowing(now: dict[int, int] | None) -> bool:
        if now is not None:
            moved.update(p for p, end in now.items() if end > since.get(p, 0))
            if moved and (not every_partition or moved >= set(now)):
                took.append(time.monotonic() - t0)
        return now is None or bool(took)

    asyncio.run(poll(read, flowing, t0 + timeout, 0.2, alive=alive))
    return took[0] if took else None


def all_out(settings: Settings, topic: str, count: int) -> Callable[[], Awaitable[bool]]:
    """``done`` for :func:`until_output`: ``topic`` holds ``count`` records
    (under exactly_once, committed records: markers are not records)."""
    if exactly_once(settings):
        cache = TopicCache(settings.broker.bootstrap, "read_committed")

        async def committed() -> bool:
            return len(await cache.read(topic)) >= count

        return committed

    async def done() -> bool:
        return await records_in(settings.broker.bootstrap, [topic]) >= count

    return done


@contextlib.asynccontextmanager
async def reading(
    bootstrap: str, topic: str, since: dict[int, int]
) -> AsyncIterator[AIOKafkaConsumer]:
    """A consumer of partitions ``since`` of ``topic``, each from its offset
    there, fetching at once (20 ms fetch wait); stopped when the block ends."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        **kafka_options(),
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(since)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, since[tp.partition])
        yield consumer
    finally:
        await consumer.stop()


async def first_new_output(
    bootstrap: str,
    topic: str,
    since: dict[int, int],
    known: set[tuple[bytes | None, bytes | None]],
    alive: Callable[[], bool],
    t0: float,
    timeout: float,
) -> tuple[float, float, int]:
    """Reading ``topic`` from ``since`` (partition -> offset) as its records
    come: seconds from ``t0`` (monotonic) to the first record, and to the
    first record not in ``known`` (key, value); and how many records in
    ``known`` came before that one."""

    async with reading(bootstrap, topic, since) as consumer:
        first: float | None = None
        seen = 0
        while time.monotonic() < t0 + timeout:
            got = await consumer.getmany(timeout_ms=50)
            now = time.monotonic() - t0
            for records in got.values():
                for r in records:
                    first = now if first is None else first
                    if (r.key, r.value) not in known:
                        return first, now, seen
                    seen += 1
            if not alive():
                raise RuntimeError(f"the process writing {topic} died")
        raise TimeoutError(f"{topic}: no new output after {timeout}s")


async def first_new_per_partition(
    bootstrap: str,
    topic: str,
    start: dict[int, int],
    at_kill: dict[int, int],
    alive: Callable[[], bool],
    timeout: float,
) -> dict[int, tuple[float, float, int]]:
    """Reading partitions ``start`` (partition -> offset) of ``topic``: the
    records before ``at_kill`` (partition -> offset) were written before a
    kill; per partition, when (Unix time) the first record after them came
    and the first not among them (key and value: an at-least-once
    re-emission is byte-identical), and how many re-emissions came before
    that one."""

    async with reading(bootstrap, topic, start) as consumer:
        known: dict[int, set[tuple[bytes | None, bytes | None]]] = {p: set() for p in start}
        first: dict[int, float] = {}
        found: dict[int, tuple[float, float, int]] = {}
        seen = dict.fromkeys(start, 0)
        deadline = time.monotonic() + timeout
        while len(found) < len(start):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: no new output on {set(start) - set(found)}")
            got = await consumer.getmany(timeout_ms=50)
            now = time.time()
            for tp, records in got.items():
                p = tp.partition
                for r in records:
                    if p in found:
                        break
                    if r.offset < at_kill[p]:
                        known[p].add((r.key, r.value))
                        continue
                    first.setdefault(p, now)
                    if (r.key, r.value) in known[p]:
                        seen[p] += 1
                    else:
                        found[p] = (first[p], now, seen[p])
            if not alive():
                raise RuntimeError(f"the process writing {topic} died")
        return found
