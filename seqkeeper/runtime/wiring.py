"""The Faust side of the runtime: the app a worker runs for a topology.

:func:`build_app` wires a :class:`~seqkeeper.runtime.protocol.Wiring` into a
Faust app: the input topic read as fetched batches, the changelogged table
on RocksDB, the :class:`~seqkeeper.runtime.task.Task` that runs the commit
protocol, and the agent, timer and hooks that drive it. Every Faust call of
the runtime is here; Faust's own behaviour is changed only in
:mod:`seqkeeper.adapter`.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Set
from typing import Any

import faust
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from seqkeeper.adapter.batches import ack_batch, batch_source, current, read_offset
from seqkeeper.adapter.commit import committed
from seqkeeper.adapter.diagnostics import install_diagnostics
from seqkeeper.adapter.faust_app import App
from seqkeeper.adapter.lifecycle import WorkerOptions
from seqkeeper.adapter.producer import PRODUCER_BATCH_BYTES
from seqkeeper.adapter.recovery import watch_restores
from seqkeeper.adapter.routing import own_url, owners
from seqkeeper.adapter.store import STORE_URL, refuse_newer
from seqkeeper.adapter.tables import FaustLocalTable, raw_table
from seqkeeper.adapter.transactions import TransactionalProducers
from seqkeeper.adapter.web import quiet_bad_requests
from seqkeeper.runtime.progress import (
    ReplayCollector,
    RestoreCollector,
    RestoreProgress,
    liveness,
    readiness,
)
from seqkeeper.runtime.protocol import Query, Topology, Wiring
from seqkeeper.runtime.query_routing import Access, Placement, admit, answer
from seqkeeper.runtime.task import Task, TaskState
from seqkeeper.runtime.tracing import Tracing
from seqkeeper.security import ClientSecurity
from seqkeeper.settings import Guarantee, Settings
from seqkeeper.state.formats import UnreadableState, open_partitions
from seqkeeper.state.rocksdb import LayeredPartitionStore

#: The worker's exit code when a transaction was fenced or aborted.
FENCED_EXIT = 3


def faust_security(security: ClientSecurity) -> dict[str, Any]:
    """Faust's settings for clients connecting as ``security``
    (``broker_credentials``: Faust hands them to every aiokafka client it
    creates; its ``SASLCredentials`` shows no password in its repr)."""
    from faust.auth import SASLCredentials, SSLCredentials

    context = security.ssl_context()
    if security.sasl:
        return {
            "broker_credentials": SASLCredentials(
                username=security.username,
                password=security.password.reveal(),
                mechanism=security.mechanism,
                ssl_context=context,
            )
        }
    if context is not None:
        return {"broker_credentials": SSLCredentials(context)}
    return {}


def make_app(settings: Settings, app_id: str | None = None) -> App:
    """The Faust app for ``settings`` (RocksDB tables, the adapter's
    transport and recovery)."""
    if not settings.broker.bootstrap:
        raise ValueError("no broker: start one first or give its address")
    security = ClientSecurity.of(settings.security)
    options = WorkerOptions(
        guarantee=settings.runtime.guarantee,
        group_instance_id=settings.runtime.instance_id or None,
        fetch_max_wait_ms=settings.runtime.fetch_wait_ms(),
        client_security=security,
    )
    app = App(
        app_id or settings.group_id,
        options=options,
        broker=[f"kafka://{server.strip()}" for server in settings.broker.bootstrap.split(",")],
        store=STORE_URL,
        datadir=str(settings.runtime.data_dir),
        web_enabled=True,
        # The interface the web server listens on is web_bind (Faust's
        # default: every interface); web_host is only the name in the
        # default canonical_url. State queries expose message data: listen
        # where SEQKEEPER_WEB_HOST says (loopback unless set), nowhere else.
        web_bind=settings.runtime.web_host,
        web_host=settings.runtime.web_host,
        web_port=settings.runtime.web_port,
        # Faust's /table/<name>/<key>/ reads table data and /router/ lists
        # the group's URLs, with no way to ask for a token; the state
        # queries (install_queries) are the only reads of the state served.
        web_tables_enabled=False,
        web_router_enabled=False,
        # the address published in the group assignment (state query redirects)
        canonical_url=settings.runtime.advertised_url or None,
        topic_partitions=settings.broker.partitions,
        topic_replication_factor=settings.broker.replication,
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=settings.runtime.standby_replicas,
        broker_session_timeout=settings.runtime.session_timeout,
        broker_heartbeat_interval=min(3.0, settings.runtime.session_timeout / 3),
        broker_max_poll_records=settings.runtime.max_poll_records,
        broker_commit_interval=settings.runtime.commit_interval,
        # aiokafka sends at most one batch per partition per request: with
        # its small default an outbox cycle's changelog writes would go out
        # as many requests one after another, each cycle longer than the last.
        producer_max_batch_size=PRODUCER_BATCH_BYTES,
        **faust_security(security),
        # Faust reads its own environment variables (WEB_BIND, WEB_PORT,
        # APP_WEB_TABLES_ENABLED, BROKER_URL, ...) over these arguments: a
        # stray WEB_BIND=0.0.0.0 would open the web server to every
        # interface, APP_WEB_TABLES_ENABLED=1 would serve the tables with no
        # token. The settings above are the only source.
        env={},
    )
    quiet_bad_requests()  # (whoever reaches the web port cannot fill the log)
    return app


def raw_topic(app: faust.App, name: str, partitions: int) -> Any:
    return app.topic(
        name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )


def owned_partitions(app: Any, topic: str) -> list[Any]:
    """This worker's active partitions (TPs) of ``topic``."""
    return [tp for tp in app.assignor.assigned_actives() if tp.topic == topic]


def install_metrics(
    app: Any, registry: CollectorRegistry | None, progress: RestoreProgress | None = None
) -> None:
    """``GET /metrics`` in the Prometheus text format: ``registry`` (the
    topology's), the restore ``progress`` (its gauge) and the changelog
    records the app's tables replayed (its counter)."""
    registry = registry if registry is not None else CollectorRegistry()
    if progress is not None:
        registry.register(RestoreCollector(progress))
    registry.register(ReplayCollector(app.changelog_replayed))

    @app.page("/metrics")  # type: ignore[untyped-decorator]
    async def metrics(web: Any, request: Any) -> Any:
        return web.bytes(
            generate_latest(registry),
            content_type=CONTENT_TYPE_LATEST.split(";")[0] + "; version=0.0.4",
        )


def install_health(app: Any, task: Task, progress: RestoreProgress) -> None:
    """``GET /health`` (liveness: 200 while the worker is not stopping,
    restoring or not) and ``GET /ready`` (readiness: 200 once the task runs
    on restored state and no rebalance is under way; 503 with why and what
    is left to restore). Faust's web server answers from the worker's start,
    during recoveries too."""

    def stopping() -> bool:
        return bool(app.should_stop)

    @app.page("/health")  # type: ignore[untyped-decorator]
    async def health(web: Any, request: Any) -> Any:
        got = liveness(task.state, stopping())
        return web.json(got.body, status=got.status)

    @app.page("/ready")  # type: ignore[untyped-decorator]
    async def ready(web: Any, request: Any) -> Any:
        got = readiness(task.state, bool(app.rebalancing), stopping(), progress.remaining())
        return web.json(got.body, status=got.status)


def install_queries(
    app: Any,
    wiring: Wiring,
    topology: Topology,
    task: Task,
    partitions: int,
    access: Access,
) -> None:
    """``GET`` each of ``wiring``'s state queries (:mod:`seqkeeper.runtime.query_routing`)
    to whom ``access`` admits; none when state queries are off."""
    if not access.served:
        return  # (no route: 404, and nothing of the queries runs)
    topic = wiring.input_topic

    def placement() -> Placement:
        # The assignment is stale from a rebalance's start until its
        # partitions are restored (Faust's ``rebalancing`` spans both), and
        # this worker's state is current only while the task runs.
        running = task.state is TaskState.RUNNING and not app.rebalancing
        return Placement(
            me=own_url(app),
            owners={} if app.rebalancing else owners(app, topic),
            ready={tp.partition for tp in owned_partitions(app, topic)} if running else (),
            partitions=partitions,
        )

    def serve(query: Query) -> None:
        @app.page(query.path, name=query.path)  # type: ignore[untyped-decorator]
        async def read(web: Any, request: Any, **matched: str) -> Any:
            # before anything else: a refused request learns nothing, not
            # even a parameter's error or the key's owner
            refused = admit(access, request.headers.get("Authorization"))
            if refused is not None:
                return web.json(refused.body, status=refused.status, headers=refused.headers)
            params = {**request.query, **matched}
            # (synchronous from here: no processing step runs in between)
            got = answer(query, topology, params, str(request.rel_url), placement())
            return web.json(got.body, status=got.status, headers=got.headers)

    for query in wiring.queries:
        serve(query)


def stop_at_once(error: BaseException) -> None:
    """A transaction was fenced or aborted: stop the process now, as a
    ``kill -9`` would. Nothing more may be written (another worker owns the
    partition, or the cycle's writes were rolled back while the topology's
    memory holds them), and no clean stop may mark the local state, which
    holds the aborted writes, as matching the changelog: the next start
    rebuilds it. (Faust would restart a crashed agent and go on.)"""
    logging.shutdown()  # (the line saying why is out)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(FENCED_EXIT)


def transactional_producers(app: App, settings: Settings, input_topic: str) -> TransactionalProducers:
    """Exactly-once (:mod:`seqkeeper.adapter.transactions`; the app was
    built for it: its consumer reads committed records only): each cycle
    commits a transaction per input partition through the producers made
    here."""
    # (ids under the group's prefix: the one the start-up probe used, and
    # the one an ACL grants)
    return TransactionalProducers(
        settings.broker.bootstrap,
        app.conf.id,
        input_topic,
        app.conf.id,
        app.options.client_security,
    )


class WorkerLifecycle:
    """The worker's part at the app's turning points
    (:class:`seqkeeper.adapter.lifecycle.Lifecycle`): the commit protocol's
    step 6 waits for steps 2-5; a rebalance and a clean stop reach the task
    first; under exactly-once the assignment's producers start before any
    changelog or committed offset is read."""

    def __init__(
        self,
        app: App,
        task: Task,
        store: LayeredPartitionStore,
        table: Any,
        input_topic: str,
        transactions: TransactionalProducers | None,
    ) -> None:
        self.app = app
        self.task = task
        self.store = store
        self.table = table
        self.input_topic = input_topic
        self.transactions = transactions

    def rebalancing(self) -> None:
        self.task.on_rebalance()

    async def recovering(self, assigned: Set[Any]) -> None:
        # The assignment's order under exactly-once: the producers of the
        # new assignment start (fencing the previous owners, completing or
        # aborting their transactions) before anything is read.
        if self.transactions is not None:
            topic = self.input_topic
            await self.transactions.assign({tp.partition for tp in assigned if tp.topic == topic})

    def tables_opened(self) -> None:
        self.store.adopt()

    async def restored(self) -> None:
        task = self.task
        partitions = {tp.partition for tp in owned_partitions(self.app, self.input_topic)}
        if task.state not in (TaskState.SUSPENDED, TaskState.CLOSED):
            # before the topology reads the state: older formats migrated,
            # a newer one refused (its marker came with a restore, or was
            # in the local state: both checked before, this is the last word)
            try:
                open_partitions(self.store, partitions, self.table.name)
            except UnreadableState as error:
                refuse_newer(error)
        task.on_restored(partitions)

    async def before_commit(self) -> None:
        await self.task.cycle()

    async def before_close(self) -> None:
        try:
            await self.task.suspend(rebalancing=bool(self.app.rebalancing))
        finally:
            if self.transactions is not None:
                await self.transactions.close()


def build_app(
    settings: Settings,
    wiring: Wiring,
    beside: Iterable[Callable[[], Awaitable[None]]] = (),
    tracing: Tracing | None = None,
) -> tuple[App, Task]:
    """The Faust app running ``wiring``'s topology, and its task; ``beside``:
    services that run with it until it stops (a repartitioner); ``tracing``:
    the worker's spans, if on (:mod:`seqkeeper.runtime.tracing`)."""
    app: Any = make_app(settings)
    for service in beside:
        app.task(service)
    partitions = settings.broker.partitions
    source = raw_topic(app, wiring.input_topic, partitions)
    table = raw_table(
        app,
        wiring.table,
        partitions,
        options=settings.runtime.rocksdb_options(),
        extra_topic_configs=settings.ordered.changelog_topic_configs(),
    )
    atomic = app.options.guarantee is Guarantee.EXACTLY_ONCE
    store = LayeredPartitionStore(
        FaustLocalTable(table), app.batch_producer, deferred=wiring.deferred, atomic=atomic
    )
    topology = wiring.build(store)
    transactions = None
    if atomic:
        transactions = transactional_producers(app, settings, wiring.input_topic)
    task = Task(
        topology,
        store,
        app.batch_producer,
        wiring.output_topic,
        settings.runtime.outbox_linger,
        transactions=transactions,
        on_committed=lambda positions: committed(app, wiring.input_topic, positions),
        on_fatal=stop_at_once,
        destinations=app.destinations,
    )

    app.install(WorkerLifecycle(app, task, store, table, wiring.input_topic, transactions))
    if tracing is not None:
        tracing.topic_of = wiring.output_topic
        task.tracing = tracing
        topology.stamp = tracing.stamp  # type: ignore[attr-defined]
        watch_restores(app, tracing.restores())

    @app.on_partitions_revoked.connect  # type: ignore[untyped-decorator]
    async def cycle_before_revoke(sender: Any, revoked: Any, **kwargs: Any) -> None:
        # A last cycle before the partitions are given up: no cycle is in
        # flight when Faust closes or recovers a partition's RocksDB (the
        # local state is written only once a cycle is committed), and under
        # exactly-once what was processed commits with its input position.
        if task.state is TaskState.RUNNING:
            task.on_rebalance()  # (what is awaited now writes nothing after)
            await task.cycle()

    app.task(task.run)
    install_diagnostics(app, task.probe, lambda: wiring.probe(topology))
    progress = RestoreProgress(say=logging.getLogger("seqkeeper.recovery").info)
    watch_restores(app, progress)
    install_metrics(app, wiring.registry(topology), progress)
    install_health(app, task, progress)
    access = Access(
        served=settings.runtime.state_queries == "on", token=settings.runtime.query_token()
    )
    install_queries(app, wiring, topology, task, partitions, access)

    def owned() -> list[Any]:
        return owned_partitions(app, wiring.input_topic)

    limit = settings.runtime.outbox_max

    @app.agent(batch_source(app, source))  # type: ignore[untyped-decorator]
    async def process(stream: Any) -> None:
        # step 1 of the commit protocol, one fetch at a time
        on_records = topology.on_records
        async for fetched in stream:  # one Fetched per fetch (seqkeeper.adapter.batches)
            if not current(app, fetched):
                continue
            wall = time.time()
            if tracing is not None:  # (a span per record, the records one at a time)
                await tracing.process(
                    wiring.input_topic,
                    fetched.partitions,
                    wall,
                    on_records,
                    functools.partial(current, app, fetched),
                )
            else:
                for tp, records in fetched.partitions:
                    waiting = on_records(tp.partition, records, wall)
                    if waiting is not None:  # a user's async function
                        await waiting
                        if not current(app, fetched):  # a rebalance began meanwhile:
                            break  # the state may be closing; no other partition now
            if not current(app, fetched):
                continue  # (read again from the committed offsets: never acked)
            ack_batch(app, fetched.partitions)
            await task.relieve(limit)

    @app.timer(settings.runtime.timer_interval)  # type: ignore[untyped-decorator]
    async def tick() -> None:
        if not app.rebalancing:
            consumer = app.consumer
            waiting = task.on_tick(
                {tp.partition: (consumer.highwater(tp), read_offset(app, tp)) for tp in owned()},
                time.time(),
            )
            if waiting is not None:
                await waiting

    return app, task
