"""The commit hook: the app's ``before_commit`` hooks run before every
offset commit (faust-streaming 0.15.3, ``Consumer._commit_offsets``).
In exactly-once the runtime's transactions commit the offsets instead, and
:func:`committed` tells Faust.

The hooks make the state and outputs of everything processed durable, so
the commit itself need not flush the whole producer.

Private members: ``Consumer._commit``, ``._committed_offset`` (Faust).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP


class CommitHookConsumer(faust_aiokafka.Consumer):
    """Faust's consumer, running ``App.before_commit`` before each commit."""

    async def _commit_offsets(
        self, offsets: Mapping[TP, int], start_new_transaction: bool = True
    ) -> bool:
        hooks = getattr(self.app, "before_commit", ())
        for hook in hooks:
            await hook()
        if getattr(self.app, "exactly_once", False):
            # The hooks committed the offsets in the transactions of the
            # writes below them (:func:`committed`). A consumer commit would
            # still be accepted by the broker, fenced by nothing: never.
            return False
        if not hooks or self.in_transaction:
            return await super()._commit_offsets(offsets, start_new_transaction)
        # Faust's version first flushes the whole producer, which under
        # continuous load waits until its buffer happens to be empty: commits
        # fall far behind their interval, and a crash replays far more than
        # needed. The hooks already waited for exactly the writes of
        # everything below ``offsets``; the rest is Faust's own.
        assignment = self.assignment()
        committable = {tp: offset for tp, offset in offsets.items() if tp in assignment}
        if not committable:
            return False
        did_commit = bool(await self._commit(committable))
        if did_commit:
            self.app.tables.on_commit(committable)
        self._committed_offset.update(committable)
        self.app.monitor.on_tp_commit(committable)
        return did_commit


def committed(app: Any, topic: str, positions: Mapping[int, int]) -> None:
    """Exactly-once: a transaction committed ``topic``'s input ``positions``
    (partition -> next offset); Faust's bookkeeping learns it as it would
    from its own commit."""
    tps = {TP(topic, partition): offset for partition, offset in positions.items()}
    consumer = app.consumer
    assignment = consumer.assignment()
    mine = {tp: offset for tp, offset in tps.items() if tp in assignment}
    if not mine:
        return
    app.tables.on_commit(mine)
    consumer._committed_offset.update(mine)
    app.monitor.on_tp_commit(mine)
