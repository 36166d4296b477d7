"""A user's ordered processor, from a project outside this package, run by
the installed ``seqkeeper worker --processor ledger.balances:apply`` in the
project's directory, over out-of-order, duplicated and malformed input,
with a ``kill -9`` in the middle: every message of a key reaches the
user's function once and in sequence order (each output names the sequence
processed before it, and carries the running balance), and every output
(nonce and all) is byte-identical however often it was produced."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.demo import publish
from seqkeeper.processors.envelope import InvalidMessage, output_id, parse
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker
from tests.user.project import write_project

pytestmark = pytest.mark.integration


def copies(records: list[Any]) -> dict[str, list[bytes]]:
    seen: dict[str, list[bytes]] = defaultdict(list)
    for r in records:
        seen[orjson.loads(r.value)["messageId"]].append(r.value)
    return seen


@pytest.mark.parametrize("fn", ["apply", "apply_async"])
def test_a_user_project_s_processor_sees_each_message_once_in_order_across_kill_9(
    make_settings, tmp_path: Path, fn: str, monkeypatch: pytest.MonkeyPatch, broker: Broker
) -> None:
    """On Apache Kafka (exactly_once) a read_committed reader sees each
    output once; the killed worker's aborted outputs (the function is not
    deterministic: a nonce) are not among them. On the embedded broker
    (at_least_once) repeats are byte-identical."""
    monkeypatch.setenv("LEDGER_DELAY", "0.004")
    isolation = "read_uncommitted" if broker.is_tansu else "read_committed"
    settings = make_settings(processor=f"ledger.balances:{fn}", partitions=2)
    project = write_project(tmp_path / "project")
    bootstrap = settings.broker.bootstrap
    asyncio.run(create_topics(bootstrap, settings.topics(), 2))
    work = generate(messages=600, keys=6, duplicate_rate=0.2, malformed=3, seed=11)
    valid = {}  # by output id: unique per key (input messageIds are)
    for k, v in work.records:
        try:
            message = parse(k, v)
        except InvalidMessage:
            continue  # dead-lettered, never processed
        valid[output_id(message.key, message.message_id, "1")] = orjson.loads(message.value)
    half = len(work.records) // 2
    topic = settings.ordered.input_topic
    asyncio.run(publish(bootstrap, topic, work.records[:half]))
    first = WorkerProcess(settings, tmp_path / "first.log", cwd=project).start()
    first.wait_ready()
    deadline = time.monotonic() + 60
    # (uncommitted outputs count here: the kill lands in the middle of work)
    while len(copies(asyncio.run(read_topic(bootstrap, settings.ordered.processed_topic)))) < 40:
        first.check_alive()
        assert time.monotonic() < deadline, first.log()[-3000:]
        time.sleep(0.05)
    first.kill()  # while processing: between fn, its writes, producing and confirming
    asyncio.run(publish(bootstrap, topic, work.records[half:]))
    second = WorkerProcess(settings, tmp_path / "second.log", cwd=project).start()
    try:
        deadline = time.monotonic() + 150
        while True:
            out = copies(
                asyncio.run(
                    read_topic(bootstrap, settings.ordered.processed_topic, isolation=isolation)
                )
            )
            if len(out) >= len(valid):
                break
            second.check_alive()
            assert time.monotonic() < deadline, (len(out), len(valid), second.log()[-3000:])
            time.sleep(0.5)
    finally:
        assert second.stop() == 0
    if broker.is_tansu:
        assert all(len(set(c)) == 1 for c in out.values()), "an output changed after the crash"
    else:
        assert all(len(c) == 1 for c in out.values()), "an output seen twice, read_committed"
    assert set(out) == set(valid)
    # per key: each sequence once, in order, with the running balance
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for values in out.values():
        doc = orjson.loads(next(iter(values)))
        by_key[doc["key"]].append(doc)
    for key, docs in by_key.items():
        docs.sort(key=lambda d: d["seq"])
        assert [d["seq"] for d in docs] == list(range(1, len(docs) + 1)), key
        assert [d["data"]["previous"] for d in docs] == list(range(len(docs))), key
        amounts = {
            d["seq"]: d["data"]["amount"]
            for d in valid.values()
            if d["messageId"].startswith(key + ":")
        }
        running = 0
        for d in docs:
            running += amounts[d["seq"]]
            assert d["data"]["balance"] == running, (key, d["seq"])
