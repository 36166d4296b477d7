"""The worker process: its broker, its topics, and the Faust worker that
runs a topology through the runtime (:mod:`seqkeeper.runtime`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqkeeper.broker import (
    EmbeddedBroker,
    KafkaBroker,
    LocalBroker,
    free_port,
    listen_here,
    port_is_free,
)

# (the parent's handle on a worker process: the tests and tools that start
# workers import it from here too)
from seqkeeper.fleet.processes import WorkerDied as WorkerDied
from seqkeeper.fleet.processes import WorkerProcess as WorkerProcess
from seqkeeper.permissions import (
    check_access,
    check_topics,
    is_anonymous,
    principal_of,
)
from seqkeeper.plugins import PluginError, codec_of, load_processor, load_registry
from seqkeeper.processors.command import Registry
from seqkeeper.runtime.protocol import Wiring
from seqkeeper.security import ClientSecurity, install
from seqkeeper.settings import EXAMPLE_HANDLERS, VARS, SettingError, Settings
from seqkeeper.topics import create_topics
from seqkeeper.wait import broker_answers, wait_for_broker

if TYPE_CHECKING:
    from seqkeeper.runtime.task import LocalState, Member

_local: list[LocalBroker] = []


class NewerState(RuntimeError):
    """The worker's local state was written by a newer release: it is
    refused before anything opens it (exit 4, :mod:`seqkeeper.cli.errors`)."""


class WebAddressUnusable(RuntimeError):
    """The web server cannot listen where the settings say (exit 1)."""


def current_local() -> LocalBroker | None:
    """The broker :func:`broker_for` started and still runs, if any."""
    return _local[-1] if _local else None


def local_broker(settings: Settings) -> LocalBroker:
    """The broker to start when none is configured: Apache Kafka from
    ``settings.broker.kafka_home`` when set, else the embedded one."""
    if settings.broker.kafka_home:
        return KafkaBroker(Path(settings.broker.kafka_home))
    return EmbeddedBroker()


@contextlib.contextmanager
def broker_for(settings: Settings) -> Iterator[Settings]:
    """``settings`` with a broker: the configured one, or a fresh local one
    (Apache Kafka from ``KAFKA_HOME``, else the embedded broker)."""
    if settings.broker.bootstrap:
        yield settings
        return
    if settings.security.security_protocol != "PLAINTEXT":
        raise SettingError(
            f"{VARS['security_protocol'].env}={settings.security.security_protocol}, but "
            f"the broker started when {VARS['bootstrap'].env} is empty listens on PLAINTEXT only: "
            "give the secured cluster's address"
        )
    local = local_broker(settings)
    if isinstance(local, KafkaBroker):
        print(f"starting Apache Kafka from {local.home} ...", flush=True)
    with local as broker:
        if isinstance(broker, KafkaBroker):
            print(f"Apache Kafka (KAFKA_HOME={broker.home}) at {broker.bootstrap}", flush=True)
        else:
            print(f"embedded broker (Tansu, memory only) at {broker.bootstrap}", flush=True)
        _local.append(broker)
        try:
            yield settings.with_overrides(bootstrap=broker.bootstrap)
        finally:
            _local.remove(broker)


def faust_worker(app: Any, settings: Settings) -> Any:
    """Faust's worker for ``app``, without its terminal spinner: the spinner
    sets the root logger to DEBUG when the level is WARN or above, so every
    debug call of aiokafka and Faust builds a log record, a cost on every
    busy worker. A service has no terminal to spin on."""
    import faust

    worker = faust.Worker(app, loglevel=settings.runtime.log_level, quiet=True, stdout=sys.stdout)
    worker.spinner = None
    return worker


def tune_interpreter(settings: Settings) -> None:
    """Apply the garbage-collector thresholds and the thread switch interval
    of ``settings`` to this process, and freeze what exists by now (called
    once the app is built): modules, classes and the app live as long as
    the process, and a full collection no longer examines them: full
    collections become shorter pauses."""
    gc.set_threshold(*settings.runtime.gc_threshold)
    sys.setswitchinterval(settings.runtime.switch_interval)
    gc.collect()
    gc.freeze()


def run_worker(settings: Settings) -> None:
    """Run the worker in the foreground until SIGINT/SIGTERM (graceful stop).
    What stops it before it runs (a setting, the user's code, the broker, an
    ACL, its state) is raised, typed: ``seqkeeper worker`` says it in one
    line (:mod:`seqkeeper.cli.errors`)."""

    from seqkeeper.runtime import tracing as spans
    from seqkeeper.runtime.guarantee import choose_fetch_wait, choose_guarantee
    from seqkeeper.runtime.task import LocalState, previous_members
    from seqkeeper.runtime.wiring import build_app
    from seqkeeper.state.integrity import refused_state
    from seqkeeper.topologies import command_worker, ordered

    # a token file that cannot be used fails before any broker, as a bad value
    # does (the file is read when needed: RuntimeSettings.query_token says why)
    settings.runtime.query_token()

    # how every client of this process connects (seqkeeper.security): a
    # password file or a TLS file that cannot be read fails here (SettingError)
    security = ClientSecurity.of(settings.security)
    security.ssl_context()
    install(security)
    # the principal the missing-ACL lines name: rules or a certificate that
    # cannot be read fail here too, before any broker
    principal = "" if is_anonymous(settings) else principal_of(settings)

    check_web_address(settings)
    # (the SDK and its exporters: a missing extra or unknown exporter fails here)
    tracing = spans.start(settings)

    # the user's code is loaded before any broker: a bad name fails fast
    wiring: Callable[[Settings], Wiring]
    codec = None
    if settings.runtime.topology == "commands":
        registry = handlers_of(settings)
        wiring = functools.partial(
            command_worker.wiring,
            registry=registry if tracing is None else tracing.handlers(registry),
            keys=command_worker.token_keys(settings),
        )
    else:
        processor = (
            load_processor(settings.ordered.processor) if settings.ordered.processor else None
        )
        codec = codec_of(settings.ordered)
        wiring = functools.partial(ordered.wiring, processor=processor, codec=codec)

    with broker_for(settings) as settings:
        settings.runtime.data_dir.mkdir(parents=True, exist_ok=True)
        if settings.runtime.web_port == 0:
            settings = settings.with_overrides(web_port=web_port_for(settings))
        await_broker_and_topics(settings)
        settings = choose_guarantee(
            settings, embedded=isinstance(current_local(), EmbeddedBroker), principal=principal
        )
        settings = choose_fetch_wait(settings)
        take_over_previous_members(settings, previous_members(settings.runtime.data_dir))
        app, task = build_app(
            settings, wiring(settings), beside=repartitioner(settings, codec), tracing=tracing
        )
        # state a newer release wrote is refused before anything opens it
        refused = refused_state(Path(app.conf.tabledir))
        if refused is not None:
            raise NewerState(refused)
        local = LocalState(settings.runtime.data_dir, Path(app.conf.tabledir))
        app.check_first(local.open(lambda line: print(line, flush=True)))
        keep_member_ids(settings, local)
        print(
            f"seqkeeper worker: broker {settings.broker.bootstrap}, data {settings.runtime.data_dir}, "
            f"web http://{settings.runtime.web_host}:{settings.runtime.web_port}/",
            flush=True,
        )
        tune_interpreter(settings)
        worker = faust_worker(app, settings)
        try:
            worker.execute_from_commandline()
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
        task.close()
        local.close_cleanly()


def take_over_previous_members(settings: Settings, members: dict[str, Member]) -> None:
    """Take the place of the members a worker killed on this data directory
    left in its groups (:mod:`seqkeeper.adapter.membership`), so that the
    new one need not wait for their sessions to expire: a member that had
    joined is removed (a LeaveGroup on its behalf; a failure only costs that
    wait), one whose join never completed is joined as."""
    from seqkeeper.adapter.membership import join_as, remove_member

    for group, member in members.items():
        if not member.joined:
            join_as(group, member.id)
            print(
                f"joining group {group!r} as the previous worker's member {member.id} "
                "(its join did not complete)",
                flush=True,
            )
            continue
        try:
            removed = asyncio.run(remove_member(settings.broker.bootstrap, group, member.id))
        except Exception as exc:  # noqa: BLE001 - the restart goes on without it
            print(
                f"could not remove the previous worker's member {member.id} from group "
                f"{group!r} ({type(exc).__name__}: {exc}): the group waits for its session "
                "to expire",
                flush=True,
            )
            continue
        if removed:
            print(
                f"removed the previous worker's member {member.id} from group {group!r}",
                flush=True,
            )
        else:
            print(
                f"the previous worker's member {member.id} had already left group {group!r}",
                flush=True,
            )


def keep_member_ids(settings: Settings, local: LocalState) -> None:
    """Keep each member id the worker's consumers are given in its data
    directory, as it is given (for :func:`take_over_previous_members`): in the
    worker's group unless it is a static member (its instance id makes the
    restart take its place), and in the repartition stage's group."""
    from seqkeeper.adapter.membership import tell_member_ids
    from seqkeeper.runtime.repartition import group_of

    groups = [] if settings.runtime.instance_id else [settings.group_id]
    if settings.repartition_topic() is not None:
        groups.append(group_of(settings))
    for group in groups:
        tell_member_ids(group, functools.partial(local.remember_member, group))


def repartitioner(settings: Settings, codec: Any) -> list[Callable[[], Awaitable[None]]]:
    """The repartitioning stage to run beside the ordered topology, when
    its key is a field of the value (:mod:`seqkeeper.runtime.repartition`)."""
    from seqkeeper.runtime.repartition import Repartitioner

    topic = settings.repartition_topic()
    if topic is None:
        return []
    return [Repartitioner(settings, settings.ordered.shape(codec), topic).run]


def handlers_of(settings: Settings) -> Registry:
    """The command handlers ``settings`` name (:mod:`seqkeeper.plugins`);
    a :class:`~seqkeeper.plugins.PluginError` saying what is wrong."""
    spec = settings.commands.handlers
    if not spec:
        raise PluginError(
            "the commands topology needs handlers: set SEQKEEPER_HANDLERS (or --handlers) "
            f"to module:registry, e.g. {EXAMPLE_HANDLERS}"
        )
    return load_registry(spec)


def await_broker_and_topics(settings: Settings) -> None:
    """Wait until the broker answers, then create the worker's topics; both
    retried while no broker answers, for up to ``settings.broker.broker_wait``
    seconds (:func:`seqkeeper.wait.wait_for_broker`: a line per attempt).
    Then :class:`~seqkeeper.wait.BrokerUnreachable` naming the address (as
    a refusal, a :class:`~seqkeeper.security.BrokerRefused`, or topics not
    created: one line, exit 1); a stop (Ctrl-C, SIGTERM) during the wait
    exits 0."""

    async def attempt() -> None:
        await broker_answers(settings.broker.bootstrap)
        # metadata first: with every topic created by an admin, no
        # CreateTopics is sent, and the user needs no Create ACL
        await check_topics(settings)
        await create_topics(
            settings.broker.bootstrap,
            settings.topics(),
            settings.broker.partitions,
            settings.broker.replication,
        )
        await check_access(settings)

    try:
        asyncio.run(
            wait_for_broker(settings.broker.bootstrap, settings.broker.broker_wait, attempt)
        )
    except KeyboardInterrupt:  # a stop, not a failure: exit 0
        print(f"stopped while waiting for the broker at {settings.broker.bootstrap}", flush=True)
        raise SystemExit(0) from None


def check_web_address(settings: Settings) -> None:
    """The web server can listen where the settings say, or the worker
    stops here, before any broker (:class:`WebAddressUnusable`): a host that is not
    an address of this machine, or a port in use, would otherwise end the
    worker with aiohttp's traceback once it has joined the group."""
    host, port = settings.runtime.web_host, settings.runtime.web_port
    try:
        listen_here(host, port)
    except OSError as e:
        raise WebAddressUnusable(
            f"{VARS['web_host'].env}={host} {VARS['web_port'].env}={port}: the web "
            f"server cannot listen there ({e.strerror}); give an address of this machine "
            "(127.0.0.1: this machine only; 0.0.0.0: every interface) and a free port "
            "(0 picks one)"
        ) from None


def web_port_for(settings: Settings) -> int:
    """A free port for the web server; for a static member (an instance id),
    the port it had before, kept in its data directory, while that is free.

    Apache Kafka hands a static member that rejoins the assignment it had,
    without a new one from the group leader (KIP-345), and Faust's assignor
    refuses an assignment made for another URL than the worker's web address
    (faust-streaming 0.15 ``PartitionAssignor.on_assignment`` asserts it;
    the assertion ends aiokafka's coordinator task, and the worker sits idle
    without partitions). So a static member's address must outlive it."""
    if not settings.runtime.instance_id:
        return free_port(settings.runtime.web_host)
    saved = settings.runtime.data_dir / "web.port"
    try:
        port = int(saved.read_text())
    except (OSError, ValueError):
        port = 0
    if not port or not port_is_free(settings.runtime.web_host, port):
        if port:
            print(
                f"web port {port} of static member {settings.runtime.instance_id!r} is taken: "
                "the worker's address changes, and Kafka's remembered assignment "
                "is refused until the group rebalances; set SEQKEEPER_WEB_PORT",
                flush=True,
            )
        port = free_port(settings.runtime.web_host)
        saved.write_text(f"{port}\n")
    return port
