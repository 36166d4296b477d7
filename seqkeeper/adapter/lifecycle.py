"""What passes between the runtime and the Faust app it runs: the options
the app is built with (:class:`WorkerOptions`), the runtime's answers to the
app's turning points (:class:`Lifecycle`), and the app they belong to
(:class:`LifecycleApp`), which the overrides reach through the ``app`` Faust
hands its consumer, thread and table manager (:func:`lifecycle_app`).

The turning points, in the order a worker meets them:

1. a rebalance reaches the tables: :meth:`Lifecycle.rebalancing`, then
   :meth:`Lifecycle.recovering` with the new assignment, before any
   changelog or committed offset is read;
2. the assigned partitions' RocksDB are open: :meth:`Lifecycle.tables_opened`;
3. their recovery completed: :meth:`Lifecycle.restored`;
4. before every input offset commit: :meth:`Lifecycle.before_commit`;
5. a graceful stop, before the tables close: :meth:`Lifecycle.before_close`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Set
from dataclasses import dataclass
from typing import Any, Protocol

import faust
from faust.types import TP, AppT

from seqkeeper.security import ClientSecurity
from seqkeeper.settings import Guarantee


@dataclass(frozen=True)
class WorkerOptions:
    """How the app's own clients run, beyond Faust's settings."""

    #: exactly-once: the consumer reads committed records only, changelogs
    #: end with a transaction marker, and the runtime commits the input
    #: offsets in its transactions, never through the consumer
    #: (:mod:`seqkeeper.adapter.commit`)
    guarantee: Guarantee = Guarantee.AT_LEAST_ONCE
    #: static group membership id (None: dynamic membership)
    group_instance_id: str | None = None
    #: the input consumer's fetch wait (None: Faust's 1500 ms)
    fetch_max_wait_ms: int | None = None
    #: how the clients this package creates beside Faust's connect (TLS,
    #: SASL; None: the process default)
    client_security: ClientSecurity | None = None


class Lifecycle(Protocol):
    """The runtime's part at each of the app's turning points (see the
    module docstring for their order)."""

    def rebalancing(self) -> None:
        """A rebalance reached the tables, before they close or recover a
        partition's RocksDB."""

    async def recovering(self, assigned: Set[TP]) -> None:
        """After :meth:`rebalancing`, with the new assignment, before any
        changelog or committed offset is read."""

    def tables_opened(self) -> None:
        """The rebalance opened the assigned partitions' RocksDB, as their
        recovery starts."""

    async def restored(self) -> None:
        """A table's recovery completed (Faust's ``on_recover``)."""

    async def before_commit(self) -> None:
        """Before every input offset commit: what was processed below it is
        made durable."""

    async def before_close(self) -> None:
        """A graceful stop, before the tables close their RocksDB."""


class Idle:
    """The :class:`Lifecycle` of an app no runtime was installed in: nothing
    at any turning point."""

    def rebalancing(self) -> None:
        return None

    async def recovering(self, assigned: Set[TP]) -> None:
        return None

    def tables_opened(self) -> None:
        return None

    async def restored(self) -> None:
        return None

    async def before_commit(self) -> None:
        return None

    async def before_close(self) -> None:
        return None


class LifecycleApp(faust.App):
    """A ``faust.App`` built with :class:`WorkerOptions`, running a
    :class:`Lifecycle` (:meth:`install`; until then :class:`Idle`)."""

    def __init__(self, *args: Any, options: WorkerOptions | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.options = options if options is not None else WorkerOptions()
        self.lifecycle: Lifecycle = Idle()
        #: A check of the local state, running in a thread while the worker
        #: starts; tables open their RocksDB only after it is done (the
        #: worker starts it once the app is built: :meth:`check_first`).
        self.local_state_check: concurrent.futures.Future[None] | None = None
        #: Topics consumed as fetched batches: topic name -> channel
        #: (:func:`seqkeeper.adapter.batches.batch_source`).
        self.batch_sources: dict[str, Any] = {}
        #: Changelog records applied to the tables' local state since the
        #: worker started, by the role of their partition: ``active`` (a
        #: restore) or ``standby`` (a standby replica kept up to date); see
        #: :class:`~seqkeeper.adapter.tables.ReplayCounter`.
        self.changelog_replayed: dict[str, int] = {"active": 0, "standby": 0}

    def install(self, lifecycle: Lifecycle) -> None:
        """Run ``lifecycle`` at the app's turning points (once, before the
        app starts)."""
        self.lifecycle = lifecycle

    def check_first(self, check: concurrent.futures.Future[None]) -> None:
        """Open no table's RocksDB before ``check`` is done."""
        self.local_state_check = check


def lifecycle_app(app: AppT) -> LifecycleApp:
    """``app`` (as Faust hands it to the consumer, its thread and the table
    manager it built) as the :class:`LifecycleApp` it is: these overrides
    run only in one (:class:`seqkeeper.adapter.faust_app.App`)."""
    if not isinstance(app, LifecycleApp):
        raise TypeError(f"seqkeeper's overrides run in seqkeeper's App, not {type(app).__name__}")
    return app
