"""A user's value codec from their own project, end to end: the worker
reads with it and writes with it (gap markers, processor outputs: no JSON
among them), ``seqkeeper compact`` reads the topics with it into the store
(ids, types and data of the decoded values), and ``seqkeeper replay`` sends
the stored records back, each value still the codec's, byte for byte."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.spark_sink import tables
from seqkeeper.topics import Record, create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.spark_sink.cli_env import compact_env
from tests.topic_wait import wait_for

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "codec_project"
CODEC = "shopcodec.codec:PrefixedBase64"


def encode(document: Any) -> bytes:  # (what the project's codec writes, for the inputs)
    text = json.dumps(document, separators=(",", ":"), sort_keys=True)
    return b"SK1:" + base64.b64encode(text.encode())


def decode(value: bytes | None) -> Any:
    assert value is not None and value.startswith(b"SK1:"), value
    return json.loads(base64.b64decode(value[4:], validate=True))


def cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "seqkeeper", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def per_key(records: list[Record]) -> dict[bytes | None, list[bytes | None]]:
    out: dict[bytes | None, list[bytes | None]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out[r.key].append(r.value)
    return out


def test_a_user_codec_worker_compact_replay(make_settings, tmp_path: Path) -> None:
    project = shutil.copytree(PROJECT, tmp_path / "project")  # (Spark writes in its cwd)
    settings = make_settings(
        codec=CODEC, processor="shopcodec.processor:totals", gap_timeout=1.0, partitions=1
    )
    bootstrap = settings.broker.bootstrap
    o = settings.ordered
    asyncio.run(create_topics(bootstrap, [*settings.topics(), o.processed_topic], 1))
    posts = {"k1": (1, 2, 4, 5), "k2": (1, 2, 3)}  # k1 misses 3: given up after 1 s
    inputs = [
        (
            k.encode(),
            encode({"messageId": f"{k}-m{s}", "seq": s, "type": "Posted", "data": {"amount": s}}),
        )
        for k, seqs in posts.items()
        for s in seqs
    ]
    bad = orjson.dumps({"messageId": "j1", "seq": 1, "type": "Posted"})  # JSON: not the codec's
    worker = WorkerProcess(settings, tmp_path / "worker.log", cwd=project).start()
    try:
        asyncio.run(_send(bootstrap, o.input_topic, [*inputs, (b"k3", bad)]))
        ordered = wait_for(bootstrap, o.ordered_topic, len(inputs) + 1, worker)
        processed = wait_for(bootstrap, o.processed_topic, len(inputs) + 1, worker)
        dead = wait_for(bootstrap, o.dlq_topic, 1, worker)
        deduped = wait_for(bootstrap, o.deduped_topic, len(inputs), worker)
    finally:
        assert worker.stop() == 0

    # the worker: markers and outputs in the codec; copies and dead letters as they came
    docs = [decode(r.value) for r in ordered]  # (every one: no JSON among them)
    marker = {
        "messageId": "seqkeeper.gap:k1:3-3",
        "seq": 3,
        "type": "seqkeeper.GapSkipped",
        "data": {"from": 3, "to": 3},
    }
    assert [d["messageId"] for d in docs if d["messageId"].startswith("k1")] == [
        "k1-m1",
        "k1-m2",
        "k1-m4",
        "k1-m5",
    ]
    assert docs.count(marker) == 1
    assert {r.value for r in ordered if r.value != encode(marker)} == {v for _, v in inputs}
    assert sorted(r.value or b"" for r in deduped) == sorted(v for _, v in inputs)
    outputs = [decode(r.value) for r in processed]
    assert {(d["key"], d["seq"]): d["data"] for d in outputs} == {
        ("k1", 1): {"total": 1, "seq": 1},
        ("k1", 2): {"total": 3, "seq": 2},
        ("k1", 3): {"gap": {"from": 3, "to": 3}},
        ("k1", 4): {"total": 7, "seq": 4},
        ("k1", 5): {"total": 12, "seq": 5},
        ("k2", 1): {"total": 1, "seq": 1},
        ("k2", 2): {"total": 3, "seq": 2},
        ("k2", 3): {"total": 6, "seq": 3},
    }
    assert [(r.value, r.header("seqkeeper.reason")) for r in dead] == [(bad, b"invalid-json")]

    # compact: the store's rows are the decoded values
    env = {
        **compact_env(settings),
        "SEQKEEPER_CODEC": CODEC,
        "SEQKEEPER_PROCESSED_TOPIC": o.processed_topic,
    }
    warehouse = tmp_path / "warehouse"
    app = ["-b", bootstrap, "--app-id", settings.runtime.app_id]
    cli(["compact", *app, "--warehouse", str(warehouse), "--master", "local[1]"], env, project)
    rows = tables.load(warehouse, "audit").scan().to_arrow().to_pylist()
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_topic[row["topic"]].append(row)
    stored = {r["id"]: (r["type"], orjson.loads(r["data"])) for r in by_topic[o.ordered_topic]}
    assert stored == {d["messageId"]: (d["type"], d["data"]) for d in docs}
    stored_outputs = {r["id"]: orjson.loads(r["data"]) for r in by_topic[o.processed_topic]}
    assert stored_outputs == {d["messageId"]: d["data"] for d in outputs}
    [letter] = by_topic[o.dlq_topic]  # (JSON, not the codec's: no fields read, its coordinates)
    assert letter["id"] == f"{o.dlq_topic}:0:0" and letter["value"] == bad

    # replay: the stored records go back, in the codec, byte for byte
    target = f"replayed-{settings.runtime.app_id}"
    category = o.ordered_topic.replace("-", "_")
    args = ["--topic", target, "--warehouse", str(warehouse), "--category", category]
    cli(["replay", "-b", bootstrap, *args, "--master", "local[1]"], env, project)
    replayed = asyncio.run(read_topic(bootstrap, target))
    assert per_key(replayed) == per_key(ordered)
    assert [decode(r.value) for r in sorted(replayed, key=lambda r: (r.partition, r.offset))]


async def _send(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value in records:
            await producer.send(topic, value, key=key, partition=0)
        await producer.flush()
    finally:
        await producer.stop()
