"""Fetched records of the active partitions, none lost (faust-streaming
0.15.3, ``Consumer._getmany``).

Private members: ``Consumer._active_partitions``, ``._thread`` (Faust).
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP


class SnapshotGetmanyConsumer(faust_aiokafka.Consumer):
    """Faust's consumer whose fetch sees the active partitions as they were
    when it started."""

    async def _getmany(self, active_partitions: set[TP] | None, timeout: float) -> Any:
        """Fetched records of the active partitions, none of them lost.

        Faust hands its *live* set of active partitions to the consumer
        thread, where aiokafka reads it whenever records arrive, up to
        ``timeout`` later, and returns every partition's records when the
        set is empty. At the end of a recovery the set is empty for a moment
        (changelogs paused, input not yet resumed), right after the input
        partitions were sought: aiokafka returned the input records, Faust's
        ``getmany`` dropped them as not active, and nothing read them again
        (aiokafka's position had moved on): a worker that rebuilt its state
        and then never processed its input (tests/integration/test_worker.py).

        Here aiokafka gets a copy of the set as it is when the fetch starts,
        and records of a partition that stopped being active meanwhile are
        put back: the partition is sought to its first returned record.
        """
        snapshot = None if active_partitions is None else set(active_partitions)
        if snapshot is not None and not snapshot:
            return {}
        records = dict(await super()._getmany(snapshot, timeout))
        live = self._active_partitions
        if records and live is not None:
            assigned = self.assignment()
            for tp in [tp for tp in records if tp not in live]:
                first = records.pop(tp)[0].offset
                if tp in assigned:
                    self._thread.seek(tp, first)
                    self.log.info("%s paused while fetched: read again from %s", tp, first)
        return records
