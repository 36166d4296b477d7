"""The commit hook: the app's lifecycle's ``before_commit`` runs before
every offset commit (faust-streaming 0.15.3, ``Consumer._commit_offsets``).
In exactly-once the runtime's transactions commit the offsets instead, and
:func:`committed` tells Faust.

It makes the state and outputs of everything processed durable, so
the commit itself need not flush the whole producer.

Private members: ``Consumer._commit``, ``._committed_offset`` (Faust).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from seqkeeper.adapter.lifecycle import Idle, lifecycle_app
from seqkeeper.settings import Guarantee


class CommitHookConsumer(faust_aiokafka.Consumer):
    """Faust's consumer, running the app's lifecycle's ``before_commit``
    before each commit."""

    async def _commit_offsets(
        self, offsets: Mapping[TP, int], start_new_transaction: bool = True
    ) -> bool:
        app = lifecycle_app(self.app)
        lifecycle = app.lifecycle
        await lifecycle.before_commit()
        if app.options.guarantee is Guarantee.EXACTLY_ONCE:
            # The lifecycle committed the offsets in the transactions of the
            # writes below them (:func:`committed`). A consumer commit would
            # still be accepted by the broker, fenced by nothing: never.
            return False
        if isinstance(lifecycle, Idle) or self.in_transaction:
            return await super()._commit_offsets(offsets, start_new_transaction)
        # Faust's version first flushes the whole producer, which under
        # continuous load waits until its buffer happens to be empty: commits
        # fall far behind their interval, and a crash replays far more than
        # needed. The lifecycle already waited for exactly the writes of
        # everything below ``offsets``; the rest is Faust's own.
        committable = self.assigned(offsets)
        if not committable:
            return False
        did_commit = bool(await self._commit(committable))
        self.learn(committable, did_commit)
        return did_commit

    def assigned(self, offsets: Mapping[TP, int]) -> dict[TP, int]:
        """``offsets`` of the partitions this consumer is assigned."""
        assignment = self.assignment()
        return {tp: offset for tp, offset in offsets.items() if tp in assignment}

    def learn(self, committed: dict[TP, int], did_commit: bool = True) -> None:
        """Faust's bookkeeping of a commit of ``committed``, as its own
        commit does it."""
        if did_commit:
            self.app.tables.on_commit(committed)
        self._committed_offset.update(committed)
        self.app.monitor.on_tp_commit(committed)


def committed(app: Any, topic: str, positions: Mapping[int, int]) -> None:
    """Exactly-once: a transaction committed ``topic``'s input ``positions``
    (partition -> next offset); Faust's bookkeeping learns it as it would
    from its own commit."""
    consumer: CommitHookConsumer = app.consumer
    mine = consumer.assigned({TP(topic, p): offset for p, offset in positions.items()})
    if mine:
        consumer.learn(mine)
