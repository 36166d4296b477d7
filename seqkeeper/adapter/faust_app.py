"""The Faust app seqkeeper runs: Faust's, with this package's transport and
table manager, built with the runtime's options and running its lifecycle
(:mod:`seqkeeper.adapter.lifecycle`)."""

from __future__ import annotations

from typing import Any, cast

from faust.types.transports import TransportT

from seqkeeper.adapter.destinations import Destinations
from seqkeeper.adapter.lifecycle import LifecycleApp
from seqkeeper.adapter.producer import BatchProducer
from seqkeeper.adapter.tables import TableManager
from seqkeeper.adapter.transport import Transport


class App(LifecycleApp):
    """A ``faust.App`` with exact partition ends (:class:`~seqkeeper.adapter.transport.Transport`)
    and a recovery that loses no input (:class:`SeekFirstRecovery`).
    ``options``: :class:`~seqkeeper.adapter.lifecycle.WorkerOptions`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("TableManager", TableManager)
        super().__init__(*args, **kwargs)
        #: Record batches through Faust's own aiokafka producer.
        self.batch_producer = BatchProducer(lambda: cast(Any, self.producer)._ensure_producer())
        #: Whether topics input names (replies) take this app's writes, asked
        #: over Faust's producer's connections.
        self.destinations = Destinations(lambda: cast(Any, self.producer)._ensure_producer().client)

    def _new_transport(self) -> TransportT:
        return Transport(self.conf.broker_consumer, self)
