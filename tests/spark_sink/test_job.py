"""``seqkeeper compact``'s job: the app's changelog and message topics that
exist are compacted in one run."""

from __future__ import annotations

import asyncio

import pytest

from seqkeeper.spark_sink.audit import read_audit
from seqkeeper.spark_sink.job import plan_topics, run_compact
from seqkeeper.spark_sink.snapshots import read_snapshot
from seqkeeper.topics import create_topics
from tests.spark_sink.test_snapshots import put

pytestmark = pytest.mark.integration


def test_compacts_the_topics_that_exist(spark, broker, make_settings, tmp_path) -> None:
    settings = make_settings()
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
