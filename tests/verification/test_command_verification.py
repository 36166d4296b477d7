"""The command storm's verification (seqkeeper.verification.command_storm), fed
by the command topology in memory: under exactly_once a repeated event
fails it (the chaos ``commands`` scenario's check);
under at_least_once identical repeats are counted, not failures."""

from __future__ import annotations

import pytest

from seqkeeper.processors.inventory import registry
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.topics import Record
from seqkeeper.topologies.command_worker import CommandTopology
from seqkeeper.verification.command_storm import storm, verify_commands

REPLIES = "storm.replies"
NOW = 1.9e9  # (2030: the storm's expiresAt are in the past)


def run(guarantee: str) -> tuple[list[Record], dict[str, list[Record]]]:
    """The storm's records through the topology (a take, confirmed, every
    8 records: copies land before and after their command's take)."""
    settings = Settings.of(bootstrap="unused", topology="commands", processing_guarantee=guarantee)
    topology = CommandTopology(settings, CommandStore(MemoryStore()), registry)
    topology.on_assigned({0})
    work = storm(commands=40, max_copies=3, reply_to=REPLIES, seed=5)
    commands = [Record("commands.in", 0, n, k, v, (), 0) for n, (k, v) in enumerate(work.records)]
    out: dict[str, list[Record]] = {}

    def cycle() -> None:
        batch = topology.take()
        topology.confirm(batch, now=NOW)
        for topic, key, value, headers in batch.records:
            got = out.setdefault(topic, [])
            got.append(Record(topic, 0, len(got), key, value, tuple(headers or ()), 0))

    for r in commands:
        assert topology.on_record(0, r.offset, r.key, r.value, [], None, NOW) is None
        if r.offset % 8 == 7:
            cycle()
    cycle()
    return commands, out


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_repeated_event_fails_only_under_exactly_once(guarantee: str) -> None:
    commands, out = run(guarantee)
    s = Settings.of(bootstrap="unused", topology="commands")
    topics = [
        out.get(t, []) for t in (REPLIES, s.commands.events_topic, s.commands.command_dlq_topic)
    ]
    report = verify_commands(commands, *topics, exactly_once=guarantee == "exactly_once")
    assert report.ok, report.failures()
    if guarantee == "at_least_once":
        assert report.repeated["events"] > 0  # (copies before the take: sent again)
        strict = verify_commands(commands, *topics, exactly_once=True)
        assert [c.name for c in strict.failures()] == ["events: repeated under exactly_once"]
    else:
        assert report.repeated["events"] == 0
