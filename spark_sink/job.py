"""``seqkeeper compact``: state snapshots of the changelog topics and the
audit log of the message topics, in one run (see :mod:`spark_sink.snapshots`
and :mod:`spark_sink.audit`)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seqkeeper.processors.envelope import Codec
from seqkeeper.processors.return_address import ReplyTopics, matches, refusal
from seqkeeper.security import kafka_options
from seqkeeper.settings import Settings
from seqkeeper.spark_sink.audit import AuditSummary, RetentionReport, apply_retention, compact_audit
from seqkeeper.spark_sink.crypto import Sealer
from seqkeeper.spark_sink.snapshots import compact_snapshots


async def existing_topics(bootstrap: str) -> set[str]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kafka_options())
    try:  # (stopped when its start fails too: else "Unclosed AIOKafkaConsumer")
        await consumer.start()
        return set(await consumer.topics())
    finally:
        await consumer.stop()


def plan_topics(settings: Settings, existing: set[str]) -> tuple[list[str], list[str]]:
    """(changelog topics, message topics) of both topologies that exist
    (``existing``: those the user may describe). The message topics are
    every topic a worker writes: the ordered processor's output whether or
    not ``compact`` is given the processor setting (a worker that had one
    wrote it), and, when the command worker's topics exist, the reply
    topics: those ``existing`` that ``SEQKEEPER_REPLY_TOPICS`` matches
    (without a command worker, a reply topic is some other app's)."""
    ordered = settings.with_overrides(topology="ordered")
    commands = settings.with_overrides(topology="commands")
    changelogs = [
        f"{ordered.group_id}-state-changelog",
        f"{commands.group_id}-commands-changelog",
    ]
    messages = list(
        dict.fromkeys([*ordered.topics(), ordered.ordered.processed_topic, *commands.topics()])
    )
    commanded = any(t in existing for t in commands.topics())
    replies = sorted(
        t
        for t in (existing if commanded else ())
        if any(matches(p, t) for p in commands.commands.reply_topics)
        # (where the worker may write a reply: not its own topics, __*)
        and not refusal(
            t, ReplyTopics(("*",), own=tuple(messages), own_prefixes=(f"{commands.group_id}-",))
        )
    )
    return [t for t in changelogs if t in existing], [
        *[t for t in messages if t in existing],
        *[t for t in replies if t not in messages],
    ]


def codec_topics(settings: Settings) -> list[str]:
    """The topics whose values are in ``SEQKEEPER_CODEC``: the ordered
    worker's (the command worker's are JSON)."""
    ordered = settings.with_overrides(topology="ordered").ordered
    return list(dict.fromkeys([*ordered.topics(), ordered.processed_topic]))


def spark_session(master: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName("seqkeeper-compact")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if master.startswith("local"):
        # The whole job runs in this machine's JVM: nothing elsewhere needs
        # to reach it. Left to Spark, the driver and its block manager
        # listen on the address the host name resolves to, and the web UI
        # (jobs, environment; no authentication) on every interface, port
        # 4040; the CLI reports progress itself (watch_tasks).
        builder = (
            builder.config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            # Spark's default, 200 partitions per shuffle, sized for a
            # cluster: on one machine a run's windows and joins spent more
            # on those tasks than on the records (a follow micro-batch most)
            .config("spark.sql.shuffle.partitions", str(2 * _local_cores(master)))
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")  # the CLI shows progress itself
    return spark


def _local_cores(master: str) -> int:
    """The cores of a local master: ``local`` 1, ``local[4]`` 4,
    ``local[*]`` (or ``local[4,2]``, with retries) this machine's or 4."""
    inside = master.partition("[")[2].partition("]")[0].split(",")[0]
    if inside.isdigit():
        return max(1, int(inside))
    return (os.cpu_count() or 2) if inside == "*" else 1


def planned_topics(settings: Settings) -> tuple[list[str], list[str]]:
    """:func:`plan_topics` on the broker of ``settings`` now."""
    return plan_topics(settings, asyncio.run(existing_topics(settings.broker.bootstrap)))


def run_compact(
    spark: Any,
    settings: Settings,
    warehouse: Path,
    step: Callable[[str, int], None] = lambda label, total: None,
    sealer: Sealer | None = None,
    topics: tuple[list[str], list[str]] | None = None,
    report: Callable[[AuditSummary], None] = lambda summary: None,
    ends: dict[str, dict[str, int]] | None = None,
    retained: Callable[[RetentionReport], None] = lambda report: None,
    codec: Codec | None = None,
) -> dict[str, int]:
    """One compaction run; the run numbers of the snapshots and the audit
    (``sealer``: encrypt at rest, :mod:`spark_sink.crypto`). ``step(label,
    total)`` is called as each of ``total`` units (a changelog topic, the
    audit log) starts. ``topics``: (changelog topics, message topics) as
    :func:`planned_topics` found them (the CLI checks them before Spark
    starts: a refusal in the middle would leave the units before it
    committed); None: found here. ``report``: the audit run's summary
    (rows, copies skipped, conflicts). ``ends``: where the run stops, per
    topic and partition (default: the topics' ends now). ``codec``: the
    value codec of the ordered worker's topics (``SEQKEEPER_CODEC``,
    loaded by the caller; ``None``: JSON)."""
    changelogs, messages = topics if topics is not None else planned_topics(settings)
    total = len(changelogs) + bool(messages)
    done = {}
    if changelogs:
        done["snapshots"] = compact_snapshots(
            spark,
            settings.broker.bootstrap,
            changelogs,
            warehouse,
            sealer,
            on_topic=lambda topic: step(f"snapshot of {topic}", total),
            isolation=settings.broker.isolation,
            ends=None if ends is None else {t: ends.get(t, {}) for t in changelogs},
        )
    if messages:
        step(f"audit log of {len(messages)} topics", total)
        done["audit"] = compact_audit(
            spark,
            settings.broker.bootstrap,
            messages,
            warehouse,
            sealer,
            report,
            id_header=settings.ordered.message_id_header,
            isolation=settings.broker.isolation,
            ends=None if ends is None else {t: ends.get(t, {}) for t in messages},
            codec=codec,
            codec_topics=codec_topics(settings),
        )
    if not settings.spark.audit_retention.keeps_everything:
        retained(apply_retention(warehouse, settings.spark.audit_retention))
    return done


def watch_tasks(spark: Any, report: Callable[[int, int], None], stop: Any) -> None:
    """Until ``stop`` (a threading.Event) is set, report twice a second the
    completed and total tasks of Spark's active stages."""
    tracker = spark.sparkContext.statusTracker()
    while not stop.wait(0.5):
        done = total = 0
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        report(done, total)
