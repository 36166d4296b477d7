"""Replay from the audit Parquet into a fresh topic reproduces the stream:
per key the same records, byte for byte, in the same order."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from seqkeeper.spark_sink.audit import compact_audit
from seqkeeper.spark_sink.replay import Selection, replay
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.verification.workload import generate
from tests.spark_sink.test_audit import send

pytestmark = pytest.mark.integration


def per_key(records) -> dict[bytes | None, list[bytes | None]]:  # type: ignore[no-untyped-def]
    out: dict[bytes | None, list[bytes | None]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        out[r.key].append(r.value)
    return out


def test_replay_reproduces_the_stream(spark, broker, names, tmp_path) -> None:
    source, target = f"ordered-{names['app_id']}", f"replayed-{names['app_id']}"
    other = f"other-{names['app_id']}"
    asyncio.run(create_topics(broker.bootstrap, [source, target, other], 3))
    w = generate(messages=400, keys=12, malformed=0, duplicate_rate=0.0, seed=9)
    asyncio.run(send(broker.bootstrap, [(source, k, v, None) for k, v in w.records]))
    asyncio.run(send(broker.bootstrap, [(other, b"x", b'{"messageId":"o"}', None)]))
    warehouse = tmp_path / "w"
    compact_audit(spark, broker.bootstrap, [source, other], warehouse)
    category = Selection(category=source.replace("-", "_"))
    seen: list[tuple[int | None, int]] = []
    assert replay(spark, warehouse, category, broker.bootstrap, target, dry_run=True) == 400
    assert asyncio.run(read_topic(broker.bootstrap, target)) == []  # a dry run sends nothing
    n = replay(
        spark,
        warehouse,
        category,
        broker.bootstrap,
        target,
        progress=lambda t, d: seen.append((t, d)),
    )
    assert n == 400 and seen[0] == (400, 0) and seen[-1] == (400, 400)
    original = per_key(asyncio.run(read_topic(broker.bootstrap, source)))
    assert per_key(asyncio.run(read_topic(broker.bootstrap, target))) == original
    # filters: one stream, a position range
    stream = f"{category.category}-{w.records[0][0].decode()}"
    some = Selection(stream=stream, from_position=2, to_position=4)
    assert replay(spark, warehouse, some, broker.bootstrap, target, dry_run=True) == 3
