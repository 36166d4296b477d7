"""A command's W3C trace headers go on to its reply and events, also when
the command is retried after a restart (they are kept with its receipt)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from seqkeeper.processors.command import Command, Event, Registry
from seqkeeper.settings import Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.topologies.command_worker import CommandTopology
from tests.topologies.test_commands import cmd

SETTINGS = Settings.of(bootstrap="unused", topology="commands", command_retry_delay=1.0)
TRACE = [
    ("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    ("tracestate", b"congo=t61rcWkgMzE"),
]


def test_replies_and_events_carry_the_command_s_trace_also_after_a_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = [1]
    registry = Registry()

    @registry.register("Reserve")
    def reserve(state: Any, command: Command) -> tuple[Any, list[Event]]:
        if failures[0]:
            failures[0] -= 1
            raise ConnectionError("flaky")
        return {"n": 1}, [Event("Reserved", {})]

    memory = MemoryStore()
    topology = CommandTopology(SETTINGS, CommandStore(memory), registry)
    topology.on_assigned({0})
    key, value = cmd("m1", "Reserve", {})
    headers = [("tenant", b"t1"), *TRACE, ("other", b"x")]
    topology.on_record(0, 0, key, value, headers, 1.0, 100.0)
    assert topology.take().records == []  # failed once: a retry is due in 1 s
    assert (
        "handler failed on command m1 (attempt 1 of 5, retried): builtins.ConnectionError: flaky"
        in caplog.text
    )
    # a restart: the retry reads the command from its receipt
    topology = CommandTopology(SETTINGS, CommandStore(memory), registry)
    topology.on_assigned({0})
    topology.on_tick({}, 102.0)
    out = {orjson.loads(v)["messageId"]: list(h or []) for _, _, v, h in topology.take().records}
    assert out == {"2:t1/m1:1": TRACE, "2:t1/m1:reply": TRACE}
