"""The Faust app seqkeeper runs: Faust's, with this package's transport and
table manager, and the hooks the shell installs."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Any, cast

import faust
from faust.types.transports import TransportT

from seqkeeper.adapter.destinations import Destinations
from seqkeeper.adapter.producer import BatchProducer
from seqkeeper.adapter.tables import TableManager
from seqkeeper.adapter.transport import Transport
from seqkeeper.security import ClientSecurity


class App(faust.App):
    """A ``faust.App`` with exact partition ends (:class:`~seqkeeper.adapter.transport.Transport`)
    and a recovery that loses no input (:class:`SeekFirstRecovery`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("TableManager", TableManager)
        super().__init__(*args, **kwargs)
        #: Awaited before every offset commit (see :mod:`seqkeeper.adapter.commit`).
        self.before_commit: list[Callable[[], Awaitable[None]]] = []
        #: Awaited at a graceful stop, before the tables close their RocksDB.
        self.before_tables_close: list[Callable[[], Awaitable[None]]] = []
        #: Called when a rebalance reaches the tables, before they close or
        #: recover a partition's RocksDB.
        self.before_rebalance: list[Callable[[], None]] = []
        #: Awaited with the new assignment after ``before_rebalance``, before
        #: any changelog or committed offset is read.
        self.before_recovery: list[Callable[[set[Any]], Awaitable[None]]] = []
        #: Called once a rebalance opened the assigned partitions' RocksDB,
        #: as their recovery starts.
        self.after_tables_open: list[Callable[[], None]] = []
        #: Exactly-once: the consumer reads committed records only, and the
        #: runtime commits the input offsets in its transactions, never
        #: through the consumer (:mod:`seqkeeper.adapter.commit`).
        self.exactly_once = False
        #: A check of the local state, running in a thread while the worker
        #: starts; tables open their RocksDB only after it is done.
        self.local_state_check: concurrent.futures.Future[None] | None = None
        #: Static group membership id (None: dynamic membership).
        self.group_instance_id: str | None = None
        #: The input consumer's fetch wait (None: Faust's 1500 ms).
        self.fetch_max_wait_ms: int | None = None
        #: How this app's clients connect (TLS, SASL), for the clients this
        #: package creates beside Faust's (None: the process default).
        self.client_security: ClientSecurity | None = None
        #: Topics consumed as fetched batches: topic name -> channel.
        self.batch_sources: dict[str, Any] = {}
        #: Changelog records applied to the tables' local state since the
        #: worker started, by the role of their partition: ``active`` (a
        #: restore) or ``standby`` (a standby replica kept up to date); see
        #: :class:`~seqkeeper.adapter.tables.ReplayCounter`.
        self.changelog_replayed: dict[str, int] = {"active": 0, "standby": 0}
        #: Record batches through Faust's own aiokafka producer.
        self.batch_producer = BatchProducer(lambda: cast(Any, self.producer)._ensure_producer())
        #: Whether topics input names (replies) take this app's writes, asked
        #: over Faust's producer's connections.
        self.destinations = Destinations(lambda: cast(Any, self.producer)._ensure_producer().client)

    def _new_transport(self) -> TransportT:
        return Transport(self.conf.broker_consumer, self)
