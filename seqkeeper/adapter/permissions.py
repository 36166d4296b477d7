"""Requests that ask the broker what this client may do, without doing it:
the worker's start-up check (:mod:`seqkeeper.permissions`) sends them
before Faust starts, because Faust and aiokafka retry or swallow most
authorization errors (a denied JoinGroup retries, a denied CreateTopics is
logged), and a worker that cannot work then hangs instead of saying why.

Private members: none. :class:`DescribeGroupsWithOperations` works around
aiokafka 0.14 declaring ``DescribeGroupsResponse_v2`` as the answer to
``DescribeGroupsRequest_v3``, which drops the ``authorized_operations``
field that v3 adds (KIP-430)."""

from __future__ import annotations

from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.admin import (
    DescribeGroupsRequest_v3,
    DescribeGroupsResponse_v3,
)
from aiokafka.protocol.api import Request
from aiokafka.protocol.produce import ProduceRequest

#: Kafka's ``AclOperation`` codes: bit ``1 << code`` of ``authorized_operations``.
OPERATION_CODES = {"Read": 3, "Write": 4, "Create": 5, "Describe": 8}
#: Kafka's error codes the probes tell apart.
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
INVALID_RECORD = 87


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
    consumer group ``group``; ``None`` when it may not even Describe it."""
    node = await client.coordinator_lookup(0, group)
    answer: Any = await client.send(node, DescribeGroupsWithOperations([group]))
    [described] = answer.groups
    error, ops = described[0], described[-1]
    if error == GROUP_AUTHORIZATION_FAILED:
        return None
    return {name for name, code in OPERATION_CODES.items() if ops & (1 << code)}


async def may_write(client: AIOKafkaClient, leader: int, topic: str, partition: int) -> bool:
    """Whether this client may Write to ``topic``: a Produce request to the
    partition's ``leader`` with no record batch, which the broker authorizes
    first and then refuses as ``INVALID_RECORD``
    (``ProduceRequest.validateRecords``), so nothing is ever appended."""
    answer: Any = await client.send(
        leader, ProduceRequest(None, 1, 10_000, [(topic, [(partition, b"")])])
    )
    codes = [p[1] for _, parts in answer.topics for p in parts]
    return TOPIC_AUTHORIZATION_FAILED not in codes
