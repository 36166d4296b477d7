"""The ordered/deduplicated topology.

``events.in`` -> parse -> Idempotent Receiver (seen-ids table) -> Resequencer
(next-expected and reorder-buffer tables) -> ``events.deduped`` (each accepted
message at once) and ``events.ordered`` (per key in sequence order); whatever
is not accepted goes to ``events.dlq`` with the reason in headers.

Per message the state is persisted before anything is emitted (table writes
go to local RocksDB and the changelog producer buffer first), and Faust only
commits the input offset after the producer has flushed both, so a crash
re-processes rather than loses.
"""

from __future__ import annotations

import time
from typing import Any

import faust

from processors import deduplicator, resequencer
from processors.dead_letter import dead_letter_headers
from processors.envelope import InvalidMessage, parse
from seqkeeper.settings import Settings
from state.faust_glue import App, raw_table
from state.stores import ResequencerStore, SeenIdStore


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

    source, ordered, deduped, dlq = (
        topic(settings.input_topic),
        topic(settings.ordered_topic),
        topic(settings.deduped_topic),
        topic(settings.dlq_topic),
    )
    seen = SeenIdStore(raw_table(app, "seen-ids", settings.partitions))
    reseq = ResequencerStore(
        raw_table(app, "next-expected", settings.partitions),
        raw_table(app, "reorder-buffer", settings.partitions),
    )

    @app.agent(source)
    async def resequence(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            try:
                message = parse(msg.key, msg.value)
            except InvalidMessage as exc:
                await dlq.send(
                    key=msg.key,
                    value=msg.value,
                    headers=dead_letter_headers(
                        exc.reason, exc.detail, msg.topic, msg.partition, msg.offset, msg.timestamp
                    ),
                )
                continue
            decision = deduplicator.offer(seen.view(message.key), message, time.time())
            if not decision.accepted:
                continue
            before = reseq.next_expected(message.key)
            step = resequencer.offer(before, reseq.buffer(message.key), message)
            if step.rejected is not None:
                await dlq.send(
                    key=msg.key,
                    value=msg.value,
                    headers=dead_letter_headers(
                        step.rejected.reason,
                        step.rejected.detail,
                        msg.topic,
                        msg.partition,
                        msg.offset,
                        msg.timestamp,
                    ),
                )
                continue
            # Persist, then emit (see the module docstring).
            seen.remember(message.key, decision)
            reseq.apply(message.key, before, step)
            await deduped.send(key=msg.key, value=msg.value)
            for released in step.released:
                await ordered.send(key=msg.key, value=released.value)

    return app
