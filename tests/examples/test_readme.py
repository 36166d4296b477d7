"""The README stays short, and its "Write your own" code does what the
text around it says."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper import GAP_SKIPPED, DomainError, Event, Message, Output, Registry
from seqkeeper.processors.command import parse_command
from seqkeeper.processors.processor import results

README = Path(__file__).resolve().parents[2] / "README.md"


def write_your_own() -> list[str]:
    """The Python blocks of the README's "Write your own" section."""
    text = README.read_text()
    section = text.split("\n## Write your own\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_is_under_400_lines() -> None:
    assert len(README.read_text().splitlines()) < 400


def test_the_readme_processor_keeps_a_total_and_reports_gaps() -> None:
    processor, _ = write_your_own()
    scope: dict[str, Any] = {}
    exec(processor, scope)
    fn = scope["balance"]

    def message(seq: int, kind: str, data: Any, message_id: str) -> Message:
        return Message(key="k", seq=seq, message_id=message_id, type=kind, data=data, body={})

    first = message(1, "Posted", {"amount": 5}, "k:1")
    state, outputs = fn(None, first)
    assert (state, outputs) == ({"total": 5}, [{"total": 5}])
    gap = message(2, GAP_SKIPPED, {"from": 2, "to": 3}, "seqkeeper.gap:k:2-3")
    assert fn(state, gap) == (state, [Output({"from": 2, "to": 3}, type="Missing")])
    state, outputs = fn(state, message(4, "Posted", {"amount": -2}, "k:4"))
    assert (state, outputs) == ({"total": 3}, [{"total": 3}])
    # what it returns can be stored and produced
    _, records = results(gap, fn({"total": 5}, gap))
    assert orjson.loads(records[0][2])["messageId"] == "1:k/seqkeeper.gap:k:2-3:1"


def test_the_readme_handler_withdraws_or_refuses() -> None:
    _, handlers = write_your_own()
    scope: dict[str, Any] = {}
    exec(handlers, scope)
    registry = scope["registry"]
    assert isinstance(registry, Registry)
    withdraw = registry.handlers[("Withdraw", 1)]

    def command(amount: int) -> Any:
        doc = {"messageId": "m1", "commandType": "Withdraw", "schemaVersion": 1,
               "correlationId": "c1", "partitionKey": "acct", "tenantId": "t",
               "payload": {"amount": amount}}  # fmt: skip
        return parse_command(b"acct", orjson.dumps(doc))

    done = asyncio.run(withdraw({"balance": 10}, command(4)))
    assert done == ({"balance": 6}, [Event("Withdrawn", {"balance": 6})])
    with pytest.raises(DomainError) as refused:
        asyncio.run(withdraw({"balance": 10}, command(11)))
    assert (refused.value.message, refused.value.data) == ("insufficient funds", {"balance": 10})
