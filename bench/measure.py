"""How the bench measures, shared by its sections (``harness`` and
``versus``): a figure, the outside clock of a process's output
(:func:`measure_output`), a process's CPU and peak RSS, latency
percentiles, and the median of alternating rounds."""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from seqkeeper.security import kafka_options


@dataclass
class Figure:
    """One measured figure (``target``: its target, in words)."""

    name: str
    value: float
    unit: str
    target: str = ""
    met: bool | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def _per_input(name: str, rate: float, records: int, distinct: int) -> Figure:
    """A figure in input records per second, duplicates included (the
    limit's unit: it outputs every record it reads), from the rate of
    ``distinct`` outputs that ``records`` input records make."""
    return Figure(name, rate * records / distinct, "msg/s", detail={"outputs per s": rate})


def _tag(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:6]}"


#: Producer linger of the latency measurement's input (Kafka's default
#: ``linger.ms`` since 4.0, and librdkafka's): the embedded broker's fetch
#: lags behind a stream of tiny batches, so a shorter linger would measure
#: that lag. The linger counts in the latency measured.
LATENCY_LINGER_MS = 5


#: Seconds without a new output record before a measurement gives up.
STALL = 180.0


def measure_output(
    bootstrap: str,
    topic: str,
    expected: int,
    alive: Callable[[], bool],
    timeout: float,
    start_on: Sequence[str] = (),
    feed: Callable[[], None] | None = None,
    committed: tuple[str, str] | None = None,
) -> tuple[float, int]:
    """(records per second, records counted) from the first sign of work
    until ``expected`` records are on ``topic``. The clock starts at the
    first record on ``topic`` or on any of ``start_on`` (a worker's
    changelogs: a worker that writes state before output would otherwise be
    timed from its first output, after work it already did). With ``feed``
    (publishing the input to a running worker), the clock starts when the
    feed starts, in a thread, after the first look at ``topic``: its
    records from then on are counted.

    With ``committed`` (a consumer group and its input topic), what is
    counted is the input records whose offsets the group has committed,
    until ``expected`` of them are (the clock still starts as above). A
    high watermark counts offsets, not records: under exactly-once each
    transaction also writes a commit marker, at an offset of its own, into
    every partition it wrote, so the end offsets of ``topic`` reach
    ``expected`` before its records do. Committed input offsets count the
    same thing in both guarantees, input whose outputs are on the broker
    for good: exactly-once commits them in the transaction of those
    outputs, at-least-once after their acknowledgement, every
    ``commit_interval`` (which the caller keeps short, the same for both).
    Counting the output records instead (a ``read_committed`` consumer)
    would read every record in this process, on the cores the worker and
    the broker share, and lag behind a fast worker; a committed offset is
    one small request per poll."""

    async def run() -> tuple[float, int]:
        from aiokafka import AIOKafkaConsumer

        from seqkeeper.adapter.offsets import high_watermarks
        from seqkeeper.topics import UnknownTopic, topic_partitions

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, **kafka_options(), enable_auto_commit=False
        )
        await consumer.start()
        count = None
        try:
            started = time.monotonic()
            deadline = started + timeout
            first_at, first_n = None, 0
            last_n, progressed = -1, started
            tps = await topic_partitions(consumer, topic)
            if committed is not None:
                count = await _committed_counter(bootstrap, *committed)
            others: list[TopicPartition] = []
            waiting = list(start_on)  # may not exist before the worker runs
            failed: list[BaseException] = []
            if feed is not None:
                first_n = sum((await high_watermarks(consumer, tps)).values())
                first_at = time.monotonic()
                threading.Thread(target=_catching(feed, failed), name="feed", daemon=True).start()
            while time.monotonic() < deadline:
                for name in list(waiting):
                    try:
                        others += await topic_partitions(consumer, name)
                        waiting.remove(name)
                    except UnknownTopic:
                        pass
                ends = await high_watermarks(consumer, tps + others)
                n = sum(ends[tp] for tp in tps) if count is None else await count()
                now = time.monotonic()
                if first_at is None and sum(ends.values()) > 0:
                    first_at, first_n = now, n
                if failed:
                    raise RuntimeError(f"publishing the input failed: {failed[0]!r}")
                if n >= expected and first_at is not None:
                    if n > first_n:
                        return (n - first_n) / (now - first_at), n - first_n
                    # all of it came between two polls (tiny runs): count
                    # from the start of the measurement, start-up included
                    return n / (now - started), n
                if not alive():
                    raise RuntimeError(f"the process writing {topic} died")
                if n != last_n:
                    last_n, progressed = n, now
                elif now - progressed > STALL:
                    raise TimeoutError(
                        f"{topic}: stuck at {n} of {expected} records for {STALL:.0f}s"
                    )
                await asyncio.sleep(0.05)
            raise TimeoutError(f"{topic}: fewer than {expected} records after {timeout}s")
        finally:
            if count is not None:
                await count.close()
            await consumer.stop()

    return asyncio.run(run())


class _Committed:
    """The input records a consumer group has committed: the sum of its
    committed offsets on the input's partitions (none yet: 0)."""

    def __init__(self, admin: Any, group: str, tps: list[TopicPartition], node: int) -> None:
        self.admin, self.group, self.tps, self.node = admin, group, tps, node

    async def __call__(self) -> int:
        got = await self.admin.list_consumer_group_offsets(self.group, self.node, self.tps)
        return sum(max(0, meta.offset) for meta in got.values())

    async def close(self) -> None:
        await self.admin.close()


async def _committed_counter(bootstrap: str, group: str, source: str) -> _Committed:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient

    from seqkeeper.topics import topic_partitions

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, **kafka_options(), enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = await topic_partitions(consumer, source)
    finally:
        await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
    await admin.start()
    try:
        node = await admin.find_coordinator(group)
    except BaseException:
        await admin.close()
        raise
    return _Committed(admin, group, tps, node)


def _cpu_seconds(pid: int | None) -> float:
    """User and system CPU seconds the process has used so far."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _catching(call: Callable[[], None], failed: list[BaseException]) -> Callable[[], None]:
    """``call``, keeping what it raises in ``failed`` (run in a thread)."""

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - reported by the measurement
            failed.append(exc)

    return run


def _ms_at(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of ``ordered`` (seconds, sorted), in milliseconds."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _latency_figure(name: str, measured: list[tuple[float, float]]) -> Figure:
    """p99 of ``measured`` (:meth:`Bench._latency`), with p50, p90, max, the
    CDF and the p99 of each second's sends (a trend shows in it)."""
    lat = sorted(latency for latency, _ in measured)

    def p(q: float) -> float:
        return _ms_at(lat, q)

    seconds: dict[int, list[float]] = {}
    for latency, at in measured:
        seconds.setdefault(int(at), []).append(latency)
    per_second = [_ms_at(sorted(v), 0.99) for _, v in sorted(seconds.items())]
    return Figure(
        name,
        p(0.99),
        "ms",
        detail={
            "p50": p(0.5),
            "p90": p(0.9),
            "p99": p(0.99),
            "max": lat[-1] * 1000,
            "n": len(lat),
            "producer linger ms": LATENCY_LINGER_MS,
            "cdf": [lat[int(i * (len(lat) - 1) / 100)] * 1000 for i in range(101)],
            "p99 per second": per_second,
        },
    )


def _peak_rss_mb(pid: int | None) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    if pid is None:
        return 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _median_figure(figures: list[Figure]) -> Figure:
    """The round with the median value, naming every round's value."""
    ranked = sorted(figures, key=lambda f: f.value)
    middle = ranked[(len(ranked) - 1) // 2]
    if len(figures) > 1:
        middle.detail = {**middle.detail, "rounds": [f.value for f in figures]}
    return middle


def _ratio_of_rounds(
    name: str, tops: list[Figure], bottoms: list[Figure], target: str, least: float
) -> Figure:
    """The median of each round's ratio ``tops[i] / bottoms[i]``."""
    per_round = [t.value / b.value for t, b in zip(tops, bottoms, strict=True)]
    r = statistics.median(per_round)
    return Figure(
        name,
        r,
        "×",
        target,
        r >= least,
        {"rounds": per_round, "median of": "each round's ratio", "least": least},
    )
