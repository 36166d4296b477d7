"""Exact partition ends for Faust's recovery (faust-streaming 0.15.3,
``AIOKafkaConsumerThread._highwaters``).

Faust's recovery asks the consumer for each changelog partition's
"highwater" (``_highwaters`` -> ``end_offsets()``, a ListOffsets request)
and refuses to start when the offset persisted in local RocksDB is above
it. On the embedded broker ListOffsets is short whenever the last record
batch of a partition holds several records (:mod:`seqkeeper.adapter.offsets`),
so a worker restarted on its own RocksDB state would crash with
``ConsistencyError``, or stop replaying the changelog early. This override
answers with the fetch high watermark, which is exact on the embedded broker
and equal to ``end_offsets()`` on Apache Kafka: correct on both, and no
change on Kafka.

seqkeeper's exactly-once (the app's options' ``guarantee``) writes
every changelog record in a transaction, so a changelog partition ends with
a commit or abort marker, and aborted records may precede it. Neither is
ever delivered, so recovery, which waits for the last record applied to
reach "highwater - 1", would never end on the high watermark (Faust's own
fallback, ``detect_aborted_tx``, runs only in Faust's transaction mode), and
the offset persisted in RocksDB (our last changelog record) could be taken
for one past the end. There the answer is
:func:`seqkeeper.adapter.offsets.committed_ends`: 1 + the offset of the last
committed record, read as read_committed.

Faust's own transactions (``processing_guarantee="exactly_once"``, the
consumer's ``in_transaction``) keep Faust's own path.

Private members: none beyond the overridden method.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from aiokafka import TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from seqkeeper.adapter.lifecycle import lifecycle_app
from seqkeeper.adapter.offsets import committed_ends, end_offsets
from seqkeeper.settings import Guarantee


class HighwaterThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread with exact partition ends (committed ends in
    exactly-once)."""

    async def _highwaters(self, partitions: Iterable[TP]) -> Mapping[TP, int]:
        if self.consumer.in_transaction:
            return await super()._highwaters(list(partitions))
        conf = self.app.conf
        options = lifecycle_app(self.app).options
        transport = cast(faust_aiokafka.Transport, self.transport)
        # Exactly-once: the changelog ends with a marker.
        exactly_once = options.guarantee is Guarantee.EXACTLY_ONCE
        ends = await (committed_ends if exactly_once else end_offsets)(
            faust_aiokafka.server_list(transport.url, transport.default_port),
            [TopicPartition(tp.topic, tp.partition) for tp in partitions],
            timeout=conf.broker_request_timeout,
            # how the app's own clients connect (seqkeeper.runtime.wiring.make_app)
            security=options.client_security,
            client_id=f"{conf.broker_client_id}-highwater",
        )
        return {TP(tp.topic, tp.partition): end for tp, end in ends.items()}
