"""``seqkeeper compact``'s job: the app's changelog and message topics that
exist (reply topics and the processor's output included) are compacted in
one run."""

from __future__ import annotations

import asyncio

import pytest

from seqkeeper.spark_sink.audit import read_audit
from seqkeeper.spark_sink.job import plan_topics, run_compact
from seqkeeper.spark_sink.snapshots import read_snapshot
from seqkeeper.topics import create_topics
from tests.spark_sink.test_snapshots import put

pytestmark = pytest.mark.integration


def test_compacts_the_topics_that_exist(spark, broker, make_settings, names, tmp_path) -> None:
    # (reply topics of this test only: *replies would audit other tests' too)
    settings = make_settings(reply_topics=f"{names['app_id']}.*replies")
    changelog = f"{settings.runtime.app_id}-state-changelog"
    asyncio.run(create_topics(broker.bootstrap, [changelog, settings.ordered.ordered_topic], 2))
    asyncio.run(put(broker.bootstrap, changelog, [(b"a", b"1"), (b"a", b"2"), (b"b", b"3")]))
    asyncio.run(
        put(broker.bootstrap, settings.ordered.ordered_topic, [(b"k", b'{"messageId":"x"}')])
    )
    changelogs, messages = plan_topics(
        settings, {changelog, settings.ordered.ordered_topic, "other"}
    )
    assert (changelogs, messages) == ([changelog], [settings.ordered.ordered_topic])
    steps: list[tuple[str, int]] = []
    done = run_compact(spark, settings, tmp_path / "w", lambda s, n: steps.append((s, n)))
    assert done == {"snapshots": 1, "audit": 1}
    assert steps == [(f"snapshot of {changelog}", 2), ("audit log of 1 topics", 2)]
    state = {
        bytes(r.key): bytes(r.value)
        for r in read_snapshot(spark, tmp_path / "w", changelog).collect()
    }
    assert state == {b"a": b"2", b"b": b"3"}
    assert [r.id for r in read_audit(spark, tmp_path / "w").collect()] == ["x"]


def test_the_audit_covers_replies_and_the_processors_output(
    spark, broker, make_settings, names, tmp_path
) -> None:
    """Every topic a worker writes is audited: the reply topics (those
    SEQKEEPER_REPLY_TOPICS matches, beside a command worker's topics) and the
    ordered processor's output, though compact runs without the processor
    setting."""
    settings = make_settings(reply_topics=f"{names['app_id']}.*replies")
    assert not settings.ordered.processor
    replies, processed = f"{names['app_id']}.shop.replies", settings.ordered.processed_topic
    unmatched = f"{names['app_id']}-other.replies"
    commands = settings.commands.command_topic  # (a command worker's: its replies count)
    asyncio.run(create_topics(broker.bootstrap, [replies, processed, unmatched, commands], 1))
    asyncio.run(put(broker.bootstrap, replies, [(b"c1", b'{"messageId":"c1:reply"}')]))
    asyncio.run(put(broker.bootstrap, processed, [(b"k", b'{"messageId":"m1:0"}')]))
    asyncio.run(put(broker.bootstrap, unmatched, [(b"k", b'{"messageId":"no"}')]))
    assert run_compact(spark, settings, tmp_path / "w") == {"audit": 1}
    rows = read_audit(spark, tmp_path / "w").collect()
    assert sorted((r.topic, r.id) for r in rows) == sorted(
        [(processed, "m1:0"), (replies, "c1:reply")]
    )
