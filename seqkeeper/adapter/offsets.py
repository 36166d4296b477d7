"""Exact partition end offsets, right on Apache Kafka and on the embedded broker.

Why this module exists
----------------------
Kafka has two ways to learn where a partition ends: the ListOffsets request
(``consumer.end_offsets()``) and the *high watermark* carried in every Fetch
response. On Apache Kafka both agree. On the embedded broker (Tansu 0.6)
ListOffsets(latest) answers with the **first offset of the partition's last
record batch** when that batch holds more than one record, so it can be short
by up to a batch. Faust's changelog recovery compares its persisted offset
with that number and crashes (``ConsistencyError: persisted offset ... is
higher than the last offset``); a reader that plans ``[earliest, end)``
silently misses the tail.

The fetch high watermark is right on both brokers, so we ask for it: seek a
private, group-less consumer to one record before the reported end (so the
fetch returns at once with data if the partition has any), fetch once, and
read the high watermark of every partition from the response. On Apache
Kafka the answer equals ``end_offsets()``; on Tansu it is the true end. The
cost is one ListOffsets plus one Fetch round trip per call: we only use it
where an exact end matters (recovery, verification, batch reads), never per
message.

``tests/integration/test_broker_deviations.py`` pins the deviation itself so
that a broker that fixes it is noticed.

Committed ends, for exactly-once
--------------------------------
A partition written in transactions does not end with a record: every
transaction leaves a commit or abort marker, which takes an offset and is
never delivered, and an aborted transaction leaves records no read_committed
reader sees. A bound "the last offset before the end" is then never reached
by the last record applied (Faust's recovery waits for exactly that), and a
local offset of our own last record, compared with it, can look too high.
:func:`committed_ends` answers with 1 + the offset of the last record a
read_committed reader delivers (0 when there is none), found by reading the
tail of the partition backwards in doubling windows: normally the tail is
one transaction's records and a marker, so the first, small window holds
the answer; a long run of aborted records costs a few more fetches. The
last stable offset of a read_committed ListOffsets bounds the read (records
of an open transaction past it are not decided yet); the fetch's own last
stable offset can only raise it, which matters on the embedded broker,
whose ListOffsets is short as above and which has no transactions (there
the answer equals :func:`end_offsets`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Container, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from seqkeeper.security import ClientSecurity, kafka_options


class EndOffsetTimeout(RuntimeError):
    """The broker did not report a high watermark in time."""


def _time_left(
    loop: asyncio.AbstractEventLoop,
    deadline: float,
    timeout: float,
    what: str,
    tps: list[TopicPartition],
    found: Container[TopicPartition],
) -> float:
    """Seconds left before ``deadline``; :class:`EndOffsetTimeout` naming the
    partitions not ``found`` when none are."""
    remaining = deadline - loop.time()
    if remaining <= 0:
        missing = sorted(str(tp) for tp in tps if tp not in found)
        raise EndOffsetTimeout(
            f"no {what} for {', '.join(missing)} within {timeout}s; "
            "is the broker reachable and the partition led by a live broker?"
        )
    return remaining


async def high_watermarks(
    consumer: AIOKafkaConsumer,
    partitions: Iterable[TopicPartition],
    timeout: float = 30.0,
) -> dict[TopicPartition, int]:
    """Exact end offsets (the next offset to be written) of ``partitions``.

    ``consumer`` must be started, have no group and nothing assigned; this
    function assigns ``partitions`` to it. Prefer :func:`end_offsets`, which
    owns its consumer.
    """
    tps = list(dict.fromkeys(partitions))
    if not tps:
        return {}
    consumer.assign(tps)
    begin = await consumer.beginning_offsets(tps)
    reported = await consumer.end_offsets(tps)
    for tp in tps:
        # One record before the reported end: a non-empty partition answers
        # the fetch immediately, with records, instead of after fetch_max_wait.
        consumer.seek(tp, max(begin[tp], reported[tp] - 1))
    result: dict[TopicPartition, int] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(result) < len(tps):
        remaining = _time_left(loop, deadline, timeout, "high watermark", tps, result)
        await consumer.getmany(
            *[tp for tp in tps if tp not in result], timeout_ms=int(min(remaining, 0.5) * 1000)
        )
        for tp in tps:
            hw = consumer.highwater(tp)
            if hw is not None and tp not in result:
                # Never below what ListOffsets said: a high watermark can
                # only be behind it on a stale replica, and then the larger
                # value is the one that is true.
                result[tp] = max(hw, reported[tp])
    return result


async def read_ends(
    consumer: AIOKafkaConsumer,
    partitions: Iterable[TopicPartition],
    isolation: str,
    timeout: float = 30.0,
) -> dict[TopicPartition, int]:
    """Where a reader of ``isolation`` stops in each of ``partitions``: the
    exact end (:func:`high_watermarks`) or, read_committed, the last stable
    offset below it. A read_committed reader never gets past the first
    record of an open transaction, so reading "to the end" means reading to
    the last stable offset; waiting for the high watermark would wait for
    that transaction to end. ``consumer``: as for :func:`high_watermarks`,
    and of the same ``isolation`` (its ListOffsets answers with the last
    stable offset then).

    The fetch's own last stable offset can only raise ListOffsets' answer:
    the embedded broker, which has no transactions (so every record is
    stable), answers ListOffsets short (see the module docstring) and its
    fetch exactly."""
    tps = list(dict.fromkeys(partitions))
    ends = await high_watermarks(consumer, tps, timeout)
    if isolation == "read_committed" and tps:
        listed = await consumer.end_offsets(tps)
        for tp in tps:
            fetched = consumer.last_stable_offset(tp)
            stable = max(listed[tp], fetched if fetched is not None else -1)
            ends[tp] = min(ends[tp], stable)
    return ends


async def end_offsets(
    bootstrap_servers: str | list[str],
    partitions: Iterable[TopicPartition],
    timeout: float = 30.0,
    security: ClientSecurity | None = None,
    **consumer_kwargs: Any,
) -> dict[TopicPartition, int]:
    """Exact end offsets of ``partitions`` through a short-lived consumer
    (``security``: how it connects; None: the process default)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
        max_partition_fetch_bytes=1024,
        **kafka_options(security),
        **consumer_kwargs,
    )
    try:
        await consumer.start()
        return await high_watermarks(consumer, partitions, timeout)
    finally:
        await consumer.stop()


async def partitions_of(consumer: AIOKafkaConsumer, topic: str, timeout: float = 30.0) -> set[int]:
    """The partition numbers of ``topic`` from a fresh metadata answer (empty
    if the topic does not exist). ``consumer`` must be started.

    Not ``consumer.partitions_for_topic``: the consumer's cache knows only
    the topics of its bootstrap request (which Apache Kafka answers with none,
    the embedded broker with all) and those it subscribed to or was
    assigned, and ``consumer.topics()`` asks for every topic but keeps the
    answer to itself (aiokafka 0.14).

    A metadata request that no broker answers is asked again for up to
    ``timeout`` seconds: right after a pause (a frozen broker, a controller
    failover) Apache Kafka can answer with no live broker for a moment."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.1
    while True:
        try:
            cluster = await consumer._client.fetch_all_metadata()
            return set(cluster.partitions_for_topic(topic) or ())
        except KafkaError:
            if loop.time() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


def as_topic_partitions(topic: str, partitions: int | Iterable[int]) -> list[TopicPartition]:
    """``TopicPartition`` objects for a topic's partitions (a count or numbers)."""
    numbers = range(partitions) if isinstance(partitions, int) else partitions
    return [TopicPartition(topic, p) for p in numbers]


#: Records read back from a partition's end first: a transaction's records
#: and its marker normally fit; the window doubles while it holds no record.
_FIRST_WINDOW = 16


async def committed_ends(
    bootstrap_servers: str | list[str],
    partitions: Iterable[TopicPartition],
    timeout: float = 30.0,
    security: ClientSecurity | None = None,
    **consumer_kwargs: Any,
) -> dict[TopicPartition, int]:
    """1 + the offset of the last record of each of ``partitions`` that a
    read_committed reader sees (0 if none), through a short-lived consumer.
    Control markers and aborted records are not records here: this is where
    a reader of the committed data stops (see the module docstring)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        isolation_level="read_committed",
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
        **kafka_options(security),
        **consumer_kwargs,
    )
    try:
        await consumer.start()
        return await _committed_ends(consumer, partitions, timeout)
    finally:
        await consumer.stop()


async def _committed_ends(
    consumer: AIOKafkaConsumer, partitions: Iterable[TopicPartition], timeout: float
) -> dict[TopicPartition, int]:
    tps = list(dict.fromkeys(partitions))
    if not tps:
        return {}
    consumer.assign(tps)
    begin = await consumer.beginning_offsets(tps)
    # The last stable offset: read_committed ListOffsets answers with it.
    upper = dict(await consumer.end_offsets(tps))
    window = dict.fromkeys(tps, _FIRST_WINDOW)
    start = {tp: max(begin[tp], upper[tp] - _FIRST_WINDOW) for tp in tps}
    # Until a fetch answered for a partition, its end may still be raised by
    # the fetch's last stable offset (the embedded broker's short ListOffsets).
    unconfirmed = set(tps)
    last: dict[TopicPartition, int] = {}
    result: dict[TopicPartition, int] = {}
    for tp in tps:
        consumer.seek(tp, start[tp])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(result) < len(tps):
        remaining = _time_left(loop, deadline, timeout, "committed end", tps, result)
        reading = [tp for tp in tps if tp not in result]
        # Short waits: a fetch of markers and aborted records only moves the
        # position, and getmany keeps waiting for records until its timeout.
        fetched = await consumer.getmany(*reading, timeout_ms=int(min(remaining, 0.02) * 1000))
        for tp, records in fetched.items():
            if records:
                last[tp] = max(last.get(tp, -1), records[-1].offset)
        for tp in reading:
            if tp in unconfirmed:
                lso = consumer.last_stable_offset(tp)
                if lso is None:
                    continue
                upper[tp] = max(upper[tp], lso)
                unconfirmed.discard(tp)
            if await consumer.position(tp) < upper[tp]:
                continue
            if tp in last or start[tp] <= begin[tp]:
                result[tp] = last.get(tp, -1) + 1
                consumer.pause(tp)
                continue
            # Nothing committed in [start, upper): look further back.
            window[tp] *= 2
            upper[tp] = start[tp]
            start[tp] = max(begin[tp], upper[tp] - window[tp])
            consumer.seek(tp, start[tp])
    return result
