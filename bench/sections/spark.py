"""``spark``: the Spark data source against a plain consumer, changelog and
audit compaction, and ``compact --follow``'s lag."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from typing import Any

import orjson

from seqkeeper.bench.measure import (
    Figure,
    _tag,
)
from seqkeeper.bench.rig import (
    Bench,
)
from seqkeeper.bench.sections.tally import Tally
from seqkeeper.fleet.publishing import publish
from seqkeeper.security import kafka_options


def run(bench: Bench, tally: Tally) -> None:
    """The Spark data source, compaction, the audit and ``compact --follow``."""
    bench.say("Spark")
    direct, source, compaction, audit, follow = spark(bench)
    tally.figures.extend([direct, source, compaction, audit, follow])
    tally.ratios.append(
        Figure(
            "Spark source / aiokafka",
            source.value / direct.value,
            "×",
            "≥ 0.5",
            source.value >= 0.5 * direct.value,
        )
    )


def spark(bench: Bench) -> tuple[Figure, Figure, Figure, Figure, Figure]:
    from seqkeeper.spark_sink.audit import compact_audit
    from seqkeeper.spark_sink.job import spark_session
    from seqkeeper.spark_sink.kafka_source import read_kafka
    from seqkeeper.spark_sink.snapshots import compact_snapshots

    n = bench.sizes.spark_records
    tag = _tag("spark")
    topic = f"{tag}-state-changelog"
    bench.topics([topic])
    records = [(b"k%d" % (i % max(1, n // 4)), b"v" * 100) for i in range(n)]
    asyncio.run(publish(bench.bootstrap, topic, records))
    # The audit's input: ordered events, every tenth one a copy (a
    # re-emission the audit counts, not a row)
    events = f"{tag}-events.ordered"
    bench.topics([events])
    keys = max(1, n // 100)
    audited = [
        (
            b"k%d" % (i % keys),
            orjson.dumps(
                {
                    "messageId": f"m{i - i % 10 if i % 10 == 9 else i}",
                    "seq": i // keys + 1,
                    "type": "Posted",
                    "data": {"n": i},
                }
            ),
        )
        for i in range(n)
    ]
    asyncio.run(publish(bench.bootstrap, events, audited))
    t0 = time.monotonic()
    asyncio.run(_consume_all(bench.bootstrap, topic, n))
    direct = n / (time.monotonic() - t0)
    from pyspark.sql import SparkSession

    ours = SparkSession.getActiveSession() is None  # else: the caller's (tests)
    spark = spark_session("local[2]")
    try:
        opts = {"kafka.bootstrap.servers": bench.bootstrap, "subscribe": topic}
        read_kafka(spark, opts).count()  # warm-up: Python workers started
        t0 = time.monotonic()
        assert read_kafka(spark, opts).count() == n
        source = n / (time.monotonic() - t0)
        t0 = time.monotonic()
        compact_snapshots(spark, bench.bootstrap, [topic], bench.workdir / tag)
        compaction = time.monotonic() - t0
        t0 = time.monotonic()
        compact_audit(spark, bench.bootstrap, [events], bench.workdir / f"{tag}-audit")
        audit_rate = n / (time.monotonic() - t0)
        follow = follow_lag(bench, spark, f"{tag}-follow")
    finally:
        if ours:
            spark.stop()
    return (
        Figure("aiokafka consumer read", direct, "rec/s"),
        Figure(
            "Spark data source read",
            source,
            "rec/s",
            "≥ 0.5 × aiokafka",
            source >= 0.5 * direct,
        ),
        Figure(
            f"compaction of {n:,} changelog records, local[2]",
            compaction,
            "s",
            "< 60 s",
            compaction < 60,
        ),
        Figure(f"audit compaction of {n:,} events, local[2]", audit_rate, "rec/s"),
        follow,
    )


def follow_lag(bench: Bench, spark: Any, tag: str) -> Figure:
    """``compact --follow``'s lag (:func:`seqkeeper.spark_sink.follow.follow`
    in this process) while events arrive at ``follow_rate`` a second for
    ``follow_seconds``: how long a record waits to be in the store.

    A batch commits what the topics held when it started; a record
    produced after the previous batch started waits for this batch's
    commit, so the longest wait of batch i is its commit time minus
    batch i-1's start (the trigger interval's wait included). Batch
    starts are taken where the batch's function starts (Spark read the
    ends just before: a few ms earlier)."""
    from seqkeeper.spark_sink.follow import BatchReport, follow

    rate, seconds = bench.sizes.follow_rate, bench.sizes.follow_seconds
    trigger = bench.sizes.follow_trigger
    events = f"{tag}.ordered"
    bench.topics([events])
    settings = bench.settings(tag)
    reports: list[tuple[float, BatchReport]] = []  # (commit wall time, report)
    stop = threading.Event()
    runner = threading.Thread(
        target=follow,
        args=(spark, settings, bench.workdir / tag, ([], [events]), trigger, stop),
        kwargs={"report": lambda b: reports.append((time.time(), b))},
        daemon=True,
    )
    began = time.time()
    runner.start()
    sent = asyncio.run(_steady(bench.bootstrap, events, rate, seconds))
    deadline = time.monotonic() + 10 * trigger + 120
    while time.monotonic() < deadline and runner.is_alive():
        done = [b for at, b in reports if at > began + seconds]
        if done and done[-1].lag_records == 0:
            break
        time.sleep(0.5)
    stop.set()
    runner.join(timeout=300)
    batches = [(at, b) for at, b in reports if b.runs]
    waits = _follow_waits(began, batches)
    # (the first batch waits for the query's start too: reported apart)
    steady = waits[1:]
    worst = max(steady, default=float("inf"))
    caught_up = bool(reports) and reports[-1][1].lag_records == 0
    return Figure(
        f"compact --follow: longest wait of a record for the store after the first batch, "
        f"{rate:,} events/s, "
        f"trigger {trigger:g} s",
        worst,
        "s",
        f"≤ trigger + 10 s = {trigger + 10:g} s",
        caught_up and worst <= trigger + 10,
        detail={
            "median wait (s)": statistics.median(steady) if steady else None,
            "first batch's wait, the query's start included (s)": waits[0] if waits else None,
            "batches": len(batches),
            "events": sent,
            "caught up": caught_up,
            "batch seconds": [round(b.seconds, 2) for _, b in batches],
        },
    )


def _follow_waits(began: float, batches: list[tuple[float, Any]]) -> list[float]:
    """Per committed batch: its commit time minus the previous batch's
    start (the first: minus ``began``), wall-clock seconds."""
    waits, start = [], began
    for at, batch in batches:
        waits.append(at - start)
        start = at - batch.seconds
    return waits


async def _steady(bootstrap: str, topic: str, rate: int, seconds: float) -> int:
    """Events (as the ordered topic holds them) at ``rate`` a second for
    ``seconds``, sent every 100 ms; the count sent."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **kafka_options())
    await producer.start()
    sent, t0 = 0, time.monotonic()
    try:
        while (elapsed := time.monotonic() - t0) < seconds:
            due = int(elapsed * rate)
            for i in range(sent, due):
                value = orjson.dumps(
                    {"messageId": f"f{i}", "seq": i // 50 + 1, "type": "Posted", "data": {"n": i}}
                )
                await producer.send(topic, value, key=b"k%d" % (i % 50))
            sent = max(sent, due)
            await producer.flush()
            await asyncio.sleep(0.1)
    finally:
        await producer.stop()
    return sent


async def _consume_all(bootstrap: str, topic: str, n: int) -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        **kafka_options(),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=10_000,
    )
    await consumer.start()
    try:
        got = 0
        while got < n:
            batch = await consumer.getmany(timeout_ms=1000)
            got += sum(len(v) for v in batch.values())
    finally:
        await consumer.stop()
