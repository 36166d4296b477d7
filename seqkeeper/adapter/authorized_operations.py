"""Requests that ask the broker what this client may do, without doing it:
the worker's start-up check (:mod:`seqkeeper.permissions`) sends them
before Faust starts, because Faust and aiokafka retry or swallow most
authorization errors (a denied JoinGroup retries, a denied CreateTopics is
logged), and a worker that cannot work then hangs instead of saying why.

Private members: ``_client`` of aiokafka's consumer and admin client
(:func:`client_of`: they expose no other way to send a request).
:class:`DescribeGroupsWithOperations` works around
aiokafka 0.14 declaring ``DescribeGroupsResponse_v2`` as the answer to
``DescribeGroupsRequest_v3``, which drops the ``authorized_operations``
field that v3 adds (KIP-430)."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import GroupAuthorizationFailedError, KafkaError
from aiokafka.protocol.admin import (
    DescribeGroupsRequest_v3,
    DescribeGroupsResponse_v3,
)
from aiokafka.protocol.api import Request
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.produce import ProduceRequest

#: Kafka's ``AclOperation`` codes: bit ``1 << code`` of ``authorized_operations``.
OPERATION_CODES = {"Read": 3, "Write": 4, "Create": 5, "Describe": 8}
#: ``authorized_operations`` when the broker was not asked or does not tell.
OPERATIONS_NOT_TOLD = -(2**31)
#: Kafka's error codes the probes tell apart.
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
INVALID_TOPIC_EXCEPTION = 17
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
INVALID_RECORD = 87


def client_of(kafka: AIOKafkaConsumer | AIOKafkaAdminClient) -> AIOKafkaClient:
    """The connection pool of a started consumer or admin client."""
    client: AIOKafkaClient = kafka._client
    return client


class _DescribeGroupsV3(DescribeGroupsRequest_v3):  # type: ignore[misc]
    RESPONSE_TYPE = DescribeGroupsResponse_v3


class DescribeGroupsWithOperations(Request[_DescribeGroupsV3]):  # type: ignore[misc]
    """DescribeGroups v3 asking for the operations this client may do on each group."""

    API_KEY = 15

    def __init__(self, groups: list[str]) -> None:
        self.groups = groups

    def build(self, request_struct_class: type[_DescribeGroupsV3]) -> _DescribeGroupsV3:
        return request_struct_class(self.groups, True)


async def group_operations(client: AIOKafkaClient, group: str) -> set[str] | None:
    """The operations of :data:`OPERATION_CODES` this client may do on
    consumer group ``group``; ``None`` when it may not even Describe it.
    A broker that does not tell (no DescribeGroups v3, no authorizer, as
    the embedded broker) gets them all: the check is to name a denial
    early, never to refuse a broker Faust would work with."""
    try:
        node = await client.coordinator_lookup(0, group)  # (FindCoordinator: Describe)
        answer: Any = await client.send(node, DescribeGroupsWithOperations([group]))
    except GroupAuthorizationFailedError:
        return None
    except KafkaError:
        return set(OPERATION_CODES)
    [described] = answer.groups
    error, ops = described[0], described[-1]
    if error == GROUP_AUTHORIZATION_FAILED:
        return None
    if ops == OPERATIONS_NOT_TOLD:
        return set(OPERATION_CODES)
    return {name for name, code in OPERATION_CODES.items() if ops & (1 << code)}


async def topic_errors(client: AIOKafkaClient, topics: list[str]) -> dict[str, int]:
    """Each of ``topics`` and its error code in a Metadata answer (0: it
    exists and may be described; ``UNKNOWN_TOPIC_OR_PARTITION``: it does
    not exist; ``TOPIC_AUTHORIZATION_FAILED``: it may not be described).

    Asked with ``allow_auto_topic_creation=False``, which aiokafka leaves
    ``True`` by default: the broker then answers a missing topic with
    TOPIC_AUTHORIZATION_FAILED to a user without Create, whether or not it
    may describe it, and a missing topic cannot be told from a hidden one."""
    node = client.get_random_node()
    answer: Any = await client.send(node, MetadataRequest(topics, allow_auto_topic_creation=False))
    return {t["topic"]: t["error_code"] for t in answer.to_object()["topics"]}


async def may_write(client: AIOKafkaClient, leader: int, topic: str, partition: int) -> bool:
    """Whether this client may Write to ``topic``: a Produce request to the
    partition's ``leader`` with no record batch, which the broker authorizes
    first and then refuses as ``INVALID_RECORD``
    (``ProduceRequest.validateRecords``), so nothing is ever appended. Any
    other failure of the probe (a broker that handles it otherwise) is not
    a denial: Faust's own writes report it."""
    try:
        answer: Any = await client.send(
            leader, ProduceRequest(None, 1, 10_000, [(topic, [(partition, b"")])])
        )
    except KafkaError:
        return True
    codes = [p[1] for _, parts in answer.topics for p in parts]
    return TOPIC_AUTHORIZATION_FAILED not in codes


#: An offset no partition reaches: a Fetch from it reads nothing.
_BEYOND_THE_END = 2**62


async def may_read(client: AIOKafkaClient, leader: int, topic: str, partition: int) -> bool:
    """Whether this client may Read ``topic``: a Fetch without a group from
    an offset past any end, which the broker authorizes first and then
    answers ``OFFSET_OUT_OF_RANGE`` (``KafkaApis.handleFetchRequest``), so
    no record is read and no wait is spent. Asked of the ``leader`` itself:
    unlike a consumer's fetch, which reports a refusal only on a later poll
    (a slow broker can make the probe miss it), the answer is this one
    request's. Any other failure of the probe is not a denial, as for
    :func:`may_write`."""
    request = FetchRequest(0, 0, 1024, 0, [(topic, [(partition, _BEYOND_THE_END, 1024)])])
    try:
        answer: Any = await client.send(leader, request)
    except KafkaError:
        return True
    codes = [p[1] for _, parts in answer.topics for p in parts]
    return TOPIC_AUTHORIZATION_FAILED not in codes
