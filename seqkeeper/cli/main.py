"""The ``seqkeeper`` command line: the app and its commands."""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import click
import typer

from seqkeeper.broker import EmbeddedBroker
from seqkeeper.security import ClientSecurity, installed, watching
from seqkeeper.settings import VARS, SettingError, Settings

F = TypeVar("F", bound=Callable[..., Any])


class Commands(typer.Typer):
    """``typer.Typer`` whose every command fails in one line: an error the
    user can fix is mapped once, for all of them (:func:`in_one_line`)."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        register = super().command(*args, **kwargs)

        def decorator(f: F) -> F:
            register(in_one_line(f))
            return f

        return decorator


def in_one_line(command: F) -> F:
    """``command``, whose failures of :func:`seqkeeper.failures.one_line`
    (a setting, a credential, a certificate, an ACL, a topic) print
    ``error: <one line>`` and exit with its code, with no traceback; a
    security failure aiokafka only logged is named too."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        from seqkeeper.failures import one_line

        global _command_settings
        _command_settings = None
        with watching(quiet=False) as causes:
            try:
                return command(*args, **kwargs)
            except (click.exceptions.Exit, click.ClickException, click.Abort):
                raise  # typer's own: an exit code, a usage error
            except Exception as exc:
                said = one_line(exc, _command_settings or _environment(), causes.cause)
                if said is None:
                    raise
                line, code = said
                typer.echo(f"error: {line}", err=True)
                raise typer.Exit(code) from None

    return run  # type: ignore[return-value]


def _environment() -> Settings | None:
    """The environment's settings, for a failure before a command read them."""
    try:
        return Settings.of()
    except SettingError:
        return None


app = Commands(
    help="seqkeeper: ordered, deduplicated, trustworthy Kafka topics.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def flag(name: str, *decls: str, **kw: Any) -> Any:
    """The option of the declared variable ``name`` (seqkeeper.settings):
    its help, environment variable and default come from the declaration."""
    return typer.Option(*decls, help=VARS[name].flag_help(), **kw)


BrokerOpt = Annotated[Optional[str], flag("bootstrap", "--broker", "-b")]
# the commands that use a running cluster (they start no broker): the same
# variable, and no default
ClusterOpt = Annotated[
    Optional[str],
    typer.Option(
        "--broker",
        "-b",
        help=f"Kafka bootstrap servers, host:port[,host:port] \\[env {VARS['bootstrap'].env}; "
        "required].",
    ),
]
AppIdOpt = Annotated[Optional[str], flag("app_id")]
InputTopicOpt = Annotated[Optional[str], flag("input_topic")]
OrderedTopicOpt = Annotated[Optional[str], flag("ordered_topic")]
DedupedTopicOpt = Annotated[Optional[str], flag("deduped_topic")]
DlqTopicOpt = Annotated[Optional[str], flag("dlq_topic")]
# where messages keep their key, sequence and messageId (the worker's and verify's)
KeyFieldOpt = Annotated[Optional[str], flag("key_field")]
SeqFieldOpt = Annotated[Optional[str], flag("seq_field")]
SeqHeaderOpt = Annotated[Optional[str], flag("seq_header")]
MessageIdFieldOpt = Annotated[Optional[str], flag("message_id_field")]
MessageIdHeaderOpt = Annotated[Optional[str], flag("message_id_header")]
CodecOpt = Annotated[Optional[str], flag("codec")]
# how the readers outside the worker read topics (compact, inspect, verify)
IsolationOpt = Annotated[Optional[str], flag("isolation")]


#: The settings of the command running (:func:`settings_of`): whom and
#: where :func:`in_one_line` names in a failure's line.
_command_settings: Settings | None = None


def settings_of(
    *, connects: bool = False, needs_broker: bool = False, **overrides: Any
) -> Settings:
    """The environment's settings with the given flags (every command's
    broker and security settings are the worker's: ``KAFKA_BOOTSTRAP_SERVERS``
    and the ``SEQKEEPER_SECURITY_*`` variables, a flag given instead); a bad
    value, in the environment or in a flag, is one line and exit 2, not a
    traceback (:class:`Commands`). ``connects``: the command connects to the
    broker they name, first through :func:`check_connection`;
    ``needs_broker``: it starts none, so one must be named."""
    global _command_settings
    settings = Settings.of(**overrides)
    # how the command's clients connect (seqkeeper.security): a password
    # file or a TLS file that cannot be read is one line too
    ClientSecurity.of(settings.security).ssl_context()
    _command_settings = settings
    if needs_broker and not settings.broker.bootstrap:
        raise SettingError(
            f"no broker: give --broker or set {VARS['bootstrap'].env} (the workers' cluster)"
        )
    if connects:
        check_connection(settings)
    return settings


def check_connection(settings: Settings) -> None:
    """A failed authentication or an untrusted certificate at the broker
    of ``settings`` ends the command here: one line, exit 1.

    Why a connection of its own, before the command's: aiokafka logs the
    cause of a failed connection (``Unable connect to ...``) and raises only
    "Unable to bootstrap". Quieting its loggers for the whole command would
    hide what it says in normal running (a broker lost during a 15-minute
    demo); dropping only the security records for the whole command loses
    the cause whenever a command catches the exception itself (bench's
    sections and chaos's scenarios each report theirs and go on, failing
    one by one). So the first connection is this one, made as the worker's
    first attempt is (:func:`seqkeeper.wait.first_connection`: aiokafka's
    lines of it are kept from the output); a security failure is our one
    line, before Spark or any worker starts. Once it succeeded, aiokafka
    speaks as usual: a security failure later (a password changed mid-run)
    is news, printed by aiokafka and named again by :func:`in_one_line`.

    Any other failure is left to the command (it waits for the broker or
    reports it its own way). No broker (the command starts its own) or
    PLAINTEXT (nothing to fail): no check, and no extra connection."""
    import asyncio

    from seqkeeper.wait import first_connection

    bootstrap = settings.broker.bootstrap
    security = ClientSecurity.of(settings.security)
    if not bootstrap or security.protocol == "PLAINTEXT":
        return
    with installed(security):  # the environment's, unless a caller's settings differ
        asyncio.run(first_connection(bootstrap))  # (a SecurityFailure: one line, exit 1)


@app.command()
def broker(
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 0,
    kafka_home: Annotated[Optional[Path], flag("kafka_home")] = None,
    host: Annotated[
        str,
        typer.Option(
            help="Interface to listen on: 127.0.0.1, this machine only; 0.0.0.0, every "
            "interface. The listener is PLAINTEXT without authentication: whoever reaches "
            "it reads and writes every topic."
        ),
    ] = "127.0.0.1",
    advertised_host: Annotated[
        Optional[str],
        typer.Option(
            help="Host the broker tells clients to connect to "
            "(default: --host; for 0.0.0.0, this machine's name)."
        ),
    ] = None,
) -> None:
    """Run a broker in the foreground: the embedded one (Tansu, memory only),
    or a fresh single-node Apache Kafka from KAFKA_HOME."""
    from seqkeeper.broker import (
        BrokerError,
        KafkaBroker,
        LocalBroker,
        kafka_home_from_env,
        listen_here,
    )

    try:
        listen_here(host, port)
    except OSError as e:
        typer.echo(
            f"error: --host {host} --port {port}: cannot listen there ({e.strerror}); "
            "give an address of this machine (127.0.0.1, or 0.0.0.0 for every interface) "
            "and a free port (0 picks one)",
            err=True,
        )
        raise typer.Exit(2) from None
    home = kafka_home or kafka_home_from_env()
    local: LocalBroker = (
        KafkaBroker(home, port=port or None, host=host, advertised=advertised_host)
        if home
        else EmbeddedBroker(port=port or None, host=host, advertised=advertised_host)
    )
    try:
        if home:
            typer.echo(f"starting Apache Kafka from {home} ...")
        with local as b:
            typer.echo(f"{b.kind} ready: KAFKA_BOOTSTRAP_SERVERS={b.bootstrap}")
            typer.echo(
                "Ctrl-C stops it (its data is "
                + (
                    "in a temporary directory and is deleted)."
                    if home
                    else "in memory and is lost)."
                )
            )
            while True:
                time.sleep(0.5)
    except BrokerError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (see _graceful_sigterm): the with-block
        pass  # has stopped the broker


@app.command(name="settings")
def show_settings(
    markdown: Annotated[
        bool, typer.Option(help="Print the README's configuration table instead.")
    ] = False,
) -> None:
    """Every setting: its variable, the value in effect and where it comes
    from (the environment or the default), a table per group."""
    from rich.console import Console
    from rich.table import Table

    from seqkeeper.settings import GROUPS, effective, markdown_table

    if markdown:
        typer.echo(markdown_table(), nl=False)
        return
    settings_of()  # a bad value is one clear line
    console = Console()
    rows = list(effective())
    for group, cls in GROUPS.items():
        table = Table(title=f"{group}: {(cls.__doc__ or '').strip()}", title_justify="left")
        for column in ("variable", "value", "from"):
            table.add_column(column)
        for v, text, source in rows:
            if v.group == group:
                table.add_row(v.env, v.with_unit(text) or "(empty)", source)
        console.print(table)


@app.command()
def worker(
    broker: BrokerOpt = None,
    data_dir: Annotated[Optional[Path], flag("data_dir")] = None,
    web_port: Annotated[Optional[int], flag("web_port")] = None,
    app_id: AppIdOpt = None,
    partitions: Annotated[Optional[int], flag("partitions", min=1)] = None,
    input_topic: InputTopicOpt = None,
    ordered_topic: OrderedTopicOpt = None,
    deduped_topic: DedupedTopicOpt = None,
    dlq_topic: DlqTopicOpt = None,
    session_timeout: Annotated[Optional[float], flag("session_timeout", min=0)] = None,
    log_level: Annotated[Optional[str], flag("log_level")] = None,
    topology: Annotated[Optional[str], flag("topology")] = None,
    handlers: Annotated[Optional[str], flag("handlers")] = None,
    processor: Annotated[Optional[str], flag("processor")] = None,
    processed_topic: Annotated[Optional[str], flag("processed_topic")] = None,
    key_field: KeyFieldOpt = None,
    seq_field: SeqFieldOpt = None,
    seq_header: SeqHeaderOpt = None,
    message_id_field: MessageIdFieldOpt = None,
    message_id_header: MessageIdHeaderOpt = None,
    codec: CodecOpt = None,
    handler_timeout: Annotated[Optional[float], flag("handler_timeout", min=0)] = None,
    broker_wait: Annotated[Optional[float], flag("broker_wait", min=0)] = None,
) -> None:
    """Run the long-running worker (Ctrl-C or SIGTERM stops it gracefully)."""
    from seqkeeper.worker import run_worker

    settings = settings_of(
        bootstrap=broker,
        data_dir=data_dir,
        web_port=web_port,
        app_id=app_id,
        partitions=partitions,
        input_topic=input_topic,
        ordered_topic=ordered_topic,
        deduped_topic=deduped_topic,
        dlq_topic=dlq_topic,
        log_level=log_level,
        session_timeout=session_timeout,
        topology=topology,
        handlers=handlers,
        processor=processor,
        processed_topic=processed_topic,
        key_field=key_field,
        seq_field=seq_field,
        seq_header=seq_header,
        message_id_field=message_id_field,
        message_id_header=message_id_header,
        codec=codec,
        handler_timeout=handler_timeout,
        broker_wait=broker_wait,
    )
    run_worker(settings)  # (the user's code or the token: one line, exit 2: Commands)


@app.command()
def acls(
    broker: BrokerOpt = None,
    app_id: AppIdOpt = None,
    topology: Annotated[Optional[str], flag("topology")] = None,
    role: Annotated[
        str,
        typer.Option(
            help="Whose ACLs: worker (of --topology), command-worker, reader (verify, "
            "inspect), compactor (compact), replayer (replay --topic), client (send, "
            "seqkeeper.client)."
        ),
    ] = "worker",
    principal: Annotated[
        Optional[str],
        typer.Option(
            help="The user to grant (default: the one the broker authorizes with these "
            "settings: SEQKEEPER_SASL_USERNAME, or the client certificate's subject mapped "
            "by SEQKEEPER_SSL_PRINCIPAL_MAPPING_RULES)."
        ),
    ] = None,
    reply_topic: Annotated[
        Optional[list[str]],
        typer.Option(
            help="A replyTo topic the command worker writes, or the client's reply topic "
            "(repeat for each)."
        ),
    ] = None,
    topic: Annotated[
        Optional[str], typer.Option(help="The replayer's topic (replay --topic).")
    ] = None,
    create: Annotated[
        bool,
        typer.Option(help="--no-create: the topics are created by an admin (listed first)."),
    ] = True,
) -> None:
    """Print the kafka-acls.sh commands that grant a worker (or another
    --role) with these settings what it needs, and nothing more."""
    from seqkeeper.permissions import (
        ROLES,
        internal_topics,
        is_anonymous,
        principal_of,
        role_grants,
    )
    from seqkeeper.principal import anonymous_reason

    if role not in ROLES:
        raise typer.BadParameter(f"expected one of {', '.join(ROLES)}", param_hint="--role")
    if role == "replayer" and not topic:
        raise typer.BadParameter("the replayer role needs --topic", param_hint="--topic")
    settings = settings_of(bootstrap=broker, app_id=app_id, topology=topology)
    if principal:
        user = principal
    elif is_anonymous(settings):
        protocol = settings.security.security_protocol
        typer.echo(
            f"error: no user to grant: {anonymous_reason(protocol)}; or give --principal", err=True
        )
        raise typer.Exit(2)
    else:
        try:
            user = principal_of(settings)
        except SettingError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
    bootstrap = settings.broker.bootstrap or "BOOTSTRAP"
    if role in ("worker", "command-worker"):
        worker = settings.with_overrides(topology="commands") if role != "worker" else settings
        if not create:
            typer.echo("# create these topics as an admin first (the changelog compacted):")
            for name in [*worker.topics(), *internal_topics(worker)]:
                typer.echo(f"#   {name}")
    grants = role_grants(
        settings, role, create=create, reply_topics=reply_topic or (), topic=topic or ""
    )
    for grant in grants:
        typer.echo(grant.command(user, bootstrap))


@app.command()
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
    sealer = _sealer()
    if reseal and sealer is None:
        typer.echo(
            f"error: --reseal moves sealed values to the current audit key, but none is set: "
            f"set {VARS['audit_key'].env} (or {VARS['audit_key_file'].env}) to the new key "
            f"and list the old one in {VARS['audit_decrypt_keys'].env}",
            err=True,
        )
        raise typer.Exit(2)
    # Read on every topic it will compact, before Spark starts: a refusal in
    # the middle of the run would leave the snapshots committed, the audit not
    # (the topics it may not describe it does not see, as if missing).
    try:  # before Spark starts
        if not convert:
            refuse_legacy(warehouse)
        if uri_of_rest():  # (one line if it does not answer, not a JVM's start)
            catalog(warehouse)
    except LegacyWarehouse as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    changelogs, messages = topics = planned_topics(settings)
    asyncio.run(check_topics(settings, reads=[*changelogs, *messages]))
    if not changelogs and not messages and not reseal:  # (no Spark to start for nothing)
        console.print(NOTHING_TO_COMPACT)
        raise typer.Exit(1)
    if metrics_port is not None and not follow:
        typer.echo("error: --metrics-port serves the follow mode's metrics: add --follow", err=True)
        raise typer.Exit(2)
    if follow:
        _follow(settings, warehouse, master, topics, trigger_seconds, sealer, console, metrics_port)
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
            )
            bar.update(units, description="committed", completed=started)
            bar.update(tasks, visible=False)
        except (LostCommit, LegacyWarehouse) as e:
            bar.stop()
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1 if isinstance(e, LostCommit) else 2) from None
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
            raise typer.Exit(1)
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
        raise typer.Exit(code)


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
    from seqkeeper.spark_sink.tables import LegacyWarehouse

    metrics = FollowMetrics()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        host = settings.runtime.web_host
        try:  # before Spark starts: a bad address is one line, not a JVM's start and stop
            server, _ = start_http_server(metrics_port, addr=host, registry=metrics.registry)
        except OSError as e:
            typer.echo(
                f"error: {VARS['web_host'].env}={host} --metrics-port {metrics_port}: cannot "
                f"listen there ({e.strerror}); give an address of this machine (127.0.0.1: "
                "this machine only; 0.0.0.0: every interface) and a free port (0 picks one)",
                err=True,
            )
            raise typer.Exit(2) from None
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

    try:
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
        )
    except LegacyWarehouse as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
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


@app.command()
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
    sealer = _sealer()
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
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    finally:
        spark.stop()
    typer.echo(f"{n} messages {'selected' if dry_run else 'published to ' + topic}")


@app.command()
def verify(
    broker: ClusterOpt = None,
    input_topic: InputTopicOpt = None,
    ordered_topic: OrderedTopicOpt = None,
    deduped_topic: DedupedTopicOpt = None,
    dlq_topic: DlqTopicOpt = None,
    late_topic: Annotated[Optional[str], flag("late_topic")] = None,
    drained: Annotated[
        bool, typer.Option(help="Every gap must have been given up by now (input finished).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    isolation: IsolationOpt = None,
    exactly_once: Annotated[
        bool,
        typer.Option(
            "--exactly-once",
            help="Also fail (exit 1) when any output was emitted more than once, even "
            "byte-identically (re-emissions, counted per output). It does not change "
            "how the topics are read (--isolation; read_uncommitted also sees the writes "
            "of aborted transactions).",
        ),
    ] = False,
    key_field: KeyFieldOpt = None,
    seq_field: SeqFieldOpt = None,
    seq_header: SeqHeaderOpt = None,
    message_id_field: MessageIdFieldOpt = None,
    message_id_header: MessageIdHeaderOpt = None,
    codec: CodecOpt = None,
) -> None:
    """Check output topics against their input: lost messages, repeats (must
    be byte-identical), per-key order, gaps without a GapSkipped marker,
    dead letters without a reason. Exit 1 on any failure. Messages are read
    as the worker reads them: give it the worker's key, sequence, messageId
    and codec settings (environment or flags)."""
    import asyncio
    import dataclasses

    import orjson
    from rich.console import Console

    from seqkeeper.access import check_topics
    from seqkeeper.demo import message_shape, no_reemissions, summary, verify_topics
    from seqkeeper.plugins import PluginError

    settings = settings_of(
        needs_broker=True,
        connects=True,
        bootstrap=broker,
        input_topic=input_topic,
        ordered_topic=ordered_topic,
        deduped_topic=deduped_topic,
        dlq_topic=dlq_topic,
        late_topic=late_topic,
        key_field=key_field,
        seq_field=seq_field,
        seq_header=seq_header,
        message_id_field=message_id_field,
        message_id_header=message_id_header,
        codec=codec,
        isolation=isolation,
    )
    read = settings.broker.isolation
    try:
        shape = message_shape(settings)
    except (PluginError, ValueError) as e:  # a codec or a dotted path: one line
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    started = time.monotonic()
    o = settings.ordered
    # Read on each topic, before the first is read (the late topic may be
    # missing: the default policy never creates it)
    topics = [o.input_topic, o.ordered_topic, o.deduped_topic, o.dlq_topic, o.late_topic]
    asyncio.run(check_topics(settings, reads=topics, optional={o.late_topic}))
    report = asyncio.run(verify_topics(settings, drained, isolation=read, shape=shape))
    if exactly_once:
        no_reemissions(report)
    if as_json:
        doc = dataclasses.asdict(report)
        doc["ok"] = report.ok
        doc["isolation"] = read
        typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    else:
        title = f"seqkeeper verify ({read}{', exactly-once' if exactly_once else ''})"
        Console().print(summary(report, time.monotonic() - started, title))
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def chaos(
    broker: BrokerOpt = None,
    scenario: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Run only these (repeatable): kill, kill-static, freeze, failover, corpus, "
            "local-state, commands, zombie. On a broker with transactions kill, kill-static, "
            "freeze and failover run "
            "under at_least_once and again under exactly_once (verified read_committed, "
            "no re-emission allowed); zombie needs one."
        ),
    ] = None,
    short: Annotated[
        bool, typer.Option(help="The seconds-long version (as the tests run).")
    ] = False,
    report: Annotated[
        Optional[Path],
        typer.Option(
            help="Write the report as Markdown here, a column per broker: this run's "
            "outcomes replace its broker's in the JSON beside it (same name, .json), "
            "the other brokers' are kept."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed of workloads and fault times.")] = 1,
    workdir: Annotated[
        Optional[Path], typer.Option(help="Worker data and logs (default: a temporary dir).")
    ] = None,
) -> None:
    """Inject faults (kill -9, broker freeze, failover, bad input, lost or
    corrupted local state, a frozen worker that must be fenced) into real
    workers and verify nothing is lost and per-key order holds, under each
    processing guarantee the broker has. Exit 1 if any scenario fails."""
    import tempfile

    from rich.console import Console

    from seqkeeper.verification.chaos import (
        LONG,
        SCENARIOS,
        SHORT,
        BrokerRun,
        Chaos,
        broker_label,
        machine,
        now_utc,
        table,
        write_report,
    )
    from seqkeeper.worker import broker_for

    names = scenario or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        typer.echo(f"error: unknown scenario {', '.join(unknown)}; one of {', '.join(SCENARIOS)}")
        raise typer.Exit(2)
    console = Console()
    scale = SHORT if short else LONG
    settings = settings_of(bootstrap=broker, connects=True)
    with (
        broker_for(settings) as settings,
        tempfile.TemporaryDirectory(prefix="seqkeeper-chaos-") as tmp,
    ):
        from seqkeeper.worker import current_local

        local = current_local()  # None when a broker was given
        runner = Chaos(
            settings, workdir or Path(tmp), scale, local=local, seed=seed, console=console
        )
        outcomes = runner.run(
            names,
            lambda o: console.print(f"{o.scenario} ({o.guarantee}): {'PASS' if o.ok else 'FAIL'}"),
        )
    console.print(table(outcomes, runner.transactions))
    for o in outcomes:
        for note in o.notes:
            console.print(f"  {o.scenario} ({o.guarantee}): {note}")
    if runner.probe_error:
        console.print(f"error: {runner.probe_error}")
    if report is not None:
        kind = None if local is None else local.kind
        command = " ".join(
            ["seqkeeper chaos", *(["--short"] if short else [])]
            + [f"--scenario {n}" for n in (scenario or [])]
            + ([f"--seed {seed}"] if seed != 1 else [])
        )
        run = BrokerRun(
            broker=broker_label(kind, settings.broker.bootstrap),
            generated=now_utc(),
            machine=machine(),
            scale=scale,
            command=command,
            outcomes=outcomes,
            kind=kind or "an external cluster",
            transactions=runner.transactions,
        )
        data = write_report(report, run, say=lambda text: console.print(f"warning: {text}"))
        console.print(f"report written to {report} (column {run.broker!r}; runs in {data})")
    # this run's outcomes only: another broker's failure in the report is not this run's
    raise typer.Exit(0 if all(o.ok for o in outcomes) and not runner.probe_error else 1)


@app.command()
def bench(
    broker: BrokerOpt = None,
    smoke: Annotated[bool, typer.Option(help="Tiny sizes: checks the harness works.")] = False,
    only: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Only these (repeatable): throughput, latency (with the throughput rounds: "
            "it is measured at half their rate), quix, guarantee, depth, restart, failover, "
            "spark, soak."
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Where JSON and PNG results go.")] = Path(
        "bench/results"
    ),
    messages: Annotated[Optional[int], typer.Option(help="Workload size.")] = None,
    state_keys: Annotated[
        Optional[int], typer.Option(help="Keys of state for the restart and memory figures.")
    ] = None,
    workdir: Annotated[
        Optional[Path],
        typer.Option(help="Keep worker data and logs here (default: a temporary directory)."),
    ] = None,
) -> None:
    """Benchmark seqkeeper against plain aiokafka (the limit), a typical
    Faust agent (the peer) and Quix Streams on one broker with the same
    input; restart time, memory, latency, buffer depth, Spark. One table of
    ratios and figures."""
    import dataclasses
    import tempfile

    from rich.console import Console
    from rich.table import Table

    from seqkeeper.bench.harness import FULL, SMOKE, Bench, run, sections, write
    from seqkeeper.worker import broker_for

    try:  # (before a broker starts)
        sections(set(only) if only else None)
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    console = Console()
    sizes = SMOKE if smoke else FULL
    if messages:
        sizes = dataclasses.replace(sizes, messages=messages)
    if state_keys:
        sizes = dataclasses.replace(sizes, state_keys=state_keys)
    settings = settings_of(bootstrap=broker, connects=True)
    if workdir:
        workdir.mkdir(parents=True, exist_ok=True)
    with (
        broker_for(settings) as settings,
        tempfile.TemporaryDirectory(prefix="seqkeeper-bench-") as tmp,
    ):
        from seqkeeper.worker import current_local

        local = current_local()  # None when a broker was given
        runner = Bench(
            settings.broker.bootstrap, sizes, workdir or Path(tmp), lambda s: console.log(s)
        )
        result = run(runner, set(only) if only else None)
        result["broker"] = (
            f"{settings.broker.bootstrap} ({'external' if local is None else local.kind})"
        )
    paths = write(result, out)
    m = result["machine"]
    table = Table(
        title=f"seqkeeper bench on {result['broker']}",
        caption=f"{m['cpu']}, {m['cpus']} CPUs, {m['memory_mb']:,} MB, Python {m['python']}",
    )
    for col in ("figure", "value", "target", "met"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for f in result["ratios"] + result["figures"]:
        met = "" if f["met"] is None else ("[green]yes[/]" if f["met"] else "[red]no[/]")
        table.add_row(f["name"], f"{f['value']:,.2f} {f['unit']}", f["target"], met)
    console.print(table)
    console.print("written: " + ", ".join(str(p) for p in paths))
    if result["failed"]:
        console.print(f"[red]failed sections: {', '.join(result['failed'])}[/]")
        raise typer.Exit(1)


@app.command()
def keygen() -> None:
    """Print a new audit encryption key (for SEQKEEPER_AUDIT_KEY)."""
    from seqkeeper.spark_sink.crypto import new_key

    typer.echo(new_key())


store_app = Commands(
    help="Read the audit log like message-db: streams, categories, versions; forget a "
    "stream's sensitive data; expire older snapshots.",
    no_args_is_help=True,
)
app.add_typer(store_app, name="store")
WarehouseOpt = Annotated[Path, typer.Option(help="Where compact wrote.")]
AsOfOpt = Annotated[
    Optional[str],
    typer.Option(help="Read the store as it was: a run number (as compact printed) or a UTC time."),
]


def _store(warehouse: Path, as_of: str | None = None) -> Any:
    from seqkeeper.spark_sink.store import MessageStore
    from seqkeeper.spark_sink.tables import LegacyWarehouse

    try:
        return MessageStore(warehouse, _sealer(), as_of)
    except FileNotFoundError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    except (ValueError, LegacyWarehouse) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def _read(call: Any) -> Any:
    """``call()``, with a wrong argument or a missing key as a clear error."""
    try:
        return call()
    except ValueError as e:  # includes AuditKeyError
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def _print(messages: list[Any]) -> None:
    import orjson

    for m in messages:
        typer.echo(orjson.dumps(m.to_json()).decode())


@store_app.command("stream")
def store_stream(
    name: Annotated[str, typer.Argument(help="Stream name, <category>-<id>.")],
    position: Annotated[int, typer.Option(help="From this stream position.")] = 0,
    batch_size: Annotated[int, typer.Option(help="At most this many.")] = 1000,
    warehouse: WarehouseOpt = Path("warehouse"),
    as_of: AsOfOpt = None,
) -> None:
    """A stream's messages from a position (get_stream_messages), JSON lines."""
    store = _store(warehouse, as_of)
    _print(_read(lambda: store.stream(name, position, batch_size)))


@store_app.command("category")
def store_category(
    name: Annotated[str, typer.Argument(help="Category (a topic name, '-' as '_').")],
    position: Annotated[int, typer.Option(help="From this global position.")] = 1,
    batch_size: Annotated[int, typer.Option(help="At most this many.")] = 1000,
    correlation: Annotated[
        Optional[str], typer.Option(help="Category of metadata.correlationStreamName.")
    ] = None,
    correlation_id: Annotated[Optional[str], typer.Option(help="metadata.correlationId.")] = None,
    member: Annotated[Optional[int], typer.Option(help="Consumer group member.")] = None,
    size: Annotated[Optional[int], typer.Option(help="Consumer group size.")] = None,
    warehouse: WarehouseOpt = Path("warehouse"),
    as_of: AsOfOpt = None,
) -> None:
    """A category's messages from a global position (get_category_messages)."""
    store = _store(warehouse, as_of)
    _print(
        _read(
            lambda: store.category(
                name, position, batch_size, correlation, member, size, correlation_id
            )
        )
    )


@store_app.command("last")
def store_last(
    name: Annotated[str, typer.Argument(help="Stream name.")],
    message_type: Annotated[Optional[str], typer.Option("--type", help="Of this type.")] = None,
    warehouse: WarehouseOpt = Path("warehouse"),
    as_of: AsOfOpt = None,
) -> None:
    """A stream's last message (get_last_stream_message); exit 1 if none."""
    store = _store(warehouse, as_of)
    found = _read(lambda: store.last(name, message_type))
    if found is None:
        raise typer.Exit(1)
    _print([found])


@store_app.command("version")
def store_version(
    name: Annotated[str, typer.Argument(help="Stream name.")],
    warehouse: WarehouseOpt = Path("warehouse"),
    as_of: AsOfOpt = None,
) -> None:
    """A stream's version: its last position (stream_version); exit 1 if none."""
    version = _store(warehouse, as_of).version(name)
    if version is None:
        typer.echo("no such stream", err=True)
        raise typer.Exit(1)
    typer.echo(version)


@store_app.command("forget")
def store_forget(
    name: Annotated[str, typer.Argument(help="Stream name, <category>-<id>.")],
    yes: Annotated[bool, typer.Option("--yes", help="Really destroy the stream's key.")] = False,
    warehouse: WarehouseOpt = Path("warehouse"),
) -> None:
    """Erase a stream's sensitive data: destroy its key, so its sealed fields,
    values and headers can never be opened again (docs/security.md). Other
    streams and all data files are left as they are."""
    from seqkeeper.spark_sink.crypto import ERASED, StreamKeys

    if not yes:
        typer.echo(
            f"error: forget destroys the key of stream {name!r} for good (its sealed fields "
            "can never be read again, by anyone): add --yes",
            err=True,
        )
        raise typer.Exit(2)
    keys = StreamKeys(warehouse)
    if not keys.forget(name):
        typer.echo(
            f"error: no key for stream {name!r} under {warehouse}: nothing to forget (already "
            "forgotten, no sealed row, or another stream name or warehouse)",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(
        f"forgot stream {name}: its key is destroyed; its sealed fields read {ERASED!r} from "
        "now on (a later message of the stream gets a new key). The Kafka topics keep their "
        "records until their own retention"
    )


@store_app.command("expire")
def store_expire(
    keep: Annotated[int, typer.Option(help="Keep the newest this many snapshots.", min=1)] = 1,
    yes: Annotated[bool, typer.Option("--yes", help="Really expire them.")] = False,
    warehouse: WarehouseOpt = Path("warehouse"),
) -> None:
    """Expire the tables' older snapshots and delete the data files only they
    name, so rows deleted by retention (and values moved by a reseal) leave
    the disk; --as-of can then no longer read the expired runs."""
    from seqkeeper.spark_sink.audit import expire_store
    from seqkeeper.spark_sink.tables import LegacyWarehouse

    if not yes:
        typer.echo(
            f"error: expire removes all but the newest {keep} snapshots of each table "
            "(--as-of cannot read them afterwards) and deletes the files only they name: "
            "add --yes",
            err=True,
        )
        raise typer.Exit(2)
    try:
        done = expire_store(warehouse, keep)
    except LegacyWarehouse as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if not done:
        typer.echo(f"error: no tables under {warehouse}: run seqkeeper compact first", err=True)
        raise typer.Exit(1)
    typer.echo(
        "expired: "
        + ", ".join(
            f"{name} {e.snapshots} snapshots, {e.files} files deleted"
            for name, e in sorted(done.items())
        )
    )


@app.command()
def send(
    command_type: Annotated[str, typer.Option("--type", help="The command's commandType.")],
    key: Annotated[str, typer.Option(help="The entity: partitionKey and Kafka key.")],
    payload: Annotated[str, typer.Option(help="The command's payload, as JSON.")] = "{}",
    tenant: Annotated[str, typer.Option(help="The command's tenantId.")] = "default",
    wait: Annotated[
        float,
        typer.Option(min=0, help="Seconds to wait for the reply; 0: send, ask for none."),
    ] = 30.0,
    broker: BrokerOpt = None,
    command_topic: Annotated[Optional[str], flag("command_topic")] = None,
    reply_topic: Annotated[
        str, typer.Option(help="Where the reply is sent (created when missing).")
    ] = "seqkeeper-send.replies",
    schema_version: Annotated[int, typer.Option(min=1, help="The schemaVersion.")] = 1,
    expected_version: Annotated[
        Optional[int], typer.Option(help="Apply only at this entity version.")
    ] = None,
    signing_key: Annotated[
        Optional[Path],
        typer.Option(
            help="Sign the command: a PEM private key (EC, RSA or Ed25519) whose public key "
            "the workers trust (SEQKEEPER_COMMAND_AUTH=jwt); needs --key-id."
        ),
    ] = None,
    key_id: Annotated[
        Optional[str], typer.Option(help="The signing key's kid, as the workers know it.")
    ] = None,
) -> None:
    """Send a command to the command worker and print its reply as JSON:
    exit 0 on a success reply, 1 on a failure reply, 3 when none came in
    time (2: a usage error)."""
    import asyncio
    import json

    from aiokafka.errors import KafkaError

    from seqkeeper.client import CommandClient, ReplyTimeout
    from seqkeeper.state.tokens import BadKey, TokenSigner

    try:
        body = json.loads(payload)
    except ValueError as e:
        raise typer.BadParameter(f"not JSON: {e}", param_hint="--payload") from None
    settings = settings_of(bootstrap=broker, command_topic=command_topic, needs_broker=True)
    signer = None
    if (signing_key is None) != (key_id is None):
        raise typer.BadParameter("give both or neither", param_hint="--signing-key, --key-id")
    if signing_key is not None and key_id is not None:
        try:  # the token names the issuer and audience the workers check
            signer = TokenSigner.from_file(
                signing_key,
                key_id,
                issuer=settings.commands.jwt_issuer,
                audience=settings.commands.jwt_audience,
            )
        except BadKey as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
    check_connection(settings)  # after the key: a key it cannot use is said before any broker
    options: dict[str, Any] = {"tenant": tenant, "schema_version": schema_version}
    if expected_version is not None:
        options["expected_version"] = expected_version

    async def run() -> int:
        client = CommandClient(
            settings.broker.bootstrap,
            command_topic=settings.commands.command_topic,
            client_id="seqkeeper-send",
            reply_topic=reply_topic,
            signer=signer,
        )
        try:
            await asyncio.wait_for(client.start(), 30)
        except (TimeoutError, OSError, KafkaError) as e:
            typer.echo(
                f"error: the broker at {settings.broker.bootstrap} does not answer ({e!r})",
                err=True,
            )
            await client.stop()
            return 1
        try:
            if not wait:
                message_id = await client.send(command_type, key, body, **options)
                typer.echo(json.dumps({"messageId": message_id}))
                return 0
            try:
                reply = await client.request(command_type, key, body, timeout=wait, **options)
            except ReplyTimeout as e:
                typer.echo(f"error: {e}", err=True)
                return 3
            typer.echo(json.dumps(reply.to_json()))
            return 0 if reply.success else 1
        finally:
            await client.stop()

    raise typer.Exit(asyncio.run(run()))


@app.command()
def inspect(
    broker: ClusterOpt = None,
    message_id: Annotated[Optional[str], typer.Option(help="A command's messageId.")] = None,
    correlation_id: Annotated[
        Optional[str], typer.Option(help="Every command of a correlationId.")
    ] = None,
    tenant: Annotated[
        Optional[str], typer.Option(help="Only this tenant's commands (default: every tenant's).")
    ] = None,
    app_id: AppIdOpt = None,
    web_port: Annotated[
        Optional[int],
        typer.Option(
            help="The command worker's web port \\[env SEQKEEPER_WEB_PORT]: a command "
            "named by --message-id and --tenant is asked of the worker first; "
            "0, or no answer: the changelog is read."
        ),
    ] = None,
    web_host: Annotated[
        Optional[str],
        typer.Option(help="The command worker's web host \\[env SEQKEEPER_WEB_HOST]."),
    ] = None,
    isolation: IsolationOpt = None,
) -> None:
    """Look commands up in the Message Store: status, timestamps, error,
    reply, and the entity's state and outbox."""
    import asyncio

    from rich.console import Console

    from seqkeeper.inspect import ask_worker, changelog_topic, load, lookup, worker_url

    if not message_id and not correlation_id:
        raise typer.BadParameter("give --message-id or --correlation-id")
    settings = settings_of(
        needs_broker=True,
        bootstrap=broker,
        app_id=app_id,
        web_port=web_port,
        web_host=web_host,
        isolation=isolation,
    )

    def say(line: str) -> None:
        typer.echo(f"({line}; reading the changelog)", err=True)

    found = None
    if message_id and tenant and not correlation_id:
        found = ask_worker(settings, message_id, tenant, say=say)  # (the token's file: exit 2)
        if found is not None:
            typer.echo(f"(asked the worker at {worker_url(settings)})", err=True)
    if found is None:
        from seqkeeper.access import check_topics

        check_connection(settings)
        # Read on the changelog; missing: no command worker of this app id here (exit 2)
        asyncio.run(check_topics(settings, reads=[changelog_topic(settings)]))
        store = asyncio.run(load(settings))
        found = lookup(store, message_id, correlation_id, tenant)
    if not found:
        typer.echo("no such command in the Message Store", err=True)
        raise typer.Exit(1)
    import orjson

    Console().print_json(orjson.dumps(found).decode())


@app.command()
def demo(
    broker: BrokerOpt = None,
    messages: Annotated[int, typer.Option(help="Valid messages to publish.")] = 100_000,
    keys: Annotated[int, typer.Option(help="Sequence keys.")] = 1_000,
    duplicate_rate: Annotated[
        float, typer.Option(help="Share of messages delivered twice.")
    ] = 0.05,
    malformed: Annotated[int, typer.Option(help="Malformed records mixed in.")] = 24,
    lost: Annotated[int, typer.Option(help="Messages never delivered (permanent gaps).")] = 20,
    seed: Annotated[int, typer.Option(help="Workload random seed.")] = 7,
    partitions: Annotated[Optional[int], typer.Option(help="Topic partitions.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the output.")] = 900.0,
    gap_timeout: Annotated[
        float,
        typer.Option(help="Worker gap timeout in seconds: permanent gaps are given up after it."),
    ] = 10.0,
    topology: Annotated[
        str,
        typer.Option(
            help="ordered (the Resequencer + Idempotent Receiver) or commands "
            "(the command worker on a duplicate storm of inventory commands)."
        ),
    ] = "ordered",
    commands: Annotated[int, typer.Option(help="Distinct commands (--topology commands).")] = 2000,
) -> None:
    """The main job: publish a messy workload, run the worker, verify the output."""
    from seqkeeper.demo import DemoOptions, run_command_demo, run_demo

    if topology == "commands":
        settings = settings_of(bootstrap=broker, partitions=partitions, connects=True)
        raise typer.Exit(run_command_demo(settings, commands, seed))

    code = run_demo(
        settings_of(
            bootstrap=broker, partitions=partitions, gap_timeout=gap_timeout, connects=True
        ),
        DemoOptions(
            messages=messages,
            keys=keys,
            duplicate_rate=duplicate_rate,
            malformed=malformed,
            lost=lost,
            seed=seed,
            timeout=timeout,
        ),
    )
    raise typer.Exit(code)


def _sealer() -> Any:
    """The audit key from the environment (a bad one: one line, exit 2)."""
    from seqkeeper.spark_sink.crypto import Sealer

    return Sealer.from_env()


def _graceful_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt, so ``with`` blocks (the embedded
    broker, temporary directories, child workers) clean up as on Ctrl-C."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main() -> None:
    _graceful_sigterm()
    app()  # (each command maps its failures to one line: Commands)
