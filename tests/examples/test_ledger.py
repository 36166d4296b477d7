"""examples/ledger, black-box: a copy of the project outside the repository,
its processor run by the installed ``seqkeeper worker --processor
balances:post``, fed by its own producer. Every posting is processed once in
sequence order (the input is shuffled and partly duplicated), an overdraft
is a ``Rejected`` output that leaves the balance, and bob's missing posting
is given up and reported; and ``python run.py`` does all of it in one command."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.examples.project import copy_example, one_command_env, script

pytestmark = pytest.mark.integration


def booked(amount: int, balance: int) -> tuple[str, dict[str, Any]]:
    return "Booked", {"amount": amount, "balance": balance}


def rejected(amount: int, balance: int) -> tuple[str, dict[str, Any]]:
    return "Rejected", {"amount": amount, "balance": balance, "reason": "insufficient funds"}


#: Per account, per seq: the output's type and data.
EXPECTED = {
    "alice": [booked(100, 100), booked(-30, 70), rejected(-80, 70), booked(50, 120),
              booked(-60, 60)],
    "bob": [booked(20, 20), booked(15, 35), booked(-10, 25),
            ("PostingsMissing", {"from": 4, "to": 4, "balance": 25}),
            booked(-5, 20), booked(25, 45)],
    "carol": [booked(10, 10), rejected(-25, 10), booked(5, 15)],
}  # fmt: skip


def expected_outputs() -> list[dict[str, Any]]:
    docs = []
    for account, outputs in EXPECTED.items():
        for seq, (kind, data) in enumerate(outputs, 1):
            cause = f"seqkeeper.gap:{account}:{seq}-{seq}" if kind == "PostingsMissing" else None
            cause = cause or f"{account}:{seq}"
            docs.append(
                {"messageId": f"{len(account)}:{account}/{cause}:1", "causationId": cause, "key": account, "seq": seq,
                 "type": kind, "data": data}
            )  # fmt: skip
    return docs


def test_the_ledger_books_each_posting_once_in_order(make_settings, tmp_path: Path) -> None:
    settings = make_settings(processor="balances:post", gap_timeout=3.0)
    project = copy_example("ledger", tmp_path / "ledger")
    bootstrap = settings.broker.bootstrap
    asyncio.run(create_topics(bootstrap, settings.topics(), 2))
    topic = settings.ordered.input_topic
    script(project, "produce.py", "--broker", bootstrap, "--topic", topic)
    worker = WorkerProcess(settings, tmp_path / "worker.log", cwd=project).start()
    expected = expected_outputs()
    try:
        deadline = time.monotonic() + 120
        while True:
            records = asyncio.run(read_topic(bootstrap, settings.ordered.processed_topic))
            if len({orjson.loads(r.value)["messageId"] for r in records}) >= len(expected):
                break
            worker.check_alive()
            assert time.monotonic() < deadline, (len(records), worker.log()[-3000:])
            time.sleep(0.5)
        time.sleep(1.0)  # anything more would be wrong: give it the time to show
        records = asyncio.run(read_topic(bootstrap, settings.ordered.processed_topic))
        dead = asyncio.run(read_topic(bootstrap, settings.ordered.dlq_topic))
    finally:
        assert worker.stop() == 0
    assert dead == []
    copies: dict[str, set[bytes]] = defaultdict(set)
    for r in records:
        copies[orjson.loads(r.value)["messageId"]].add(r.value)
        assert r.key == orjson.loads(r.value)["key"].encode()
    assert all(len(c) == 1 for c in copies.values()), "an output came twice, not identical"
    got = [orjson.loads(next(iter(c))) for c in copies.values()]
    assert sorted(got, key=lambda d: (d["key"], d["seq"])) == expected
    # and what the example's reader makes of it
    shown = script(
        project, "read.py", "--broker", bootstrap, "--topic", settings.ordered.processed_topic
    )
    assert shown.splitlines()[-1] == "balances: alice 60, bob 45 (missing seq 4-4), carol 15"
    assert len(shown.splitlines()) == len(expected) + 1


def test_the_ledger_runs_with_one_command(broker, make_settings, tmp_path: Path) -> None:
    project = copy_example("ledger", tmp_path / "ledger")
    env = one_command_env(broker, make_settings(gap_timeout=3.0))
    out = script(project, "run.py", env=env, timeout=400)
    lines = out.splitlines()
    assert "  alice  seq 3  Rejected" in out
    assert any(line.startswith("  bob    seq 4  PostingsMissing") for line in lines), out
    assert "balances: alice 60, bob 45 (missing seq 4-4), carol 15" in lines, out
