"""The README stays short, says what it promises, points only at what
exists, and its "Write your own" code does what the text around it says."""

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
    # kept well under the cap (detail goes to docs/*.md), so that the cap
    # still says something about growth
    lines = len(README.read_text().splitlines())
    assert lines < 400, f"README.md has {lines} lines: move detail to docs/*.md"


#: What the README is for (what it is, how to use it, what it guarantees),
#: each its own section, in this order (others may come between).
SECTIONS = [
    "What it is and what it guarantees",
    "The two commands",
    "Write your own",
    "Quick start",
    "The public API",
    "Topic contracts",
    "Configuration",
    "Running on Apache Kafka and with Docker",
    "Operations",
    "The Spark side",
    "Performance",
    "The embedded broker's deviations",
]


def headings(text: str) -> list[str]:
    """The headings of a markdown text, outside code blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return [h.strip() for h in re.findall(r"^#{1,6} (.+)$", prose, re.M)]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _
    dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_has_its_sections_in_order() -> None:
    found = headings(README.read_text())
    assert found[0] == "seqkeeper"
    assert [h for h in found if h in SECTIONS] == SECTIONS, found


def test_every_link_of_the_readme_resolves() -> None:
    """Every relative link names a file or directory of the repository, and
    every ``#anchor`` a heading of the page it points to."""
    root = README.parent
    text = README.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 10, local  # the README's pointers to docs/, examples/, bench/
    broken = []
    for link in local:
        path, _, fragment = link.partition("#")
        target = root / path if path else README
        exists = target.exists()
        if not exists or (fragment and fragment not in map(anchor, headings(target.read_text()))):
            broken.append(link)
    assert not broken, f"README.md links to what does not exist: {broken}"


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
