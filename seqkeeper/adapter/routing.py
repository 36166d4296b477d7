"""Where a key's state lives: the partition Kafka's default partitioner
chose for it, and the group member that partition is assigned to, as Faust's
assignor publishes it (every member's web URL travels in the assignment's
metadata: ``faust/assignor/partition_assignor.py``). What a state query
needs to answer or redirect (:mod:`seqkeeper.runtime.query_routing`).

Public members only: ``PartitionAssignor.external_topics_metadata`` is the
data ``app.router`` routes by (``Router.external_topic_key_store``), read
here per partition instead of per key, so the runtime can tell a partition
nobody owns (a rebalance) from one that moved.
"""

from __future__ import annotations

from typing import Any

from aiokafka.partitioner import murmur2


def key_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key`` (murmur2
    of its bytes, as the Java client and aiokafka do), of ``partitions``."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


def owners(app: Any, topic: str) -> dict[int, str]:
    """Each assigned partition of ``topic``, by its owner's web URL, from
    the assignment as this worker last received it (stale during a
    rebalance: ``app.rebalancing`` says so)."""
    distribution = app.assignor.external_topics_metadata()
    return {
        partition: str(url)
        for url, topics in distribution.items()
        for partition in topics.get(topic, ())
    }


def own_url(app: Any) -> str:
    """This worker's web URL, as the other members know it."""
    return str(app.conf.canonical_url)
