"""Whether a topic that input named takes this worker's writes, asked before
anything is produced to it (a command's ``replyTo``:
:attr:`~seqkeeper.runtime.protocol.Batch.addressed`).

Produced blindly, a record for a topic that does not exist waits for the
topic's metadata until aiokafka's request timeout and then fails the whole
outbox cycle; one for a topic the worker may not write fails it at once;
under exactly-once either aborts the transaction that carries the cycle's
state as well. Each would hold back every other command, and come back after
a restart. So the runtime asks first, without writing: a Metadata request
for the topic (auto-creation allowed, as the producer's own metadata request
allows it: a cluster that creates topics on demand creates this one), asked
again while the broker says the topic is missing or has no leader yet (it
may be being created), at most :data:`ATTEMPTS` times over about 2 s; then a
Produce with no record batch to a partition's leader, which the broker
authorizes (Write) and refuses as empty, appending nothing
(:func:`~seqkeeper.adapter.authorized_operations.may_write`).

Answers are remembered: a topic that takes the writes, for the worker's life
(a topic deleted or an ACL revoked afterwards fails the cycle as before, and
a restart asks again); one that does not, for :data:`RECHECK` seconds, then
it is asked once more. A failure to ask (no connection, no answer in
:data:`ASK_TIMEOUT`) says nothing about the topic: the record is produced as
it would have been.

Private members: none (the producer's ``client`` is public in aiokafka).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from seqkeeper.adapter.authorized_operations import (
    INVALID_TOPIC_EXCEPTION,
    LEADER_NOT_AVAILABLE,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    may_write,
)

log = logging.getLogger("seqkeeper.destinations")

#: Metadata requests for a topic first seen, while it is missing or has no leader.
ATTEMPTS = 4
#: Seconds before the second request, doubled for each next one (0.25 + 0.5 + 1).
BACKOFF = 0.25
#: Seconds a topic that took no writes is remembered so before it is asked again.
RECHECK = 30.0
#: Seconds one request may take before the question counts as not answered.
ASK_TIMEOUT = 10.0

#: Answers that may change soon: the topic is being created, or elected a leader.
PASSING = {UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE}
#: What a refusal says, by Kafka error code.
ANSWERS = {
    UNKNOWN_TOPIC_OR_PARTITION: "UNKNOWN_TOPIC_OR_PARTITION: the topic does not exist "
    "(and the cluster does not create topics on demand)",
    LEADER_NOT_AVAILABLE: "LEADER_NOT_AVAILABLE: the topic has no leader",
    INVALID_TOPIC_EXCEPTION: "INVALID_TOPIC_EXCEPTION: the broker refuses the name",
    TOPIC_AUTHORIZATION_FAILED: "TOPIC_AUTHORIZATION_FAILED: the worker may not see it "
    "(no Describe; or it does not exist and the worker may not Create it)",
}
NOT_WRITABLE = "TOPIC_AUTHORIZATION_FAILED: the worker may not Write to it"


class Destinations:
    """Asks whether topics take this worker's writes (see the module), over
    the connections of ``client()`` (the started producer's)."""

    def __init__(
        self,
        client: Callable[[], AIOKafkaClient],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.client = client
        self.clock = clock
        self.sleep = sleep
        #: topic -> (what the broker said was wrong, or None; until when it holds)
        self.known: dict[str, tuple[str | None, float]] = {}

    async def problem(self, topic: str) -> str | None:
        """Why ``topic`` does not take this worker's writes (the broker's
        answer), or ``None``: it does, or the broker could not be asked."""
        known = self.known.get(topic)
        if known is not None:
            problem, until = known
            if problem is None or self.clock() < until:
                return problem
        try:
            problem = await self._ask(topic, 1 if known is not None else ATTEMPTS)
        except (KafkaError, OSError, TimeoutError) as error:
            log.warning("could not ask whether topic %r takes replies (%r)", topic, error)
            return None
        self.known[topic] = (problem, self.clock() + RECHECK)
        return problem

    async def _ask(self, topic: str, attempts: int) -> str | None:
        client = self.client()
        code = UNKNOWN_TOPIC_OR_PARTITION
        for attempt in range(attempts):
            if attempt:
                await self.sleep(BACKOFF * 2 ** (attempt - 1))
            request = MetadataRequest([topic], allow_auto_topic_creation=True)
            answer: Any = await asyncio.wait_for(
                client.send(client.get_random_node(), request), ASK_TIMEOUT
            )
            found = [t for t in answer.to_object()["topics"] if t["topic"] == topic]
            code = found[0]["error_code"] if found else UNKNOWN_TOPIC_OR_PARTITION
            if code == 0:
                leaders = sorted(
                    (p["partition"], p["leader"])
                    for p in found[0]["partitions"]
                    if p["leader"] >= 0
                )
                if not leaders:
                    code = LEADER_NOT_AVAILABLE
                    continue
                partition, leader = leaders[0]
                writable = await asyncio.wait_for(
                    may_write(client, leader, topic, partition), ASK_TIMEOUT
                )
                return None if writable else NOT_WRITABLE
            if code not in PASSING:
                break
        return ANSWERS.get(code, f"error code {code}")
