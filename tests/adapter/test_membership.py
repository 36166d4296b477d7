"""The consumer's group coordinator tells each member id as it is given
(:mod:`seqkeeper.adapter.membership`), for the group that has a listener."""

from __future__ import annotations

from aiokafka.consumer import consumer as aiokafka_consumer

from seqkeeper.adapter.membership import TellingCoordinator, tell_member_ids


def coordinator(group: str) -> TellingCoordinator:
    made = TellingCoordinator.__new__(TellingCoordinator)  # (no client needed)
    made.member_id = ""  # (what aiokafka sets first, before the group id)
    made.group_id = group
    return made


def test_each_new_member_id_reaches_the_group_s_listener() -> None:
    told: list[str] = []
    tell_member_ids("g-told", told.append)
    assert aiokafka_consumer.GroupCoordinator is TellingCoordinator
    mine = coordinator("g-told")
    mine.member_id = "m-1"  # MEMBER_ID_REQUIRED's answer
    mine.member_id = "m-1"  # the completed join
    mine.member_id = ""  # UNKNOWN_MEMBER_ID: reset, nothing to keep
    mine.member_id = "m-2"
    assert mine.member_id == "m-2"
    other = coordinator("g-other")  # (another group: the repartition stage's)
    other.member_id = "x-1"
    assert told == ["m-1", "m-1", "m-2"]
