"""Topic administration and whole-topic reads with exact end offsets."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code

from seqkeeper.adapter.offsets import high_watermarks, partitions_of, read_ends
from seqkeeper.security import kafka_options


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None


async def create_topics(
    bootstrap: str,
    names: Iterable[str],
    partitions: int,
    replication: int = 1,
    timeout: float = 60.0,
) -> None:
    """Create the topics that do not exist yet, and return once the cluster's
    metadata shows every partition of every one of ``names`` with a leader
    and every new partition is served (:func:`wait_for_replicas`).

    Apache Kafka propagates a new topic from its controller to the brokers'
    metadata caches asynchronously: a client that produces, fetches or asks
    for the topic's partitions before then gets ``UnknownTopicOrPartition``,
    ``NotLeaderForPartition`` or no partitions at all.
    """
    wanted = list(dict.fromkeys(names))
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        new = [NewTopic(n, partitions, replication) for n in wanted if n not in existing]
        if new:
            # aiokafka returns the per-topic errors without raising them: a
            # denied topic would otherwise be waited for until ``timeout``;
            # TOPIC_ALREADY_EXISTS is a racing creator
            answer = await admin.create_topics(new)
            for name, code, *rest in answer.topic_errors:
                if code not in (0, TopicAlreadyExistsError.errno):
                    error = for_code(code)
                    raise TopicsNotCreated(
                        f"the broker at {bootstrap} refused to create topic {name!r}: "
                        f"{getattr(error, 'message', error.__name__)}"
                        f"{': ' + rest[0] if rest and rest[0] else ''}; create it as an admin, "
                        "or grant Create on it"
                    )
        await wait_for_leaders(admin, wanted, timeout)
    finally:
        await admin.close()
    if new:
        await wait_for_replicas([t.name for t in new], bootstrap, timeout)


async def wait_for_replicas(topics: list[str], bootstrap: str, timeout: float) -> None:
    """Until the leader of every partition of ``topics`` answers a ListOffsets.

    A KRaft broker publishes a new partition's leader in its metadata a
    moment before its replica manager serves the partition: a producer that
    comes then gets ``NotLeaderForPartition`` and retries (with a log line
    each time). aiokafka's ``end_offsets`` retries that error by itself."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        **kafka_options(),
        enable_auto_commit=False,
        request_timeout_ms=max(1000, int(timeout * 1000)),
    )
    try:
        await consumer.start()
        tps = [TopicPartition(t, p) for t in topics for p in await partitions_of(consumer, t)]
        await consumer.end_offsets(tps)
    finally:
        await consumer.stop()


class TopicsNotCreated(RuntimeError):
    """The broker refused to create a topic (an ACL, a policy, a bad setting)."""


class TopicsNotReady(RuntimeError):
    """Topics did not show a leader for every partition in time."""


async def wait_for_leaders(admin: AIOKafkaAdminClient, topics: list[str], timeout: float) -> None:
    """Poll the metadata of ``topics`` until every partition has a leader."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.02
    while True:
        pending = not_ready(await admin.describe_topics(topics))
        if not pending:
            return
        if loop.time() >= deadline:
            raise TopicsNotReady(
                f"topics without a leader for every partition after {timeout:.0f}s: "
                + ", ".join(sorted(pending))
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


def not_ready(described: list[dict[str, Any]]) -> set[str]:
    """The topics of a metadata answer that are missing, in error, have no
    partitions, or have a partition without a leader."""
    pending = set()
    for topic in described:
        parts = topic.get("partitions") or []
        if (
            topic.get("error_code", 0) != 0
            or not parts
            or any(p.get("error_code", 0) != 0 or p.get("leader", -1) < 0 for p in parts)
        ):
            pending.add(topic["topic"])
    return pending


class UnknownTopic(LookupError):
    """The topic does not exist on the cluster."""


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """The partitions of ``topic``; raise :class:`UnknownTopic` if it is missing."""
    numbers = await partitions_of(consumer, topic)
    if not numbers:
        raise UnknownTopic(f"topic {topic!r} does not exist; create it or check its name")
    return [TopicPartition(topic, p) for p in sorted(numbers)]


async def end_offsets_of(bootstrap: str, topics: Iterable[str]) -> dict[TopicPartition, int]:
    """Exact end offsets of every partition of ``topics``."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        **kafka_options(),
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
        max_partition_fetch_bytes=1024,
    )
    try:
        await consumer.start()
        tps: list[TopicPartition] = []
        for t in topics:
            tps += await topic_partitions(consumer, t)
        return await high_watermarks(consumer, tps)
    finally:
        await consumer.stop()


async def read_topic(
    bootstrap: str,
    topic: str,
    after: Mapping[int, int] | None = None,
    isolation: str = "read_uncommitted",
) -> list[Record]:
    """Every record of ``topic`` up to its exact end, partition by partition;
    with ``after`` (partition -> offset), only the records from there on.
    ``isolation="read_committed"``: only committed records (a transactional
    writer's outputs), up to the last stable offset."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        **kafka_options(),
        enable_auto_commit=False,
        max_poll_records=10_000,
        fetch_max_wait_ms=20,
        isolation_level=isolation,
    )
    records: list[Record] = []
    try:
        await consumer.start()
        tps = await topic_partitions(consumer, topic)
        todo = await read_ends(consumer, tps, isolation)  # assigns ``tps``
        begin = await consumer.beginning_offsets(tps)
        for tp in tps:
            start = max(begin[tp], (after or {}).get(tp.partition, 0))
            if start >= todo[tp]:
                del todo[tp]
            else:
                consumer.seek(tp, start)
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=1000)
            for tp, msgs in batch.items():
                end = todo.get(tp)
                if end is None:
                    continue
                for m in msgs:
                    if m.offset >= end:
                        break
                    records.append(
                        Record(
                            m.topic,
                            m.partition,
                            m.offset,
                            m.key,
                            m.value,
                            tuple(m.headers or ()),
                            m.timestamp,
                        )
                    )
            # (every partition: one whose tail is a commit marker moves past
            # it with no record)
            for tp, end in list(todo.items()):
                if await consumer.position(tp) >= end:
                    del todo[tp]
                    consumer.pause(tp)
        return records
    finally:
        await consumer.stop()


class TopicCache:
    """Whole-topic reads that fetch only what was appended since the last
    read: polling a verification over large topics costs the new records,
    not the whole topic again (the embedded broker serves reads slowly)."""

    def __init__(self, bootstrap: str, isolation: str = "read_uncommitted") -> None:
        self.bootstrap = bootstrap
        self.isolation = isolation
        self._records: dict[str, list[Record]] = {}
        self._next: dict[str, dict[int, int]] = {}

    async def read(self, topic: str) -> list[Record]:
        """Every record of ``topic`` up to its current end."""
        records = self._records.setdefault(topic, [])
        nxt = self._next.setdefault(topic, {})
        new = await read_topic(self.bootstrap, topic, nxt, self.isolation)
        for r in new:
            nxt[r.partition] = r.offset + 1
        records += new
        return records
