"""The consumer and transport an :class:`~seqkeeper.adapter.faust_app.App` runs:
Faust's, with every override of this package composed (each in its own
module, each named there with the upstream code it changes)."""

from __future__ import annotations

from faust.transport.drivers import aiokafka as faust_aiokafka

from seqkeeper.adapter.batches import BatchFetchConsumer
from seqkeeper.adapter.commit import CommitHookConsumer
from seqkeeper.adapter.declare import DeclareExistingTransport
from seqkeeper.adapter.getmany import SnapshotGetmanyConsumer
from seqkeeper.adapter.highwater import HighwaterThread
from seqkeeper.adapter.options import OptionsThread
from seqkeeper.adapter.recovery import PauseUnreadThread


class ConsumerThread(OptionsThread, HighwaterThread, PauseUnreadThread):
    """Faust's consumer thread: consumer options, exact partition ends, and
    pausing the changelogs Faust stops reading."""


class Consumer(CommitHookConsumer, SnapshotGetmanyConsumer, BatchFetchConsumer):
    """Faust's consumer: commit hooks, a fetch that loses no records, and
    batch sources."""

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(DeclareExistingTransport):
    """Faust's transport: our consumer, and topics declared only when missing."""

    Consumer = Consumer
