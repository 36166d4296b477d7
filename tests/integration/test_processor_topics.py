"""An ordered processor's outputs to another topic (``Output(topic=...)``,
allowed by ``SEQKEEPER_PROCESSOR_TOPICS``), through a real worker with a
``kill -9`` in the middle: each output reaches the topic it named once on
Apache Kafka (exactly_once, read_committed), or in byte-identical copies on
the embedded broker (at_least_once: the outbox produces stored outputs
again, not computed again: the function puts a random nonce in each); an
output naming a topic not allowed dead-letters its input (processor-failed,
the topic in the detail) and the worker goes on."""

from __future__ import annotations

import asyncio
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
from tests.conftest import Broker

pytestmark = pytest.mark.integration

#: Counts each key's messages; each output goes to ROUTE_TOPIC (a nonce in
#: it) and the count to the processed topic; a message whose data is
#: "astray" also names a topic not allowed.
ROUTER = """
import os
import random
import time

from seqkeeper import Output


def route(state, message):
    time.sleep(float(os.environ.get("ROUTE_DELAY", "0")))
    n = (state or 0) + 1
    outs = [
        Output({"n": n, "nonce": random.random()}, type="Counted", topic=os.environ["ROUTE_TOPIC"]),
        {"n": n},
    ]
    if message.data == "astray":
        outs.append(Output({"n": n}, topic="not-allowed-anywhere"))
    return n, outs
"""

KEYS = 4
PER_KEY = 60
ASTRAY = {(0, 7), (2, 30)}  # (key, seq): dead-lettered


def workload() -> list[tuple[bytes, bytes]]:
    records = []
    for seq in range(1, PER_KEY + 1):
        for k in range(KEYS):
            data = "astray" if (k, seq) in ASTRAY else seq
            doc = {"messageId": f"k{k}-{seq}", "seq": seq, "type": "Posted", "data": data}
            records.append((f"k{k}".encode(), orjson.dumps(doc)))
    return records


def copies(records: list[Any]) -> dict[str, list[bytes]]:
    seen: dict[str, list[bytes]] = defaultdict(list)
    for r in records:
        seen[orjson.loads(r.value)["messageId"]].append(r.value)
    return seen


def test_outputs_to_an_allowed_topic_appear_once_across_kill_9(
    make_settings: Any,
    names: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    broker: Broker,
) -> None:
    routed = names["input_topic"].replace("in-", "routed-")
    monkeypatch.setenv("ROUTE_TOPIC", routed)
    monkeypatch.setenv("ROUTE_DELAY", "0.01")
    project = tmp_path / "project"
    (project / "router").mkdir(parents=True)
    (project / "router" / "__init__.py").write_text("")
    (project / "router" / "route.py").write_text(ROUTER)
    settings = make_settings(processor="router.route:route", processor_topics=f"{routed},x-*")
    assert routed in settings.topics()  # declared: the worker creates it at start
    bootstrap = settings.broker.bootstrap
    asyncio.run(create_topics(bootstrap, [t for t in settings.topics() if t != routed], 2))
    records = workload()
    asyncio.run(publish(bootstrap, settings.ordered.input_topic, records))
    first = WorkerProcess(settings, tmp_path / "first.log", cwd=project).start()
    first.wait_ready()
    deadline = time.monotonic() + 90
    while len(copies(asyncio.run(read_topic(bootstrap, routed)))) < 40:
        first.check_alive()
        assert time.monotonic() < deadline, first.log()[-3000:]
        time.sleep(0.05)
    first.kill()  # mid-processing: between fn, its writes, producing and confirming
    isolation = "read_uncommitted" if broker.is_tansu else "read_committed"
    expected = {
        output_id(f"k{k}", f"k{k}-{seq}", "1") for k in range(KEYS) for seq in range(1, PER_KEY + 1)
    } - {output_id(f"k{k}", f"k{k}-{seq}", "1") for k, seq in ASTRAY}
    second = WorkerProcess(settings, tmp_path / "second.log", cwd=project).start()
    try:
        deadline = time.monotonic() + 150
        while True:
            out = copies(asyncio.run(read_topic(bootstrap, routed, isolation=isolation)))
            letters = asyncio.run(
                read_topic(bootstrap, settings.ordered.dlq_topic, isolation=isolation)
            )
            if len(out) >= len(expected) and len(letters) >= len(ASTRAY):
                break
            second.check_alive()
            assert time.monotonic() < deadline, (len(out), second.log()[-3000:])
            time.sleep(0.5)
        processed = copies(
            asyncio.run(
                read_topic(bootstrap, settings.ordered.processed_topic, isolation=isolation)
            )
        )
    finally:
        assert second.stop() == 0
    assert set(out) == expected
    if broker.is_tansu:
        assert all(len(set(c)) == 1 for c in out.values()), "an output changed after the crash"
    else:
        assert all(len(c) == 1 for c in out.values()), "an output seen twice, read_committed"
    # the processed topic got the second outputs of the same inputs
    assert {mid[:-1] for mid in processed} == {mid[:-1] for mid in expected}
    assert all(mid.endswith(":2") for mid in processed)
    for mid, values in out.items():
        doc = orjson.loads(values[0])
        # (a dead-lettered input leaves the key's state as it was)
        skipped = sum(1 for k, seq in ASTRAY if f"k{k}" == doc["key"] and seq < doc["seq"])
        assert doc["type"] == "Counted" and doc["data"]["n"] == doc["seq"] - skipped, mid
    # an output to a topic not allowed: its input dead-lettered, once each, the topic named
    dead = {}
    for r in letters:
        h = dict(r.headers)
        assert h["seqkeeper.reason"] == b"processor-failed"
        assert (
            b"topic 'not-allowed-anywhere' is not among SEQKEEPER_PROCESSOR_TOPICS"
            in (h["seqkeeper.detail"])
        )
        dead[orjson.loads(r.value)["messageId"]] = r.value
    assert set(dead) == {f"k{k}-{seq}" for k, seq in ASTRAY}
