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

The worker learns its member id as the coordinator gives it: the first
JoinGroup answers with the id and ``MEMBER_ID_REQUIRED`` (KIP-394), and from
then on the coordinator counts that member in, so a worker killed before
its join completed leaves one behind too. The restart joins as that member
(:func:`join_as`) rather than removing it: the embedded broker keeps such a
member after a LeaveGroup and would rebalance again when its session
expires. aiokafka keeps the id in ``GroupCoordinator.member_id`` and the
join's generation in ``.generation``, which have no hook:
:func:`tell_member_ids` makes the consumer's coordinator a subclass whose
attributes tell a listener each new value.

Private members: none (``aiokafka.consumer.consumer.GroupCoordinator``, the
class the consumer instantiates, is replaced module-wide; the subclass
changes nothing for a group without a listener).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiokafka import errors
from aiokafka.client import AIOKafkaClient, ConnectionGroup, CoordinationType
from aiokafka.consumer import consumer as aiokafka_consumer
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.group import LeaveGroupRequest

from seqkeeper.security import kafka_options

#: Longest the removal may take: the restart goes on without it after that
#: (the old member then expires with its session, as before).
REMOVE_TIMEOUT_MS = 5000


#: Listeners of new member ids, by group id: called with the id and whether
#: its join completed.
_listeners: dict[str, Callable[[str, bool], None]] = {}
#: Member ids to join with, by group id (:func:`join_as`).
_inherited: dict[str, str] = {}


class TellingCoordinator(GroupCoordinator):  # type: ignore[misc]
    """aiokafka's group coordinator, telling its group's listener (if any)
    each member id the coordinator gives it, as soon as it is given, and
    once more when a join with it completed (a generation was assigned)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (before the coordination task's first step: the first JoinGroup)
        inherited = _inherited.pop(self.group_id, None)
        if inherited:
            self._told_member_id = inherited

    def _tell(self, joined: bool) -> None:
        listener = _listeners.get(getattr(self, "group_id", None) or "")
        member = getattr(self, "_told_member_id", "")
        if listener is not None and member:
            listener(member, joined)

    @property
    def member_id(self) -> str:
        return self._told_member_id

    @member_id.setter
    def member_id(self, value: str) -> None:
        self._told_member_id = value
        self._tell(joined=False)

    @property
    def generation(self) -> int:
        return self._told_generation

    @generation.setter
    def generation(self, value: int) -> None:
        self._told_generation = value
        if value >= 0:  # (-1: none; the embedded broker's first is 0)
            self._tell(joined=True)


def tell_member_ids(group: str, listener: Callable[[str, bool], None]) -> None:
    """Call ``listener`` with each member id a consumer of ``group`` in this
    process is given (its first JoinGroup's answer and any later one), and
    whether a join with it completed."""
    _listeners[group] = listener
    aiokafka_consumer.GroupCoordinator = TellingCoordinator


def join_as(group: str, member: str) -> None:
    """The next consumer of ``group`` in this process sends its first
    JoinGroup with ``member``: the id a previous worker was given but whose
    join it never completed. The coordinator counts such a member in until
    its session expires (the embedded broker even after a LeaveGroup), and
    takes this JoinGroup for that member's own second one (KIP-394); an id
    it no longer knows is answered ``UNKNOWN_MEMBER_ID``, and aiokafka joins
    afresh."""
    _inherited[group] = member
    aiokafka_consumer.GroupCoordinator = TellingCoordinator


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
