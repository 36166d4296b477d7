"""The ordered/deduplicated topology.

``events.in`` -> parse -> Idempotent Receiver (``seen-ids``) -> Resequencer
(``key-state``, ``reorder-buffer``) -> ``events.deduped`` (each accepted
message at once) and ``events.ordered`` (per key in sequence order, with
``seqkeeper.GapSkipped`` markers); rejected records go to ``events.dlq`` (or
``events.late``) with the reason in headers. A timer gives up gaps that
blocked longer than the gap timeout, for the partitions this worker owns.

Order of effects for every message and timer step, all in one synchronous
block (no other step can interleave): read state, decide (pure cores),
write state (local RocksDB + changelog producer buffer), then enqueue the
output records (``send_soon``, so their order is the order of the steps).
Faust commits the input offset only after the producer has flushed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import faust
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from processors import deduplicator, resequencer
from processors.clock import StreamClock
from processors.dead_letter import dead_letter_headers
from processors.envelope import InvalidMessage, Reason, parse
from processors.resequencer import GapSkipped, KeyState, Step
from seqkeeper.settings import Settings
from state.faust_glue import App, raw_table
from state.rocksdb import FaustRocksStore
from state.stores import Stores
from state.timers import GapTimers
from topologies.metrics import Metrics

log = logging.getLogger("seqkeeper.ordered")

Send = Callable[[Any, bytes | None, bytes | None, list[tuple[str, bytes]] | None], None]


class OrderedTopology:
    """Calls the cores for each input record and timer tick, persists, emits."""

    def __init__(
        self, settings: Settings, stores: Stores, send: Send, topics: dict[str, Any]
    ) -> None:
        self.settings = settings
        self.policy = settings.resequencer_policy()
        self.retention = settings.retention()
        self.stores = stores
        self.send = send
        self.topics = topics
        self.timers = GapTimers()
        self.clocks: dict[int, StreamClock] = {}  # stream time per input partition
        self.processed: dict[int, int] = {}  # last input offset processed per partition
        self.buffered: dict[int, int] = {}
        self.metrics = Metrics()

    # -- input -------------------------------------------------------------
    def on_record(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: float | None,
        wall: float,
    ) -> None:
        """One input record; ``timestamp`` is the record's time in seconds."""
        self.metrics.messages_in.inc()
        clock = self.clocks.get(partition, StreamClock()).observe(timestamp, wall)
        self.clocks[partition] = clock
        self.processed[partition] = offset
        now = clock.now(wall)
        try:
            message = parse(key, value)
        except InvalidMessage as exc:
            self.dead_letter(
                "dlq", key, value, exc.reason, exc.detail, partition, offset, timestamp
            )
            return
        stores = self.stores
        state, window = stores.load(partition, message.key)
        decision = deduplicator.offer(
            stores.seen(partition, message.key), window, message, now, self.retention
        )
        if not decision.accepted:
            self.metrics.duplicates.inc()
            return
        step = resequencer.offer(
            state,
            stores.buffer(partition, message.key),
            message,
            now,
            self.policy,
            sum(self.buffered.values()),
        )
        if step.rejected is not None:
            r = step.rejected
            if r.reason == Reason.LATE_ARRIVAL:
                self.metrics.late.labels(r.route).inc()
                log.warning(
                    "late arrival key=%s seq=%s route=%s", message.key, message.seq, r.route
                )
            if r.route != "drop":
                self.dead_letter(
                    r.route, key, value, r.reason, r.detail, partition, offset, timestamp
                )
            return
        if step.emitted and isinstance(step.emitted[0], GapSkipped):
            self.metrics.gaps_overflow.inc()
        stores.save(partition, message.key, step, decision.window, decision)
        self.send(self.topics["deduped"], key, value, None)
        self.metrics.messages_out.labels("deduped").inc()
        self.after(partition, message.key, step, state)

    # -- timers ------------------------------------------------------------
    def on_tick(self, positions: dict[int, tuple[int | None, int | None]], wall: float) -> None:
        """Timer. ``positions``: for each owned input partition, its end as
        last fetched and the offset the consumer last read. A partition
        processed up to its end is caught up, and only then does its stream
        time follow the wall clock. Until this worker processes a record of a
        partition, it counts as far as the consumer's position (the committed
        offset after an assignment)."""
        for partition, (highwater, read) in positions.items():
            if partition not in self.processed and read is not None:
                self.processed[partition] = read - 1
            if highwater is not None:
                lag = highwater - (self.processed.get(partition, -1) + 1)
                self.metrics.lag.labels(str(partition)).set(max(0, lag))
            clock = self.clocks.get(partition, StreamClock())
            if highwater is not None and highwater <= self.processed.get(partition, -1) + 1:
                clock = self.clocks[partition] = clock.idle(wall)
            now = clock.now(wall)
            for key in self.timers.due(partition, now):
                state, window = self.stores.load(partition, key)
                step = resequencer.expire(
                    key, state, self.stores.buffer(partition, key), now, self.policy
                )
                if step.state != state:
                    if step.emitted:
                        self.metrics.gap_timeouts.inc()
                    self.stores.save(partition, key, step, window)
                self.after(partition, key, step)  # popped: always re-arm

    def on_assigned(self, partitions: set[int]) -> None:
        """Rebuild the timer index and buffer counts from the key-state table;
        stream clocks and progress start afresh (another worker may have
        moved the partitions on meanwhile)."""
        self.clocks.clear()
        self.processed.clear()
        for partition in set(self.timers.partitions()) | set(self.buffered):
            if partition not in partitions:
                self.timers.drop(partition)
                self.buffered.pop(partition, None)
        for partition in partitions:
            self.timers.drop(partition)
            total = 0
            for key, state, _ in self.stores.key_states(partition):
                total += state.buffered
                deadline = resequencer.gap_deadline(state, self.policy)
                if deadline is not None:
                    self.timers.arm(partition, key, deadline)
            self.buffered[partition] = total
        self.metrics.buffered.set(sum(self.buffered.values()))

    # -- shared ------------------------------------------------------------
    def after(self, partition: int, key: str, step: Step, before: KeyState | None = None) -> None:
        """Emit a persisted step's ordered records and (re-)arm its timer when
        its deadline changed (so the timer heap holds one live entry per
        waiting key, not one per message)."""
        kbytes = key.encode("utf-8")
        ordered = self.topics["ordered"]
        for item in step.emitted:
            self.send(ordered, kbytes, item.value, None)
            if isinstance(item, GapSkipped):
                self.metrics.skipped.inc(item.last - item.first + 1)
                log.warning("gap skipped key=%s from=%s to=%s", key, item.first, item.last)
        if step.emitted:
            self.metrics.messages_out.labels("ordered").inc(len(step.emitted))
        if step.buffered_delta:
            self.buffered[partition] = self.buffered.get(partition, 0) + step.buffered_delta
            self.metrics.buffered.set(sum(self.buffered.values()))
        deadline = resequencer.gap_deadline(step.state, self.policy)
        if deadline is not None and (
            before is None or deadline != resequencer.gap_deadline(before, self.policy)
        ):
            self.timers.arm(partition, key, deadline)

    def dead_letter(
        self,
        route: str,
        key: bytes | None,
        value: bytes | None,
        reason: str,
        detail: str,
        partition: int,
        offset: int,
        timestamp: float | None,
    ) -> None:
        topic = self.topics["late" if route == "late" else "dlq"]
        millis = None if timestamp is None else int(timestamp * 1000)
        headers = dead_letter_headers(
            reason, detail, self.settings.input_topic, partition, offset, millis
        )
        self.send(topic, key, value, headers)
        self.metrics.dead_lettered.labels(reason).inc()
        log.info("dead-lettered partition=%s offset=%s reason=%s", partition, offset, reason)


def build_app(settings: Settings) -> faust.App:
    """The Faust app of the ordered/deduplicated topology for ``settings``."""
    if not settings.broker:
        raise ValueError("settings.broker is empty: start a broker first or give its address")
    app = App(
        settings.app_id,
        broker=[f"kafka://{server.strip()}" for server in settings.broker.split(",")],
        store="rocksdb://",
        datadir=str(settings.data_dir),
        web_enabled=True,
        web_host=settings.web_host,
        web_port=settings.web_port,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication,
        consumer_auto_offset_reset="earliest",
        table_standby_replicas=0,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=min(3.0, settings.session_timeout / 3),
    )

    def topic(name: str) -> Any:
        return app.topic(
            name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=settings.partitions,
        )

    source = topic(settings.input_topic)
    topics = {
        "ordered": topic(settings.ordered_topic),
        "deduped": topic(settings.deduped_topic),
        "dlq": topic(settings.dlq_topic),
        "late": topic(settings.late_topic),
    }
    key_state = raw_table(app, "key-state", settings.partitions)
    stores = Stores(
        key_state=FaustRocksStore(key_state),
        reorder_buffer=FaustRocksStore(raw_table(app, "reorder-buffer", settings.partitions)),
        seen_ids=FaustRocksStore(raw_table(app, "seen-ids", settings.partitions)),
    )

    def send(topic: Any, key: bytes | None, value: bytes | None, headers: Any) -> None:
        topic.send_soon(key=key, value=value, headers=headers)

    topology = OrderedTopology(settings, stores, send, topics)
    app.seqkeeper = topology  # type: ignore[attr-defined]

    def owned() -> list[Any]:
        """This worker's active input partitions (TPs)."""
        return [tp for tp in app.assignor.assigned_actives() if tp.topic == settings.input_topic]

    @key_state.on_recover  # type: ignore[untyped-decorator]
    async def rebuild_index() -> None:
        topology.on_assigned({tp.partition for tp in owned()})

    @app.agent(source)
    async def resequence(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            topology.on_record(
                msg.partition, msg.offset, msg.key, msg.value, msg.timestamp, time.time()
            )

    @app.timer(settings.timer_interval)
    async def gap_timeouts() -> None:
        if not app.rebalancing:
            consumer = app.consumer
            topology.on_tick(
                {
                    tp.partition: (consumer.highwater(tp), consumer._read_offset.get(tp))
                    for tp in owned()
                },
                time.time(),
            )

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        return web.bytes(
            generate_latest(topology.metrics.registry),
            content_type=CONTENT_TYPE_LATEST.split(";")[0] + "; version=0.0.4",
        )

    return app
