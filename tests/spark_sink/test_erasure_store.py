"""Retention and erasure end to end, as an operator runs them on a real
broker: ``compact`` with a per-category retention deletes the old rows of
one category and keeps the other's; ``store forget`` destroys one stream's
key (nothing under the warehouse holds it afterwards, no data file or
table snapshot changes), ``store stream`` then shows that stream's sealed
fields as erased and the others' in clear; a later message of the stream
gets a new key; ``compact --reseal`` rotates the audit key by rewrapping
the stream keys; ``store expire`` removes the files retention deleted."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.spark_sink import tables
from seqkeeper.spark_sink.crypto import ERASED, StreamKeys, new_key
from seqkeeper.topics import create_topics
from tests.spark_sink.cli_env import changelog_and_ordered, compact_env

pytestmark = pytest.mark.integration

DAY_MS = 86_400_000


async def send(bootstrap: str, items: list[tuple[str, bytes, dict[str, Any], int | None]]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(t, orjson.dumps(doc), key=k, timestamp_ms=ts)
            for t, k, doc, ts in items
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def event(topic: str, key: str, i: int, ts: int | None = None) -> Any:
    doc = {"messageId": f"{key}-{i}", "type": "T", "data": {"email": f"{key}{i}@x.org", "n": i}}
    return (topic, key.encode(), doc, ts)


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "seqkeeper", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def files_under(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"  # (the key directory's lock: empty)
    }


def stream(name: str, warehouse: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    out = cli("store", "stream", name, "--warehouse", str(warehouse), env=env)
    assert out.returncode == 0, out.stderr
    return [orjson.loads(line)["data"] for line in out.stdout.splitlines()]


def test_retention_forget_and_rotation(broker, make_settings, tmp_path) -> None:
    settings = make_settings()
    _, ordered = changelog_and_ordered(broker.bootstrap, settings)
    deduped = settings.ordered.deduped_topic
    asyncio.run(create_topics(broker.bootstrap, [deduped], 1))
    cat, dcat = ordered.replace("-", "_"), deduped.replace("-", "_")
    old = int(time.time() * 1000) - 400 * DAY_MS
    asyncio.run(
        send(
            broker.bootstrap,
            [event(ordered, k, i) for k in ("a", "b") for i in range(3)]
            + [event(ordered, "old", 0, old)]  # kept: its category keeps everything
            + [event(deduped, "c", i, old) for i in range(2)]  # past 30 days: deleted
            + [event(deduped, "d", 0)],
        )
    )
    warehouse = tmp_path / "w"
    key1 = new_key()
    env = {
        **compact_env(settings),
        "SEQKEEPER_AUDIT_KEY": key1,
        "SEQKEEPER_SENSITIVE_FIELDS": "email",
        "SEQKEEPER_AUDIT_RETENTION": f"{deduped}=30d,*=inf",
    }
    compact = ["compact", "-b", broker.bootstrap, "--warehouse", str(warehouse)]
    compact += ["--master", "local[1]", "--app-id", settings.runtime.app_id]
    out = cli(*compact, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"retention: 2 audit rows deleted ({dcat}: 2 rows of 1 days)" in out.stdout, out.stdout

    # retention: the old rows of one category gone, the other's kept
    assert stream(f"{dcat}-c", warehouse, env) == []
    assert stream(f"{dcat}-d", warehouse, env) == [{"email": "d0@x.org", "n": 0}]
    assert stream(f"{cat}-old", warehouse, env) == [{"email": "old0@x.org", "n": 0}]
    assert stream(f"{cat}-a", warehouse, env) == [{"email": f"a{i}@x.org", "n": i} for i in range(3)]

    # forget: refused without --yes, in one line
    refused = cli("store", "forget", f"{cat}-a", "--warehouse", str(warehouse), env=env)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    wrapped = orjson.loads(StreamKeys(warehouse).path(f"{cat}-a").read_bytes())["wrapped"]
    before = files_under(warehouse)
    audit_snapshot = tables.load(warehouse, "audit").current_snapshot().snapshot_id
    done = cli("store", "forget", f"{cat}-a", "--yes", "--warehouse", str(warehouse), env=env)
    assert done.returncode == 0, done.stderr
    after = files_under(warehouse)
    # only the key file went: no data file, no table metadata changed
    gone = {p for p in before if p not in after}
    assert gone == {str(StreamKeys(warehouse).path(f"{cat}-a").relative_to(warehouse))}
    assert {p: h for p, h in before.items() if p not in gone} == after
    assert tables.load(warehouse, "audit").current_snapshot().snapshot_id == audit_snapshot
    # no file under the warehouse holds the wrapped key (nor its body)
    body = wrapped.rsplit(":", 1)[1].encode()
    for path in warehouse.rglob("*"):
        if path.is_file():
            assert wrapped.encode() not in path.read_bytes() and body not in path.read_bytes()
    # the stream's sealed fields read as erased; its clear fields and the others stay
    assert stream(f"{cat}-a", warehouse, env) == [{"email": ERASED, "n": i} for i in range(3)]
    assert stream(f"{cat}-b", warehouse, env) == [{"email": f"b{i}@x.org", "n": i} for i in range(3)]
    again = cli("store", "forget", f"{cat}-a", "--yes", "--warehouse", str(warehouse), env=env)
    assert again.returncode == 1 and "nothing to forget" in again.stderr

    # a later message of the forgotten stream: a new key, which opens only it
    asyncio.run(send(broker.bootstrap, [event(ordered, "a", 3)]))
    out = cli(*compact, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    expected_a = [{"email": ERASED, "n": i} for i in range(3)] + [{"email": "a3@x.org", "n": 3}]
    assert stream(f"{cat}-a", warehouse, env) == expected_a

    # rotation: the new audit key, the old one decrypt-only; reseal rewraps
    # the stream keys and rewrites no data file of theirs
    key2 = new_key()
    rotated = {**env, "SEQKEEPER_AUDIT_KEY": key2, "SEQKEEPER_AUDIT_DECRYPT_KEYS": key1}
    data_before = {p: h for p, h in files_under(warehouse).items() if p.endswith(".parquet")}
    out = cli(*compact, "--reseal", env=rotated)
    assert out.returncode == 0, (out.stdout, out.stderr[-3000:])
    assert "stream keys rewrapped" in out.stdout and "0 values left" in out.stdout, out.stdout
    data_after = {p: h for p, h in files_under(warehouse).items() if p.endswith(".parquet")}
    audit_dir = str(Path(tables.location(tables.load(warehouse, "audit"))).relative_to(warehouse))
    assert {p: h for p, h in data_after.items() if p.startswith(audit_dir)} == {
        p: h for p, h in data_before.items() if p.startswith(audit_dir)
    }
    new_only = {**env, "SEQKEEPER_AUDIT_KEY": key2}
    assert stream(f"{cat}-a", warehouse, new_only) == expected_a
    assert stream(f"{cat}-b", warehouse, new_only) == [
        {"email": f"b{i}@x.org", "n": i} for i in range(3)
    ]
    old_only = cli("store", "stream", f"{cat}-b", "--warehouse", str(warehouse), env=env)
    assert old_only.returncode == 2  # the old key no longer unwraps the stream keys

    # expire: the files retention deleted leave the disk; the store reads the same
    audit = tables.load(warehouse, "audit")
    root = Path(tables.location(audit), "data")
    assert set(map(str, root.rglob("*.parquet"))) > set(tables.data_files(audit))
    out = cli("store", "expire", "--yes", "--warehouse", str(warehouse), env=new_only)
    assert out.returncode == 0, out.stderr
    audit = tables.load(warehouse, "audit")
    assert set(map(str, root.rglob("*.parquet"))) == set(tables.data_files(audit))
    assert len(audit.snapshots()) == 1
    assert stream(f"{cat}-a", warehouse, new_only) == expected_a
    assert stream(f"{dcat}-d", warehouse, new_only) == [{"email": "d0@x.org", "n": 0}]
