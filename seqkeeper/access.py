"""What a command (``verify``, ``inspect``, ``compact``, ``replay``, the
command client) will read and write, checked before it reads or writes
anything: a topic it may not use, or that does not exist, is one line
(:class:`~seqkeeper.permissions.PermissionDenied`,
:class:`~seqkeeper.topics.UnknownTopic`) before Spark starts, before a
warehouse run is committed, before a record is sent.

Why ahead, and not from the errors of the reads themselves: Spark reports a
refusal inside its own traceback, after ``compact`` committed the units
read before it; a consumer's refusal comes on a later poll, after the
other topics were read; a producer's after the records before it were
sent. The probes ask without doing (:mod:`seqkeeper.adapter.authorized_operations`):
a Metadata request without auto-creation (Describe, and whether the topic
exists), a Fetch from past the end (Read), a Produce with no records
(Write), a CreateTopics with ``validate_only`` (Create). The worker's own
start-up check is :mod:`seqkeeper.permissions`; the grants named here are
literal (the resource itself), as these commands use a worker's topics by
name.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from seqkeeper.adapter.authorized_operations import (
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    client_of,
    may_read,
    may_write,
    topic_errors,
)
from seqkeeper.permissions import CLUSTER_AUTHORIZATION_FAILED, denied
from seqkeeper.security import kafka_options, surfaced
from seqkeeper.settings import Settings
from seqkeeper.topics import UnknownTopic, create_topics


async def check_topics(
    settings: Settings,
    *,
    reads: Sequence[str] = (),
    writes: Sequence[str] = (),
    optional: Collection[str] = (),
    create: Mapping[str, int] | None = None,
) -> None:
    """Every topic of ``reads`` may be read and every one of ``writes``
    written, as the user of ``settings`` (:func:`~seqkeeper.permissions.principal_of`)
    on its broker; else :class:`~seqkeeper.permissions.PermissionDenied`
    naming the first refusal and its grant.

    A topic that does not exist is :class:`~seqkeeper.topics.UnknownTopic`,
    unless it is ``optional`` (not read, not probed: ``verify``'s late
    topic, a command topic the worker creates) or in ``create`` (topic ->
    partitions): that one is created (replication
    ``SEQKEEPER_REPLICATION``) once Create is known to be allowed; the
    probes then follow, so a topic may be left created, empty, when Write
    on it is refused. A Describe refusal and a missing topic look alike to
    a user without Describe (Kafka hides which): it is named as the Read or
    Write refusal, whose grant implies Describe."""
    create = create or {}
    wanted = list(dict.fromkeys([*reads, *writes]))
    if not wanted:
        return
    bootstrap = settings.broker.bootstrap
    missing: list[str] = []
    with surfaced(bootstrap):  # (a command client has had no connection before)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
        try:
            await admin.start()
            errors = await topic_errors(client_of(admin), wanted)
            for topic in wanted:
                operation = "Read" if topic in reads else "Write"
                code = errors.get(topic, UNKNOWN_TOPIC_OR_PARTITION)
                if code == TOPIC_AUTHORIZATION_FAILED:
                    raise _refused(settings, operation, topic)
                if code == UNKNOWN_TOPIC_OR_PARTITION:
                    if topic in create:
                        missing.append(topic)
                    elif topic not in optional:
                        raise UnknownTopic(
                            f"topic {topic!r} does not exist on {bootstrap}; "
                            "create it or check its name"
                        )
            if missing:
                await _may_create(settings, admin, missing, create)
        finally:
            await admin.close()
        for topic in missing:
            await create_topics(bootstrap, [topic], create[topic], settings.broker.replication)
        await _probe(settings, reads, writes)


def _refused(settings: Settings, operation: str, topic: str, answer: str = "") -> Exception:
    return denied(
        settings,
        operation,
        "topic",
        topic,
        answer or "TOPIC_AUTHORIZATION_FAILED",
        by_prefix=False,
    )


async def _may_create(
    settings: Settings, admin: AIOKafkaAdminClient, topics: list[str], partitions: Mapping[str, int]
) -> None:
    """A CreateTopics with ``validate_only``: it creates nothing."""
    replication = settings.broker.replication
    answer = await admin.create_topics(
        [NewTopic(t, partitions[t], replication) for t in topics], validate_only=True
    )
    refused = {name: code for name, code, *_ in answer.topic_errors}
    for topic in topics:  # (in the order asked, not the answer's)
        code = refused.get(topic)
        if code in (TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED):
            answer_name = (
                "TOPIC_AUTHORIZATION_FAILED"
                if code == TOPIC_AUTHORIZATION_FAILED
                else "CLUSTER_AUTHORIZATION_FAILED"
            )
            raise _refused(settings, "Create", topic, answer_name)


async def _probe(settings: Settings, reads: Sequence[str], writes: Sequence[str]) -> None:
    """Read on partition 0 of each of ``reads``, Write on each of ``writes``
    (ACLs are per topic), at the partition's leader; a topic missing is
    skipped (an optional one)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.broker.bootstrap, **kafka_options())
    try:
        await admin.start()
        client = client_of(admin)
        cluster = await client.fetch_all_metadata()
        for operation, topics, allowed in (("Read", reads, may_read), ("Write", writes, may_write)):
            for topic in topics:
                leader = cluster.leader_for_partition(TopicPartition(topic, 0))
                if leader is None or leader < 0:
                    continue
                if not await allowed(client, leader, topic, 0):
                    raise _refused(settings, operation, topic)
    finally:
        await admin.close()
