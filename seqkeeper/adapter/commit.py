"""The commit hook: the app's ``before_commit`` hooks run before every
offset commit (faust-streaming 0.15.3, ``Consumer._commit_offsets``).

The hooks make the state and outputs of everything processed durable, so
the commit itself need not flush the whole producer.

Private members: ``Consumer._commit``, ``._committed_offset`` (Faust).
"""

from __future__ import annotations

from collections.abc import Mapping

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
