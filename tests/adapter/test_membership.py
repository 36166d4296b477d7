"""The consumer's group coordinator tells each member id as it is given
(:mod:`seqkeeper.adapter.membership`), for the group that has a listener."""

from __future__ import annotations

import asyncio

from aiokafka.consumer import consumer as aiokafka_consumer

from seqkeeper.adapter.membership import TellingCoordinator, join_as, tell_member_ids


def coordinator(group: str) -> TellingCoordinator:
    made = TellingCoordinator.__new__(TellingCoordinator)  # (no client needed)
    made.member_id = ""  # (what aiokafka sets first, before the group id)
    made.group_id = group
    return made


def test_the_next_coordinator_of_a_group_joins_as_the_inherited_member() -> None:
    from aiokafka.client import AIOKafkaClient
    from aiokafka.consumer.subscription_state import SubscriptionState

    async def made(group: str) -> tuple[str, int]:
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:9")  # (never reached)
        made = TellingCoordinator(client, SubscriptionState(), group_id=group)
        try:
            return made.member_id, made.generation
        finally:
            await made.close()
            await client.close()

    join_as("g-inherit", "m-dead")
    assert asyncio.run(made("g-inherit")) == ("m-dead", -1)  # its first JoinGroup's id
    assert asyncio.run(made("g-inherit")) == ("", -1)  # once only
    assert asyncio.run(made("g-plain")) == ("", -1)


def test_each_new_member_id_reaches_the_group_s_listener() -> None:
    told: list[tuple[str, bool]] = []
    tell_member_ids("g-told", lambda member, joined: told.append((member, joined)))
    assert aiokafka_consumer.GroupCoordinator is TellingCoordinator
    mine = coordinator("g-told")
    mine.generation = -1  # (aiokafka's first, before any join)
    mine.member_id = "m-1"  # MEMBER_ID_REQUIRED's answer
    mine.member_id = "m-1"  # the completed join's answer...
    mine.generation = 0  # ... and its generation (the embedded broker's first)
    mine.generation = -1  # UNKNOWN_MEMBER_ID: reset, nothing to keep
    mine.member_id = ""
    mine.member_id = "m-2"
    assert mine.member_id == "m-2"
    other = coordinator("g-other")  # (another group: the repartition stage's)
    other.member_id = "x-1"
    other.generation = 0
    assert told == [("m-1", False), ("m-1", False), ("m-1", True), ("m-2", False)]


def test_a_member_given_and_joined_is_kept_as_joined(tmp_path) -> None:
    from seqkeeper.runtime.task import LocalState, Member, read_members

    local = LocalState(tmp_path, tmp_path / "tables")
    local.remember_member("g", "m-1", False)
    assert read_members(local.members) == {"g": Member("m-1", False)}
    local.remember_member("g", "m-1", True)
    local.remember_member("g", "m-1", False)  # (aiokafka sets the id again after a sync)
    local.remember_member("h", "x-1", False)
    assert read_members(local.members) == {"g": Member("m-1", True), "h": Member("x-1", False)}
    local.remember_member("g", "m-2", False)  # a new id: its join has not completed
    assert read_members(local.members)["g"] == Member("m-2", False)
