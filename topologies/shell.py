"""What every topology's Faust wiring shares: the app, the outbox cycle,
diagnostics and the metrics page.

The outbox cycle (see :mod:`topologies.ordered` for why): a topology queues
output records in its outbox while it writes state; :func:`install_outbox`
runs a task that takes the queued batch and the changelog writes made so
far, sends the writes and waits until the broker acknowledges them, produces
the batch, waits for those acknowledgements, and hands the batch back to the
topology to confirm (the next batch is taken while one is produced: see
:func:`install_outbox`). Both go as record batches per topic-partition
(:mod:`seqkeeper.adapter.producer`). A whole cycle runs before every offset commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import faust
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from seqkeeper.adapter.app import App
from seqkeeper.adapter.producer import BatchProducer
from seqkeeper.settings import Settings
from seqkeeper.state.rocksdb import FaustRocksStore

log = logging.getLogger("seqkeeper.shell")

Headers = list[tuple[str, bytes]] | None

#: Largest record batch the worker produces (within Kafka's default
#: 1 MiB message.max.bytes and aiokafka's 1 MiB max_request_size).
PRODUCER_BATCH_BYTES = 512 * 1024


#: One output record: topic (a role the topology knows, or a topic name),
#: key, value, headers. A plain tuple: the hot path makes two per message,
#: and the garbage collector stops tracking a tuple of strings and bytes
#: (never a dataclass or a tuple subclass: an outbox of 20,000 such records
#: was traversed by every collection until the cycle took it).
Out = tuple[str, bytes | None, bytes | None, Headers]


@dataclass
class Batch:
    """What one outbox cycle produces, and what the topology confirms once
    it is produced (``confirms``: topology-specific, keyed per partition and
    key). ``generation`` is the assignment it belongs to."""

    records: list[Out] = field(default_factory=list)
    confirms: dict[tuple[int, str], Any] = field(default_factory=dict)
    generation: int = 0

    def __bool__(self) -> bool:
        return bool(self.records or self.confirms)


class OutboxOwner:
    """The outbox half of a topology: queue records, hand batches over.
    Subclasses set ``outbox``, ``generation`` and ``on_output`` and
    implement ``confirm``."""

    outbox: Batch
    generation: int
    on_output: Callable[[], None]

    def emit(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers = None
    ) -> None:
        records = self.outbox.records
        records.append((topic, key, value, headers))
        if len(records) == 1:
            self.on_output()

    def take(self) -> Batch:
        """The outbox so far; the shell produces it once the state written
        until now is durable, then calls ``confirm``."""
        batch, self.outbox = self.outbox, Batch(generation=self.generation)
        batch.generation = self.generation
        self.taken(batch)
        return batch

    def taken(self, batch: Batch) -> None:
        """Called with every batch taken (metrics)."""


class Outboxed(Protocol):
    on_output: Callable[[], None]

    def take(self) -> Batch: ...

    def confirm(self, batch: Batch) -> None: ...


def make_app(settings: Settings) -> faust.App:
    """The Faust app for ``settings`` (RocksDB tables, our transport fixes)."""
    if not settings.broker.bootstrap:
        raise ValueError(
            "settings.broker.bootstrap is empty: start a broker first or give its address"
        )
    app = App(
        settings.group_id,
        broker=[f"kafka://{server.strip()}" for server in settings.broker.bootstrap.split(",")],
        store="rocksdb://",
        datadir=str(settings.runtime.data_dir),
        web_enabled=True,
        web_host=settings.runtime.web_host,
        web_port=settings.runtime.web_port,
        topic_partitions=settings.broker.partitions,
        topic_replication_factor=settings.broker.replication,
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=0,
        broker_session_timeout=settings.runtime.session_timeout,
        broker_heartbeat_interval=min(3.0, settings.runtime.session_timeout / 3),
        broker_max_poll_records=settings.runtime.max_poll_records,
        broker_commit_interval=settings.runtime.commit_interval,
        # aiokafka sends at most one batch per partition per request: with
        # its 16 KiB default an outbox cycle of 10,000 changelog writes went
        # out as ~16 requests one after another, and under load each cycle
        # grew longer than the last (latency p99 at 2,500 msg/s: 2 s).
        producer_max_batch_size=PRODUCER_BATCH_BYTES,
    )
    app.fetch_max_wait_ms = settings.runtime.fetch_wait_ms()
    app.group_instance_id = settings.runtime.instance_id or None
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


def install_outbox(
    app: Any,
    topology: Outboxed,
    store: FaustRocksStore,
    resolve: Callable[[str], Any],
    linger: float = 0.0,
) -> Callable[[], dict[str, Any]]:
    """Run the outbox cycle for ``topology``; ``resolve`` maps an
    ``Out`` topic to a Faust topic; a cycle starts ``linger`` seconds
    after the first output (at once when an agent waits in :func:`relieve`).
    Sets ``app.outbox_cycle`` (everything queued so far made durable and
    confirmed) and ``app.outbox_taken`` (see :func:`relieve`). Returns a
    probe for diagnostics.

    A cycle has two stages. *Take*: take the outbox and the changelog
    writes made so far (together, with no await between: the writes behind
    the batch), send the writes and wait for their acknowledgements.
    *Produce*: produce the batch, wait for its acknowledgements, confirm.
    Takes run one at a time, and so do produces, each in the order of the
    takes; the next take may run while the batch before it is produced.
    So a batch is produced only after its own state writes are durable
    (write-ahead), batches reach each partition in order, and the state
    writes of the next batch can travel in the same produce requests as
    this batch's records (aiokafka keeps one request in flight per broker,
    with at most one record batch per partition: two stages one after the
    other cost two round trips per cycle, and an agent with a backlog
    waited for them). A crash between the two stages leaves the next
    batch's state durable and this batch unconfirmed: a restart emits again
    what was not confirmed (:mod:`topologies.ordered`), as after a crash
    within one cycle.
    """
    wake = asyncio.Event()
    topology.on_output = wake.set
    taking = asyncio.Lock()
    #: agents waiting in relieve() for the next take
    waiters: list[asyncio.Future[None]] = []
    #: the produce stages of the last two takes (each awaits the one before)
    stages: list[asyncio.Future[None]] = []

    producer: BatchProducer = app.batch_producer

    async def produce(batch: Batch, before: asyncio.Future[None] | None) -> None:
        if before is not None:
            await before  # in the order of the takes (and failing with it)
        if not batch:
            return
        grouped = await producer.group(batch.records, lambda role: resolve(role).get_topic_name())
        await producer.send(grouped)
        topology.confirm(batch)

    async def take() -> asyncio.Future[None]:
        """The take stage; returns the batch's produce stage, under way."""
        async with taking:
            # At most one batch is being produced while this one is taken
            # (the bound on what waits in memory). A failed produce stage
            # fails every take after it (and every produce stage: each
            # awaits the one before), as a failed cycle did.
            if len(stages) == 2:
                await stages.pop(0)
            if stages and stages[-1].done():
                stages[-1].result()
            batch = topology.take()
            writes = store.take_writes()
            # The outbox is empty again: an agent held back by relieve() may
            # go on (what it adds goes to the next take).
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
            waiters.clear()
            await store.flush(writes)
            stage = asyncio.ensure_future(produce(batch, stages[-1] if stages else None))
            stage.add_done_callback(wake_on_failure)
            stages.append(stage)
            return stage

    def wake_on_failure(stage: asyncio.Future[None]) -> None:
        if not stage.cancelled() and stage.exception() is not None:
            wake.set()  # the outbox task's next take raises it

    async def cycle() -> None:
        """Everything queued so far durable and confirmed (its produce stage
        waits for every one before it)."""
        await (await take())

    async def taken() -> None:
        """Return once a take has taken the outbox as it is now: at once
        after the take under way (if any), not after any acknowledgement of
        the outputs."""
        if not taking.locked():
            await take()  # nothing being taken: take it now
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        wake.set()  # the outbox task's next take takes it (no linger)
        await waiter

    app.before_commit.append(cycle)
    app.outbox_cycle = cycle
    app.outbox_taken = taken

    @app.task  # type: ignore[untyped-decorator]
    async def outbox() -> None:
        while True:
            await wake.wait()
            if linger and not waiters:
                await asyncio.sleep(linger)
            wake.clear()
            await take()

    def probe() -> dict[str, Any]:
        return {
            "outbox wake": wake.is_set(),
            "outbox taking": taking.locked(),
            "outbox batches producing": sum(not stage.done() for stage in stages),
            "agents waiting for the outbox": len(waiters),
        }

    return probe


async def relieve(app: Any, topology: OutboxOwner, limit: int) -> None:
    """Back-pressure for an agent: once the outbox holds ``limit`` records,
    wait until an outbox cycle takes them before taking more input (the
    agent would otherwise run ahead of the broker, queueing outputs and
    changelog writes without bound).

    It waits for the take under way to finish and the next to take the
    outbox (when no take is under way, it takes the outbox itself and waits
    for those state writes' acknowledgements), not for any output's
    acknowledgements: those broker round trips were time the agent sat
    idle under a backlog. Bound: besides the outbox (up to ``limit``
    records and a fetch's worth), at most two taken batches wait for their
    outputs (a take waits until the batch before the last one is produced:
    :func:`install_outbox`)."""
    if len(topology.outbox.records) >= limit:
        await app.outbox_taken()


def install_metrics(app: Any, registry: CollectorRegistry) -> None:
    """``GET /metrics`` in the Prometheus text format."""

    @app.page("/metrics")  # type: ignore[untyped-decorator]
    async def metrics(web: Any, request: Any) -> Any:
        return web.bytes(
            generate_latest(registry),
            content_type=CONTENT_TYPE_LATEST.split(";")[0] + "; version=0.0.4",
        )


def owned_partitions(app: Any, topic: str) -> list[Any]:
    """This worker's active partitions (TPs) of ``topic``."""
    return [tp for tp in app.assignor.assigned_actives() if tp.topic == topic]
