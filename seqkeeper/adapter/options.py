"""Consumer options Faust does not expose (faust-streaming 0.15.3,
``AIOKafkaConsumerThread._create_worker_consumer``): the fetch wait, static
group membership, read_committed, and the raw records of batch sources.

Private members: ``AIOKafkaConsumer._fetch_max_wait_ms``,
``._group_instance_id``, ``._isolation_level``, ``._key_deserializer``
(aiokafka 0.14), set after Faust built the consumer and before it starts.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

from seqkeeper.adapter.lifecycle import lifecycle_app
from seqkeeper.adapter.records import RawTopics
from seqkeeper.adapter.records import install as install_raw_records
from seqkeeper.settings import Guarantee


class OptionsThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, building its consumer with the app's
    options (:class:`~seqkeeper.adapter.lifecycle.WorkerOptions`: fetch
    wait, static membership, guarantee) and raw records for the app's
    ``batch_sources``."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        app = lifecycle_app(self.app)
        options = app.options
        # Faust fixes fetch_max_wait_ms at 1500. A broker may hold a fetch
        # that long when nothing was there as it arrived (the embedded one
        # does, even when records arrive meanwhile): up to 1.5 s of latency.
        wait = options.fetch_max_wait_ms
        if wait is not None:
            consumer._fetch_max_wait_ms = wait
        # Static membership (KIP-345): a restarted worker with the same
        # instance id takes its place in the group without a rebalance.
        consumer._group_instance_id = options.group_instance_id
        # Exactly-once: neither aborted writes (a fenced or killed worker's)
        # nor open transactions are read, from the changelogs as from the
        # input. Faust reads committed only when its own transactions run.
        if options.guarantee is Guarantee.EXACTLY_ONCE:
            consumer._isolation_level = "read_committed"
        # Batch sources get the fetched records without a ConsumerRecord
        # each (:mod:`seqkeeper.adapter.records`); Faust builds the consumer without a key
        # deserializer, and the fetcher is made at its start, after this.
        sources = app.batch_sources
        if consumer._key_deserializer is None:
            install_raw_records()
            consumer._key_deserializer = RawTopics(sources)  # (live: the app's dict)
        return consumer
