"""A worker restarted after an unclean stop takes its predecessor's place in
the consumer group at once, under dynamic membership too.

A ``kill -9``-ed member stays in the group until its session times out
(``SEQKEEPER_SESSION_TIMEOUT``): the restarted worker joins as a new member,
and the coordinator holds the rebalance until the dead one either rejoins
or expires, so every restart waited out the whole session first. Static
membership (KIP-345, ``SEQKEEPER_INSTANCE_ID``) avoids that by naming the
member; without it, the worker keeps the member id the coordinator gave it
in its data directory, and a restart after an unclean stop sends the
LeaveGroup the dead process could not send (the request a clean stop sends,
by member id; the coordinator does not ask who sends it). The group then
rebalances without the dead member, and the new one joins at once.

Removing a member that is in fact alive (a copy of a live worker's data
directory started elsewhere) costs one rebalance: its next heartbeat gets
``UNKNOWN_MEMBER_ID`` and it rejoins as a new member, and a transactional
producer of the new assignment fences what it was doing.

Private member: ``AIOKafkaConsumer._coordinator`` (aiokafka 0.14), read for
the member id it joined with.
"""

from __future__ import annotations

from typing import Any

from aiokafka import errors
from aiokafka.client import AIOKafkaClient, ConnectionGroup, CoordinationType
from aiokafka.protocol.group import LeaveGroupRequest

from seqkeeper.security import kafka_options

#: Longest the removal may take: the restart goes on without it after that
#: (the old member then expires with its session, as before).
REMOVE_TIMEOUT_MS = 5000


def member_id(app: Any) -> str | None:
    """The member id the app's consumer joined its group with (None before
    the first join)."""
    consumer = app.consumer._thread._ensure_consumer()
    member: str = consumer._coordinator.member_id
    return member or None


async def remove_member(bootstrap: str, group: str, member: str) -> bool:
    """Remove ``member`` from ``group`` (a LeaveGroup on its behalf): True
    if it was there, False if the coordinator no longer knew it (its
    session had expired, or it left). Other errors are raised."""
    client = AIOKafkaClient(
        bootstrap_servers=bootstrap, **kafka_options(), request_timeout_ms=REMOVE_TIMEOUT_MS
    )
    await client.bootstrap()
    try:
        node = await client.coordinator_lookup(CoordinationType.GROUP, group)
        response = await client.send(
            node, LeaveGroupRequest(group, member), group=ConnectionGroup.COORDINATION
        )
        error = errors.for_code(response.error_code)
        if error is errors.NoError:
            return True
        if error is errors.UnknownMemberIdError:
            return False
        raise error()
    finally:
        await client.close()
