"""A user's own command handlers, from a project outside this package, run
by the installed ``seqkeeper worker --topology commands --handlers …`` in the
project's directory, and asked through ``seqkeeper.client`` by the project's
own code: every command answered once with the result the
user's code gives, and a ``kill -9`` in the middle leaves every output
(events and replies) byte-identical however often it was re-sent."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.demo import publish
from seqkeeper.processors.envelope import output_id
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.user.project import write_project

pytestmark = pytest.mark.integration

ACCOUNTS = 4
COMMANDS = 120


def commands(
    reply_to: str, seed: int = 5
) -> tuple[list[dict[str, Any]], list[tuple[bytes, bytes]]]:
    """Distinct commands, and their records: each sent 1-3 times, all
    shuffled (a copy may come after later commands of its account)."""
    rng = random.Random(seed)
    docs = []
    for n in range(COMMANDS):
        kind = rng.choice(["Deposit", "Deposit", "Withdraw"])
        docs.append(
            {
                "messageId": f"ledger-{n}",
                "commandType": kind,
                "schemaVersion": 1,
                "correlationId": f"c-{n}",
                "partitionKey": f"acct-{rng.randrange(ACCOUNTS)}",
                "tenantId": "bank",
                "replyTo": reply_to,
                "payload": {"amount": rng.randint(1, 30)},
            }
        )
    records = []
    for doc in docs:
        records += [(doc["partitionKey"].encode(), orjson.dumps(doc))] * rng.randint(1, 3)
    rng.shuffle(records)
    return docs, records


def expected_replies(records: list[tuple[bytes, bytes]]) -> tuple[dict[str, bool], dict[str, int]]:
    """Each command's success, and the balances after all, applying the
    first copy of each in order (a key's records are one partition's, read
    in order)."""
    balances: dict[str, int] = defaultdict(int)
    done: dict[str, bool] = {}
    for _, value in records:
        doc = orjson.loads(value)
        if doc["messageId"] in done:
            continue
        account, amount = doc["partitionKey"], doc["payload"]["amount"]
        if doc["commandType"] == "Deposit":
            balances[account] += amount
            done[doc["messageId"]] = True
        else:
            ok = amount <= balances[account]
            balances[account] -= amount if ok else 0
            done[doc["messageId"]] = ok
    return done, balances


def by_message_id(records: list[Any]) -> dict[str, set[bytes]]:
    seen: dict[str, set[bytes]] = defaultdict(set)
    for r in records:
        seen[orjson.loads(r.value)["messageId"]].add(r.value)
    return seen


def test_a_user_project_s_handlers_survive_kill_9(make_settings, names, tmp_path: Path) -> None:
    tag = names["app_id"]
    settings = make_settings(
        topology="commands",
        handlers="ledger.handlers:registry",
        partitions=2,
    )
    project = write_project(tmp_path / "project")
    replies = f"{tag}.replies"
    bootstrap = settings.broker.bootstrap
    asyncio.run(create_topics(bootstrap, [*settings.topics(), replies], 2))
    docs, records = commands(replies)
    half = len(records) // 2
    asyncio.run(publish(bootstrap, settings.commands.command_topic, records[:half]))
    first = WorkerProcess(settings, tmp_path / "first.log", cwd=project).start()
    first.wait_ready()
    time.sleep(1.0)
    first.kill()  # somewhere between persist, dispatch and mark
    asyncio.run(publish(bootstrap, settings.commands.command_topic, records[half:]))
    second = WorkerProcess(settings, tmp_path / "second.log", cwd=project).start()
    try:
        deadline = time.monotonic() + 150
        while True:
            answered = by_message_id(asyncio.run(read_topic(bootstrap, replies)))
            if len(answered) >= COMMANDS:
                break
            second.check_alive()
            assert time.monotonic() < deadline, (len(answered), second.log()[-3000:])
            time.sleep(0.5)
        events = by_message_id(asyncio.run(read_topic(bootstrap, settings.commands.events_topic)))
        dead = asyncio.run(read_topic(bootstrap, settings.commands.command_dlq_topic))
        # the project's own code asks through seqkeeper's client: too much
        asked = subprocess.run(
            [sys.executable, "-m", "ledger.ask", bootstrap, settings.commands.command_topic,
             "acct-0", "1000000"],
            cwd=project, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert asked.returncode == 0, asked.stderr
    finally:
        assert second.stop() == 0
    assert dead == []
    mids = {output_id(d["tenantId"], d["messageId"], "reply"): d["messageId"] for d in docs}
    assert set(answered) == set(mids)
    # identical bytes for every output, however often it was sent again
    assert all(len(copies) == 1 for copies in answered.values()), "a reply changed"
    assert all(len(copies) == 1 for copies in events.values()), "an event changed"
    outcome = {
        mids[mid]: orjson.loads(next(iter(copies)))["success"] for mid, copies in answered.items()
    }
    expected, balances = expected_replies(records)
    assert outcome == expected
    assert json.loads(asked.stdout) == {
        "success": False,
        "message": "insufficient funds",
        "data": {"balance": balances["acct-0"]},
    }
    # one event per successful command, from the user's handlers
    assert {orjson.loads(next(iter(c)))["causationId"] for c in events.values()} == {
        m for m, ok in outcome.items() if ok
    }
    types = {orjson.loads(next(iter(c)))["type"] for c in events.values()}
    assert types <= {"Deposited", "Withdrawn"} and "Deposited" in types
