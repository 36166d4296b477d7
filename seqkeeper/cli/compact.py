"""``seqkeeper compact`` (the topics into the Message Store's Iceberg
tables, once or ``--follow``, ``--reseal``) and ``seqkeeper replay`` (its
audit log back to a topic): :mod:`seqkeeper.spark_sink`."""

from __future__ import annotations

import signal
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from seqkeeper.cli.errors import Usage, exit_with
from seqkeeper.cli.options import (
    AppIdOpt,
    ClusterOpt,
    IsolationOpt,
    audit_sealer,
    settings_of,
)
from seqkeeper.settings import VARS, Settings


def compact(
    broker: ClusterOpt = None,
    warehouse: Annotated[Path, typer.Option(help="Where the Parquet tables go.")] = Path(
        "warehouse"
    ),
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[*]",
    app_id: AppIdOpt = None,
    purge_days: Annotated[
        Optional[int], typer.Option(help="Then delete audit days older than this many days.")
    ] = None,
    reseal: Annotated[
        bool,
        typer.Option(
            help="Then move every sealed value of the warehouse to the current audit key "
            "(key rotation) and report what is left under other keys (exit 1 if any)."
        ),
    ] = False,
    isolation: IsolationOpt = None,
    convert: Annotated[
        bool,
        typer.Option(
            help="First turn a warehouse of the pre-Iceberg layout (_LATEST files) into "
            "the Iceberg tables, once (docs/spark.md)."
        ),
    ] = False,
    follow: Annotated[
        bool,
        typer.Option(
            help="Keep compacting: a Spark Structured Streaming query commits each "
            "micro-batch of new records, until Ctrl-C or SIGTERM (docs/spark.md)."
        ),
    ] = False,
    trigger_seconds: Annotated[
        float, typer.Option(help="With --follow: seconds between micro-batches.", min=0.1)
    ] = 10.0,
    metrics_port: Annotated[
        Optional[int],
        typer.Option(
            help="With --follow: serve Prometheus metrics (the store's lag) at "
            "http://SEQKEEPER_WEB_HOST:PORT/metrics (0 picks a free port, printed).",
            min=0,
            max=65535,
        ),
    ] = None,
) -> None:
    """Compact the changelog topics (state snapshots) and the message topics
    (audit log) into Apache Iceberg tables, incrementally (PySpark)."""
    import asyncio
    import threading

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from seqkeeper.access import check_topics
    from seqkeeper.plugins import codec_of
    from seqkeeper.spark_sink.job import planned_topics, run_compact, spark_session, watch_tasks
    from seqkeeper.spark_sink.tables import (
        LegacyWarehouse,
        LostCommit,
        catalog,
        refuse_legacy,
        uri_of_rest,
    )

    console = Console()
    settings = settings_of(
        needs_broker=True, bootstrap=broker, app_id=app_id, connects=True, isolation=isolation
    )
    sealer = audit_sealer()
    codec = codec_of(settings.ordered)  # (before Spark: a bad codec is one line)
    if reseal and sealer is None:
        raise Usage(
            f"--reseal moves sealed values to the current audit key, but none is set: "
            f"set {VARS['audit_key'].env} (or {VARS['audit_key_file'].env}) to the new key "
            f"and list the old one in {VARS['audit_decrypt_keys'].env}"
        )
    # Read on every topic it will compact, before Spark starts: a refusal in
    # the middle of the run would leave the snapshots committed, the audit not
    # (the topics it may not describe it does not see, as if missing).
    # before Spark starts (LegacyWarehouse, CatalogUnavailable: one line, exit 2)
    if not convert:
        refuse_legacy(warehouse)
    if uri_of_rest():  # (one line if it does not answer, not a JVM's start)
        catalog(warehouse)
    changelogs, messages = topics = planned_topics(settings)
    asyncio.run(check_topics(settings, reads=[*changelogs, *messages]))
    if not changelogs and not messages and not reseal:  # (no Spark to start for nothing)
        console.print(NOTHING_TO_COMPACT)
        exit_with(1)
    if metrics_port is not None and not follow:
        raise Usage("--metrics-port serves the follow mode's metrics: add --follow")
    if follow:
        _follow(
            settings,
            warehouse,
            master,
            topics,
            trigger_seconds,
            sealer,
            console,
            metrics_port,
            codec,
        )
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console) as bar:
        units = bar.add_task("starting Spark", total=None)
        tasks = bar.add_task("  Spark tasks", total=None)
        spark = spark_session(master)
        stop = threading.Event()
        watcher = threading.Thread(
            target=watch_tasks,
            args=(spark, lambda d, t: bar.update(tasks, completed=d, total=t or None), stop),
            daemon=True,
        )
        watcher.start()
        started = 0

        def step(label: str, total: int) -> None:
            nonlocal started
            bar.update(units, description=label, total=total, completed=started)
            started += 1

        summaries: list[Any] = []  # the audit run's (rows, copies, conflicts)
        try:
            if convert:
                from seqkeeper.spark_sink.convert import convert_warehouse

                bar.update(units, description="converting the warehouse")
                converted = convert_warehouse(spark, warehouse)
                console.print(
                    f"converted {warehouse}: "
                    + (", ".join(f"{k} {v} rows" for k, v in converted.items()) or "nothing to do"),
                    markup=False,
                    soft_wrap=True,
                )
            retained: list[Any] = []  # what retention deleted
            done = run_compact(
                spark,
                settings,
                warehouse,
                step,
                sealer,
                topics,
                summaries.append,
                retained=retained.append,
                codec=codec,
            )
            bar.update(units, description="committed", completed=started)
            bar.update(tasks, visible=False)
        except (LostCommit, LegacyWarehouse):  # (one line, exit 1 or 2: errors.py)
            bar.stop()  # before the line, which the bar would otherwise draw over
            raise
        finally:
            stop.set()
            watcher.join()
            spark.stop()
        if reseal:
            from seqkeeper.spark_sink.reseal import reseal_warehouse

            files = bar.add_task("resealing files", total=None)
            report = reseal_warehouse(
                warehouse, sealer, lambda d, t: bar.update(files, completed=d, total=t)
            )
    if not done:
        console.print(NOTHING_TO_COMPACT)
        if not reseal:
            exit_with(1)
    else:
        # soft_wrap: each line whole (Rich wraps at 80 columns off a
        # terminal, which split the lines scripts and logs look for)
        console.print(
            f"committed under {warehouse}: " + ", ".join(f"{k} run {v}" for k, v in done.items()),
            markup=False,
            soft_wrap=True,
        )
        for summary in [*summaries, *retained]:
            console.print(summary.text(), markup=False, highlight=False, soft_wrap=True)
    if purge_days is not None:
        from seqkeeper.spark_sink.audit import purge_audit

        gone = purge_audit(warehouse, purge_days)
        console.print(
            f"retention: {gone} audit day partitions older than {purge_days} days deleted",
            soft_wrap=True,
        )
    if reseal:
        text, code = reseal_summary(report, sealer)
        console.print(text, markup=False, highlight=False, soft_wrap=True)
        exit_with(code)


NOTHING_TO_COMPACT = "no seqkeeper topics on this broker: nothing to compact"


def _follow(
    settings: Settings,
    warehouse: Path,
    master: str,
    topics: tuple[list[str], list[str]],
    trigger_seconds: float,
    sealer: Any,
    console: Any,
    metrics_port: int | None,
    codec: Any = None,
) -> None:
    """``compact --follow``: micro-batches until Ctrl-C or SIGTERM, which
    stop it after the batch under way (a kill mid-batch commits nothing of
    that batch; the restart redoes it from the tables' offsets). Topics
    that appear later (a worker started after it, a new reply topic) are
    followed from their first record once it may read them."""
    import asyncio
    import threading

    from seqkeeper.access import check_topics
    from seqkeeper.permissions import PermissionDenied
    from seqkeeper.spark_sink.follow import FollowMetrics, follow
    from seqkeeper.spark_sink.job import planned_topics, spark_session

    metrics = FollowMetrics()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        host = settings.runtime.web_host
        try:  # before Spark starts: a bad address is one line, not a JVM's start and stop
            server, _ = start_http_server(metrics_port, addr=host, registry=metrics.registry)
        except OSError as e:
            raise Usage(
                f"{VARS['web_host'].env}={host} --metrics-port {metrics_port}: cannot "
                f"listen there ({e.strerror}); give an address of this machine (127.0.0.1: "
                "this machine only; 0.0.0.0: every interface) and a free port (0 picks one)"
            ) from None
        console.print(
            f"metrics at http://{host}:{server.server_port}/metrics", markup=False, soft_wrap=True
        )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    spark = spark_session(master)
    changelogs, messages = topics
    metrics.topics.set(len(changelogs) + len(messages))
    console.print(
        f"following {len(changelogs) + len(messages)} topics into {warehouse} "
        f"every {trigger_seconds:g} s (Ctrl-C stops after the current batch)",
        markup=False,
        soft_wrap=True,
    )
    following = {*changelogs, *messages}
    refused: set[str] = set()

    def plan() -> tuple[list[str], list[str]]:
        # (a new topic it may not read is left out, named once, and asked
        # again each time: a grant made later is picked up)
        now_changelogs, now_messages = planned_topics(settings)
        for topic in [*now_changelogs, *now_messages]:
            if topic in following:
                continue
            try:
                asyncio.run(check_topics(settings, reads=[topic]))
            except PermissionDenied as e:
                if topic not in refused:
                    console.print(f"not following {topic}: {e}", markup=False, soft_wrap=True)
                refused.add(topic)
        return (
            [t for t in now_changelogs if t not in refused or t in following],
            [t for t in now_messages if t not in refused or t in following],
        )

    def on_topics(new: list[str]) -> None:
        following.update(new)
        refused.difference_update(new)
        metrics.topics.set(len(following))
        if new:
            console.print(f"following new topics: {', '.join(new)}", markup=False, soft_wrap=True)

    def report(batch: Any) -> None:
        metrics.observe(batch)
        console.print(batch.text(), markup=False, highlight=False, soft_wrap=True)

    try:  # (a LegacyWarehouse: one line, exit 2)
        follow(
            spark,
            settings,
            warehouse,
            topics,
            trigger_seconds,
            stop,
            report,
            sealer,
            plan=plan,
            on_topics=on_topics,
            codec=codec,
        )
    finally:
        spark.stop()
    console.print("follow stopped", markup=False)


def reseal_summary(report: Any, sealer: Any) -> tuple[str, int]:
    """What ``compact --reseal`` prints and its exit code: 0 once nothing is
    left under another key (the old keys can go), else 1."""
    head = (
        f"reseal: {report.resealed} values moved to key {sealer.key_id} "
        f"({report.rewritten} of {report.files} files rewritten), "
        f"{report.rewrapped} stream keys rewrapped; "
    )
    if not report.left:
        return head + "0 values left under other keys: the decrypt-only keys can be dropped", 0
    by_key = ", ".join(f"{key}: {n}" for key, n in sorted(report.left.items()))
    return (
        head
        + f"{report.left_total} values could not be opened with the keys given "
        + f"(by key id: {by_key}): list the keys that sealed them in "
        + f"{VARS['audit_decrypt_keys'].env} and run again; drop no key before. "
        + f"First error: {report.first_error}",
        1,
    )


def replay(
    topic: Annotated[
        str,
        typer.Option(
            help="The topic to publish to (created when missing, with SEQKEEPER_PARTITIONS partitions)."
        ),
    ],
    broker: ClusterOpt = None,
    warehouse: Annotated[Path, typer.Option(help="Where compact wrote.")] = Path("warehouse"),
    category: Annotated[Optional[str], typer.Option(help="Only this category.")] = None,
    stream: Annotated[Optional[str], typer.Option(help="Only this stream.")] = None,
    message_type: Annotated[
        Optional[str], typer.Option("--type", help="Only this message type.")
    ] = None,
    since: Annotated[Optional[datetime], typer.Option(help="From this time (UTC).")] = None,
    until: Annotated[Optional[datetime], typer.Option(help="Before this time (UTC).")] = None,
    from_position: Annotated[Optional[int], typer.Option(help="Stream position from.")] = None,
    to_position: Annotated[Optional[int], typer.Option(help="Stream position to.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Count only; publish nothing.")] = False,
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[*]",
) -> None:
    """Publish audited messages again, in their original per-key order and
    bytes (messageIds preserved, so consumers deduplicate)."""
    import asyncio

    from rich.progress import Progress

    from seqkeeper.access import check_topics
    from seqkeeper.spark_sink.job import spark_session
    from seqkeeper.spark_sink.replay import Selection
    from seqkeeper.spark_sink.replay import replay as run

    selection = Selection(category, stream, message_type, since, until, from_position, to_position)
    # (a dry run reads the warehouse only: no broker needed)
    settings = settings_of(bootstrap=broker, needs_broker=not dry_run, connects=not dry_run)
    sealer = audit_sealer()
    if not dry_run:
        # Before Spark starts, so that nothing is sent to a topic it may not
        # write: Write on the topic, which is created here when missing (Create
        # checked first): a cluster that does not create topics on first use
        # would otherwise hold every send until it timed out.
        created = {topic: settings.broker.partitions}
        asyncio.run(check_topics(settings, writes=[topic], create=created))
    spark = spark_session(master)
    try:
        with Progress() as bar:
            task = bar.add_task("dry run" if dry_run else f"replaying to {topic}", total=None)
            n = run(
                spark,
                warehouse,
                selection,
                settings.broker.bootstrap,
                topic,
                dry_run,
                lambda total, done: bar.update(task, total=total, completed=done),
                sealer,
            )
    except ValueError as e:  # no audit log under the warehouse; a missing audit key
        raise Usage(str(e)) from None
    finally:
        spark.stop()
    typer.echo(f"{n} messages {'selected' if dry_run else 'published to ' + topic}")
