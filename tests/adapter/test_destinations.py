"""The reply-topic check's retries and memory (seqkeeper.adapter.destinations),
against a client whose answers the test writes (the requests themselves run
against real brokers in tests/integration/test_reply_topics.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.produce import ProduceRequest

from seqkeeper.adapter.destinations import ATTEMPTS, RECHECK, Destinations


class Answer:
    def __init__(self, doc: dict[str, Any], topics: Any = ()) -> None:
        self.doc, self.topics = doc, topics

    def to_object(self) -> dict[str, Any]:
        return self.doc


class Client:
    """Metadata answers ``codes`` in turn (the last one again and again);
    a Produce answers ``produce_code``."""

    def __init__(self, codes: list[int | Exception], produce_code: int = 87) -> None:
        self.codes, self.produce_code = codes, produce_code
        self.metadata = 0
        self.produced = 0

    def get_random_node(self) -> int:
        return 1

    async def send(self, node: int, request: Any) -> Answer:
        if isinstance(request, ProduceRequest):
            self.produced += 1
            return Answer({}, [("t", [(0, self.produce_code)])])
        code = self.codes[min(self.metadata, len(self.codes) - 1)]
        self.metadata += 1
        if isinstance(code, Exception):
            raise code
        parts = [{"partition": 0, "leader": 1}] if code == 0 else []
        return Answer({"topics": [{"topic": "t", "error_code": code, "partitions": parts}]})


def checker(client: Client) -> tuple[Destinations, list[float]]:
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    return Destinations(lambda: client, clock=lambda: now[0], sleep=sleep), now  # type: ignore[arg-type, return-value]


def test_a_missing_topic_is_asked_a_few_times_then_remembered() -> None:
    client = Client([3])
    destinations, now = checker(client)
    problem = asyncio.run(destinations.problem("t"))
    assert problem is not None and "UNKNOWN_TOPIC_OR_PARTITION" in problem
    assert client.metadata == ATTEMPTS and now[0] < 2.0  # bounded: about 2 s
    assert asyncio.run(destinations.problem("t")) == problem and client.metadata == ATTEMPTS
    now[0] += RECHECK
    client.codes = [0]  # created meanwhile: asked once again, and then it takes writes
    assert asyncio.run(destinations.problem("t")) is None
    assert (client.metadata, client.produced) == (ATTEMPTS + 1, 1)


def test_a_topic_being_created_takes_the_writes_once_it_has_a_leader() -> None:
    client = Client([5, 3, 0])
    destinations, _ = checker(client)
    assert asyncio.run(destinations.problem("t")) is None
    assert client.metadata == 3


def test_a_topic_without_write_is_refused_and_one_that_takes_it_is_asked_once() -> None:
    denied = Client([0], produce_code=29)
    destinations, _ = checker(denied)
    assert "may not Write" in (asyncio.run(destinations.problem("t")) or "")
    fine = Client([0])
    destinations, now = checker(fine)
    for _ in range(3):
        assert asyncio.run(destinations.problem("t")) is None
        now[0] += RECHECK
    assert (fine.metadata, fine.produced) == (1, 1)


def test_no_answer_is_no_refusal_and_is_not_remembered() -> None:
    client = Client([KafkaConnectionError()])
    destinations, _ = checker(client)
    assert asyncio.run(destinations.problem("t")) is None
    assert "t" not in destinations.known
