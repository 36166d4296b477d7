"""Where a topic ends, per partition, as its readers see it: under
exactly-once, 1 + the offset of its last committed record (a transaction's
commit or abort marker, and an aborted write, move the end offset without
output); else its end offset."""

from __future__ import annotations

from seqkeeper.adapter.offsets import as_topic_partitions, committed_ends
from seqkeeper.settings import Guarantee, Settings
from seqkeeper.topics import end_offsets_of


def exactly_once(settings: Settings) -> bool:
    """Whether ``settings`` ask the workers for exactly_once."""
    return settings.runtime.processing_guarantee == Guarantee.EXACTLY_ONCE.value


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """``topic``'s end offset per partition (records and markers alike)."""
    got = await end_offsets_of(bootstrap, [topic])
    return {tp.partition: end for tp, end in got.items()}


async def committed_end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Per partition of ``topic`` (``partitions`` of them), 1 + the offset
    of its last record (0: none), as a read_committed reader sees it."""
    got = await committed_ends(bootstrap, as_topic_partitions(topic, partitions))
    return {tp.partition: end for tp, end in got.items()}


async def output_ends(settings: Settings, topic: str) -> dict[int, int]:
    """``topic``'s end per partition as output of workers with ``settings``:
    :func:`committed_end_offsets` under exactly_once, else :func:`end_offsets`."""
    if exactly_once(settings):
        return await committed_end_offsets(
            settings.broker.bootstrap, topic, settings.broker.partitions
        )
    return await end_offsets(settings.broker.bootstrap, topic)
