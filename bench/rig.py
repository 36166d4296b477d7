"""The bench rig (:class:`Bench`): one broker, the sizes, a work directory,
the shared workload, and the measurements more than one section makes
(throughput of the limit, the peer and seqkeeper; latency). Each section is
a module of :mod:`seqkeeper.bench.sections`; :mod:`seqkeeper.bench.harness`
runs them.

Throughput is measured from outside the processes: the time from the first
output record to the expected count on the output topic (end offsets, polled
every 50 ms), so start-up and group joins are excluded and every process is
measured the same way. The ``guarantee`` section (exactly-once against
at-least-once, on a broker with transactions) stops its clock at the
committed input offsets instead: end offsets count exactly-once's commit
markers too (:func:`measure_output`).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from seqkeeper.adapter.producer import BatchProducer
from seqkeeper.bench.measure import (
    LATENCY_LINGER_MS,
    Figure,
    _committed_counter,
    _cpu_seconds,
    _latency_figure,
    _per_input,
    _tag,
    measure_output,
)
from seqkeeper.broker import free_port
from seqkeeper.fleet.offsets import committed_end_offsets
from seqkeeper.fleet.poll import records_in
from seqkeeper.fleet.processes import WorkerProcess, process
from seqkeeper.fleet.publishing import publish
from seqkeeper.security import kafka_options
from seqkeeper.settings import Guarantee, Settings
from seqkeeper.settings.runtime_settings import auto_fetch_wait
from seqkeeper.topics import create_topics, read_topic

Records = list[tuple[bytes | None, bytes | None]]


@dataclass(frozen=True)
class Sizes:
    messages: int = 200_000
    keys: int = 10_000
    partitions: int = 4
    deep_buffer: int = 100_000
    state_keys: int = 1_000_000
    spark_records: int = 1_000_000
    #: ``compact --follow``'s lag: seconds of input at ``follow_rate`` events
    #: a second, micro-batches every ``follow_trigger`` seconds.
    follow_seconds: float = 60.0
    follow_rate: int = 1_000
    follow_trigger: float = 10.0
    #: Length of each latency measurement. The embedded broker slows down as
    #: a partition's record batches pile up (bench/NOTES.md), so a longer run
    #: measures the broker more than the pipeline; each figure keeps its p99
    #: per second.
    latency_seconds: float = 8.0
    #: The soak (:mod:`seqkeeper.bench.sections.soak`): rounds of new keys, and keys per round.
    soak_rounds: int = 8
    soak_keys: int = 5_000
    #: Rounds of limit and seqkeeper, alternating (the ratio to the limit is
    #: the median of the rounds' ratios; the peer runs in the first round,
    #: and its ratio is to that round's seqkeeper); as many of 10 and
    #: ``deep_buffer`` buffered, alternating, for the depth ratio.
    rounds: int = 3


FULL = Sizes()
SMOKE = Sizes(
    rounds=1,
    messages=2_000,
    keys=100,
    deep_buffer=500,
    state_keys=2_000,
    spark_records=5_000,
    latency_seconds=3.0,
    follow_seconds=15.0,
    follow_rate=200,
    follow_trigger=5.0,
    soak_rounds=4,
    soak_keys=300,
)


def workload(
    messages: int, keys: int, seed: int = 1, late: float = 0.2, window: int = 50, dup: float = 0.05
) -> tuple[Records, int]:
    """``messages`` ~200-byte JSON events over ``keys`` keys; ``late`` of
    them arrive up to ``window`` places late in their key's stream; ``dup``
    are delivered twice. Returns the records and the distinct count."""
    rng = random.Random(seed)
    per_key: list[list[int]] = [[] for _ in range(keys)]
    for n in range(messages):
        per_key[n % keys].append(len(per_key[n % keys]) + 1)
    for seqs in per_key:
        for i in range(len(seqs)):
            if rng.random() < late:
                j = min(len(seqs) - 1, i + rng.randint(1, window))
                seqs.insert(j, seqs.pop(i))
    order = [k for k, seqs in enumerate(per_key) for _ in seqs]
    rng.shuffle(order)
    cursor = [0] * keys
    records: Records = []
    pad = "x" * 90
    for k in order:
        seq = per_key[k][cursor[k]]
        cursor[k] += 1
        key = f"key-{k:06d}"
        doc = {
            "messageId": f"{key}:{seq}",
            "seq": seq,
            "type": "bench.Event",
            "data": {"amount": seq * 7 % 1000, "pad": pad},
        }
        value = orjson.dumps(doc)
        records.append((key.encode(), value))
        if rng.random() < dup:
            records.insert(
                len(records) - rng.randint(0, min(20, len(records) - 1)), (key.encode(), value)
            )
    return records, messages


#: The targets that the table judges and the plots draw: seqkeeper's
#: throughput against the limit's, and p99 latency at half of its throughput.
#: The limit's target is higher on a broker with transactions (Apache Kafka)
#: than on one without (the embedded broker, whose fetches slow down as
#: record batches pile up in a partition: docs/performance.md).
LIMIT_RATIO = 0.5
LIMIT_RATIO_WITH_TRANSACTIONS = 0.75


def limit_ratio(bootstrap: str) -> float:
    """The limit's target on the broker at ``bootstrap``."""
    from seqkeeper.runtime.guarantee import has_transactions

    probe = f"{_tag('limit')}-probe"
    return (
        LIMIT_RATIO_WITH_TRANSACTIONS
        if asyncio.run(has_transactions(bootstrap, probe))
        else LIMIT_RATIO
    )


LATENCY_P99_MS = 100


#: The guarantee of every section but ``guarantee``. The default (auto) is
#: exactly-once on a broker with transactions, and those sections count
#: records by end offsets, which commit markers inflate (:func:`measure_output`);
#: at-least-once is also what the limit is (consume, produce, commit), and
#: what the embedded broker runs anyway. The ``guarantee`` section measures
#: exactly-once against it.
PINNED = "at_least_once"


def worker_fetch_wait_ms(settings: Settings) -> int | str:
    """The fetch wait a worker with ``settings`` runs, in milliseconds:
    ``SEQKEEPER_FETCH_MAX_WAIT=auto`` as the worker resolves it for the
    guarantee asked (``"auto"`` when that is auto too: the worker's start
    resolves both against the broker)."""
    r = settings.runtime
    if r.fetch_max_wait is not None:
        return r.fetch_wait_ms()
    if r.processing_guarantee == "auto":
        return "auto"
    return round(1000 * auto_fetch_wait(Guarantee(r.processing_guarantee)))


def changelog_ends(bootstrap: str, settings: Settings) -> dict[int, int]:
    """Per partition of the state changelog, 1 + the offset of its last
    record (0: none), as a read_committed reader sees it."""
    topic = f"{settings.group_id}-state-changelog"
    return asyncio.run(committed_end_offsets(bootstrap, topic, settings.broker.partitions))


async def _committed_input(bootstrap: str, group: str, source: str) -> int:
    """The input records of ``source`` that ``group`` has committed."""
    count = await _committed_counter(bootstrap, group, source)
    try:
        return await count()
    finally:
        await count.close()


#: How long a latency measurement waits for its first output at most.
WARM_UP_S = 180.0


async def _warm_up(producer: Any, consumer: Any, source: str, sink: str) -> None:
    """Send one message to ``source`` and wait until the worker puts it on
    ``sink`` (read by ``consumer``): a worker that never answers fails the
    section in one line instead of hanging the run."""
    warm = f"warm:{uuid.uuid4().hex[:4]}".encode()
    await producer.send_and_wait(
        source, orjson.dumps({"messageId": warm.decode(), "seq": 1, "type": "w"}), key=warm
    )
    deadline = time.monotonic() + WARM_UP_S
    while True:
        got = await consumer.getmany(timeout_ms=1000)
        if any(r.key == warm for rs in got.values() for r in rs):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no output on {sink} within {WARM_UP_S:g} s of the warm-up")


class Bench:
    def __init__(self, bootstrap: str, sizes: Sizes, workdir: Path, say: Callable[[str], None]):
        self.bootstrap = bootstrap
        self.sizes = sizes
        self.workdir = workdir
        self.say = say
        self.records, self.distinct = workload(sizes.messages, sizes.keys)

    def topics(self, names: list[str]) -> None:
        asyncio.run(create_topics(self.bootstrap, names, self.sizes.partitions))

    def timeout(self, n: int) -> float:
        return max(120.0, n / 50)

    def cpu_seconds(self, pid: int | None) -> float:
        return _cpu_seconds(pid)

    def committed_input(self, group: str, source: str) -> int:
        return asyncio.run(_committed_input(self.bootstrap, group, source))

    # -- throughput: the three side by side ---------------------------------

    def limit(self) -> Figure:
        tag = _tag("limit")
        src, dst = f"{tag}.in", f"{tag}.out"
        self.topics([src, dst])
        asyncio.run(publish(self.bootstrap, src, self.records))
        cmd = [sys.executable, "-m", "seqkeeper.bench.limit", self.bootstrap, src, dst, tag]
        with process(cmd, {}, self.workdir / f"{tag}.log") as p:
            rate, _ = measure_output(
                self.bootstrap,
                dst,
                len(self.records),
                lambda: p.poll() is None,
                self.timeout(len(self.records)),
            )
        return Figure("limit: plain aiokafka", rate, "msg/s")

    def peer(self) -> Figure:
        tag = _tag("peer")
        src, dst = f"{tag}.in", f"{tag}.out"
        self.topics([src, dst])
        asyncio.run(publish(self.bootstrap, src, self.records))
        env = {
            "BENCH_BROKER": self.bootstrap,
            "BENCH_IN": src,
            "BENCH_OUT": dst,
            "BENCH_APP": tag,
            "BENCH_DATA": str(self.workdir / tag),
            "BENCH_PARTITIONS": str(self.sizes.partitions),
            "BENCH_WEB_PORT": str(free_port()),
        }
        cmd = [sys.executable, "-m", "seqkeeper.bench.peer", "worker", "-l", "warn"]
        with process(cmd, env, self.workdir / f"{tag}.log") as p:
            rate, _ = measure_output(
                self.bootstrap,
                dst,
                self.distinct,
                lambda: p.poll() is None,
                self.timeout(self.distinct),
                start_on=[f"{tag}-seen-changelog", f"{tag}-next-changelog"],
            )
        return _per_input(
            "peer: Faust agent, 2 tables, send per event", rate, len(self.records), self.distinct
        )

    def settings(self, tag: str, **over: Any) -> Settings:
        # Every sequence of the workload arrives, but published input can
        # span more stream time than the default gap timeout (5 s): a gap
        # given up would turn its late message into a dead letter and the
        # ordered output would never reach the expected count.
        over.setdefault("gap_timeout", 3600.0)
        return Settings.of(
            bootstrap=self.bootstrap,
            app_id=tag,
            input_topic=f"{tag}.in",
            ordered_topic=f"{tag}.ordered",
            deduped_topic=f"{tag}.deduped",
            dlq_topic=f"{tag}.dlq",
            late_topic=f"{tag}.late",
            partitions=self.sizes.partitions,
            data_dir=self.workdir / tag,
            log_level="warning",
            **over,
        )

    def seqkeeper(
        self,
        records: Records | None = None,
        distinct: int | None = None,
        committed: bool = False,
        **over: Any,
    ) -> Figure:
        """Throughput of the workload (``over``: settings). With
        ``committed``, clocked by the group's committed input offsets
        (:func:`measure_output`), and the ordered output then read back
        (not timed; ``read_committed`` under exactly-once) to check that it
        is all there."""
        tag = _tag("seqkeeper")
        s = self.settings(tag, **over)
        self.topics(s.topics())
        records = self.records if records is None else records
        distinct = self.distinct if distinct is None else distinct
        asyncio.run(publish(self.bootstrap, s.ordered.input_topic, records))
        w = WorkerProcess(s, self.workdir / f"{tag}.log", "warning").start()
        try:
            rate, counted = measure_output(
                self.bootstrap,
                s.ordered.ordered_topic,
                len(records) if committed else distinct,
                w.running,
                self.timeout(distinct),
                start_on=[f"{s.group_id}-state-changelog", s.ordered.deduped_topic],
                committed=(s.group_id, s.ordered.input_topic) if committed else None,
            )
        finally:
            w.stop()
        guarantee = s.runtime.processing_guarantee
        if not committed:
            name = "seqkeeper: dedup + resequence, all features"
            if guarantee != "auto":
                name += f", {guarantee}"
            return _per_input(name, rate, len(records), distinct)
        # (read_committed only where it matters: the embedded broker, which
        # has no transactions, answers it with a wrong end)
        isolation = "read_committed" if guarantee == "exactly_once" else "read_uncommitted"
        outputs = asyncio.run(
            read_topic(self.bootstrap, s.ordered.ordered_topic, isolation=isolation)
        )
        # what a count of end offsets would have counted (exactly-once: the
        # commit markers besides the records)
        offsets = asyncio.run(records_in(self.bootstrap, [s.ordered.ordered_topic]))
        if len(outputs) < distinct:
            raise RuntimeError(
                f"{tag} ({guarantee}) committed its whole input with {len(outputs):,} "
                f"of {distinct:,} ordered outputs readable"
            )
        return Figure(
            f"seqkeeper {guarantee}: input per s to committed offsets",
            rate,
            "msg/s",
            detail={
                "outputs per s": rate * distinct / len(records),
                "counted": counted,
                "output records": len(outputs),
                "output end offsets": offsets,
                "clock": "first sign of work to the group's committed input offsets at the end",
                "commit interval s": s.runtime.commit_interval,
                "log": str(self.workdir / f"{tag}.log"),
            },
        )

    # -- latency --------------------------------------------------------------

    def latency(
        self, rate: float, read_committed: bool = False, name: str = "", **over: Any
    ) -> Figure:
        """End-to-end latency (produce → ordered output) of in-order input
        at ``rate`` messages per second (``over``: settings; ``name``: the
        figure's, up to "latency p99"). The output is read as a consumer of
        it would: ``read_committed`` for a worker under exactly-once (a
        record counts when its transaction commits, not when it is
        written), as the default consumer otherwise."""
        tag = _tag("latency")
        s = self.settings(tag, **over)
        guarantee = s.runtime.processing_guarantee
        if guarantee == "exactly_once":
            read_committed = True
        isolation = "read_committed" if read_committed else "read_uncommitted"
        self.topics(s.topics())
        w = WorkerProcess(s, self.workdir / f"{tag}.log", "warning").start()
        try:
            lat = asyncio.run(
                self._latency(
                    s.ordered.input_topic,
                    s.ordered.ordered_topic,
                    rate,
                    self.sizes.latency_seconds,
                    isolation,
                )
            )
        finally:
            w.stop()
        what = f"{name or 'seqkeeper'}, latency p99 at {rate:,.0f} msg/s, in order"
        if guarantee != "auto" and not name:
            what += f", {guarantee}"
        figure = _latency_figure(what, lat)
        figure.detail["fetch max wait ms"] = worker_fetch_wait_ms(s)
        figure.detail["isolation"] = isolation
        figure.detail["log"] = str(self.workdir / f"{tag}.log")
        return figure

    def limit_latency(self, rate: float, write_ahead: bool = False) -> Figure:
        """The same measurement through the limit's pipeline (plain aiokafka:
        consume, produce, commit): what the broker and its clients alone add
        at ``rate``, two hops as through seqkeeper. With ``write_ahead``,
        each fetch's records first write one changelog record per message
        and wait for its acknowledgement, both sent as record batches with
        seqkeeper's own producer (``bench.limit.write_ahead``): the floor of
        a pipeline that puts no output on the broker before its state."""
        tag = _tag("wal-latency" if write_ahead else "limit-latency")
        src, dst, log = f"{tag}.in", f"{tag}.out", f"{tag}.changelog"
        self.topics([src, dst, log] if write_ahead else [src, dst])
        # it fetches with the worker's fetch wait: with aiokafka's 500 ms the
        # embedded broker holds a fetch that finds nothing that long
        wait = self.settings(tag).runtime.fetch_wait_ms()
        cmd = [
            sys.executable,
            "-m",
            "seqkeeper.bench.limit",
            self.bootstrap,
            src,
            dst,
            tag,
            str(wait),
        ]
        with process(cmd + [log] if write_ahead else cmd, {}, self.workdir / f"{tag}.log"):
            lat = asyncio.run(self._latency(src, dst, rate, self.sizes.latency_seconds))
        what = "limit + write-ahead" if write_ahead else "limit: plain aiokafka"
        figure = _latency_figure(f"{what}, latency p99 at {rate:,.0f} msg/s", lat)
        figure.detail["fetch max wait ms"] = wait
        if write_ahead:
            figure.detail["changelog"] = log
        return figure

    async def _latency(
        self,
        source: str,
        sink: str,
        rate: float,
        seconds: float,
        isolation: str = "read_uncommitted",
    ) -> list[tuple[float, float]]:
        """Per record sent at ``rate`` for ``seconds`` and read on ``sink``
        (a consumer with ``isolation``): (latency, when it was sent, in
        seconds from the first send)."""
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        consumer = AIOKafkaConsumer(
            sink,
            bootstrap_servers=self.bootstrap,
            **kafka_options(),
            auto_offset_reset="earliest",
            fetch_max_wait_ms=5,
            isolation_level=isolation,
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, **kafka_options()
        )  # _paced lingers
        await consumer.start()
        await producer.start()
        try:
            await _warm_up(producer, consumer, source, sink)
            sent: dict[bytes, float] = {}
            lat: list[tuple[float, float]] = []
            n = int(rate * seconds)

            async def reader() -> None:
                while len(lat) < n:
                    got = await consumer.getmany(timeout_ms=500)
                    now = time.time()
                    for rs in got.values():
                        for r in rs:
                            t = sent.get(r.value)
                            if t is not None:
                                lat.append((now - t, t - first))

            task = asyncio.create_task(reader())
            t0, first = time.monotonic(), time.time()
            try:
                paced = BatchProducer(lambda: producer)
                await _paced(paced, source, rate, n, self.sizes.keys, sent, t0, first)
                await asyncio.wait_for(task, timeout=60)
            finally:
                task.cancel()
        finally:
            await producer.stop()
            await consumer.stop()
        return lat


async def _paced(
    out: BatchProducer,
    topic: str,
    rate: float,
    n: int,
    keys: int,
    sent: dict[bytes, float],
    t0: float,
    first: float,
) -> None:
    """Produce ``n`` in-order records over ``keys`` keys to ``topic`` at
    ``rate`` per second (monotonic ``t0``, wall clock ``first``), each
    stamped in ``sent`` with the time it was due, and return once all are
    acknowledged. As a producer that lingers :data:`LATENCY_LINGER_MS`: the
    records due within one linger go together, as one record batch per
    partition, and while a send is in flight the next records wait for it;
    a record's wait counts in its latency. Per record only the value is
    built: ``producer.send`` per record made the measuring process the
    busiest on the machine."""
    pick = await out.partitioner(topic)
    linger = LATENCY_LINGER_MS / 1000
    waiting: dict[tuple[str, int], list[tuple[bytes | None, bytes | None, Any]]] = {}
    ready = asyncio.Event()
    done = False

    async def sender() -> None:
        while True:
            if waiting:
                batches = dict(waiting)
                waiting.clear()
                await out.send(batches)
            elif done:
                return
            else:
                ready.clear()
                await ready.wait()

    task = asyncio.create_task(sender())
    seqs = [0] * keys
    i = 0
    while i < n:
        due = min(n, int((time.monotonic() - t0) * rate) + 1)
        for j in range(i, due):
            k = j % keys
            seqs[k] += 1
            key = f"lat-{k:06d}"
            value = orjson.dumps(
                {
                    "messageId": f"{key}:{seqs[k]}",
                    "seq": seqs[k],
                    "type": "t",
                    "data": {"pad": "x" * 120},
                }
            )
            sent[value] = first + j / rate
            kb = key.encode()
            waiting.setdefault((topic, pick(kb)), []).append((kb, value, ()))
        i = due
        ready.set()
        ahead = t0 + due / rate + linger - time.monotonic()
        if ahead > 0 and i < n:
            await asyncio.sleep(ahead)
    done = True
    ready.set()
    await task
