"""Faust glue: an App whose Kafka transport learns partition ends correctly.

Faust's recovery asks the consumer for each changelog partition's
"highwater" (``AIOKafkaConsumerThread._highwaters`` -> ``end_offsets()``, a
ListOffsets request) and refuses to start when the offset persisted in local
RocksDB is above it. On the embedded broker ListOffsets is wrong whenever the
last record batch of a partition holds several records (see
:mod:`state.offsets`), so a worker restarted on its own RocksDB state would
crash with ``ConsistencyError``, and one that does not crash would stop
replaying the changelog early. We replace that one method with the fetch high
watermark, which is exact on Tansu and equal to ``end_offsets()`` on Apache
Kafka, so the override is correct on both and changes nothing on Kafka.

Transactions (``processing_guarantee="exactly_once"``) keep Faust's own path:
there the last stable offset, not the high watermark, is the right bound.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, cast

import faust
from aiokafka import TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.transports import TransportT

from state.offsets import end_offsets

log = logging.getLogger("seqkeeper.recovery")


class HighwaterConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, with exact partition ends (see module doc)."""

    async def _highwaters(self, partitions: Iterable[TP]) -> Mapping[TP, int]:
        if self.consumer.in_transaction:
            return await super()._highwaters(list(partitions))
        conf = self.app.conf
        transport = cast(faust_aiokafka.Transport, self.transport)
        auth = faust_aiokafka.credentials_to_aiokafka_auth(
            conf.broker_credentials, conf.ssl_context
        )
        ends = await end_offsets(
            faust_aiokafka.server_list(transport.url, transport.default_port),
            [TopicPartition(tp.topic, tp.partition) for tp in partitions],
            timeout=conf.broker_request_timeout,
            client_id=f"{conf.broker_client_id}-highwater",
            **auth,
        )
        return {TP(tp.topic, tp.partition): end for tp, end in ends.items()}


class HighwaterConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return HighwaterConsumerThread(self, loop=self.loop, beacon=self.beacon)


class HighwaterTransport(faust_aiokafka.Transport):
    Consumer = HighwaterConsumer


class App(faust.App):
    """A ``faust.App`` using :class:`HighwaterTransport` for its consumer."""

    def _new_transport(self) -> TransportT:
        return HighwaterTransport(self.conf.broker_consumer, self)


class ReplayCounter:
    """Counts the changelog records a table replays during recovery and logs
    the total after each recovery (``replayed N changelog records``), so a
    restart on intact local state can be told from a rebuild."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.replayed = 0

    async def on_changelog_event(self, event: Any) -> None:
        self.replayed += 1

    async def on_recover(self) -> None:
        log.info("table %s: replayed %d changelog records", self.name, self.replayed)


def raw_table(app: faust.App, name: str, partitions: int, **kwargs: Any) -> Any:
    """A changelogged table of raw bytes keys and values (codecs are ours)."""
    counter = ReplayCounter(name)
    table: Any = app.Table(
        name,
        key_type=bytes,
        value_type=bytes,
        partitions=partitions,
        on_changelog_event=counter.on_changelog_event,
        on_recover=counter.on_recover,
        **kwargs,
    )
    # Faust derives a table's serializers from its types ("json" for bytes);
    # its store and changelog topic are created lazily, after this.
    table.key_serializer = table.value_serializer = "raw"
    return table
