"""Each override of seqkeeper.adapter is in effect in the app the worker runs,
and does what its module says; no broker is needed (the consumer objects
are built, never started). Overrides that need a broker are tested in
tests/integration (see seqkeeper.adapter's docstring)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from faust.tables.recovery import Recovery
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from seqkeeper.adapter import (
    batches,
    commit,
    getmany,
    highwater,
    options,
    recovery,
    store,
    tables,
)
from seqkeeper.adapter.lifecycle import Idle
from seqkeeper.adapter.records import RawTopics
from seqkeeper.adapter.tables import raw_table
from seqkeeper.adapter.transport import Consumer
from seqkeeper.runtime.wiring import make_app, raw_topic
from seqkeeper.settings import Settings


def app_for(tmp_path: Path, **overrides: Any) -> Any:
    settings = Settings.of(bootstrap="127.0.0.1:1", data_dir=tmp_path, web_port=6066, **overrides)
    return make_app(settings)


def test_the_app_runs_every_override(tmp_path: Path) -> None:
    async def main() -> None:
        app = app_for(tmp_path)
        consumer = app.consumer
        for override in (
            commit.CommitHookConsumer,
            getmany.SnapshotGetmanyConsumer,
            batches.BatchFetchConsumer,
        ):
            assert isinstance(consumer, override), override
        for thread_override in (
            options.OptionsThread,
            highwater.HighwaterThread,
            recovery.PauseUnreadThread,
        ):
            assert isinstance(consumer._thread, thread_override), thread_override
        assert isinstance(app.tables, tables.TableManager)
        assert isinstance(app.tables.recovery, recovery.SeekFirstRecovery)
        assert isinstance(app.tables.recovery, Recovery)
        table = raw_table(app, "state", 2)
        assert isinstance(table.data, store.FaustStore)

    asyncio.run(main())


def test_the_consumer_gets_the_options_faust_does_not_expose(tmp_path: Path) -> None:
    """Faust fixes the fetch wait at 1500 ms, has no static membership and
    builds every record as a ConsumerRecord (adapter.options)."""

    async def main() -> None:
        app = app_for(tmp_path, fetch_max_wait=0.03, instance_id="worker-a")
        batches.batch_source(app, raw_topic(app, "events.in", 1))
        built = app.consumer._thread._create_worker_consumer(app.transport)
        assert built._fetch_max_wait_ms == 30
        assert built._group_instance_id == "worker-a"
        assert isinstance(built._key_deserializer, RawTopics)
        assert "events.in" in built._key_deserializer.topics
        # Faust's own thread, for contrast: what the override changes
        plain = faust_aiokafka.AIOKafkaConsumerThread(app.consumer, loop=app.loop)
        faust_built = plain._create_worker_consumer(app.transport)
        assert faust_built._fetch_max_wait_ms != 30
        assert faust_built._group_instance_id is None

    asyncio.run(main())


class RecordingConsumer(Consumer):
    """The app's consumer, whose commit request is recorded, not sent."""

    calls: list[Any]

    async def _commit(self, offsets: Any) -> bool:
        self.calls.append(("commit", dict(offsets)))
        return True

    def assignment(self) -> set[TP]:
        return {TP("events.in", 0)}


def test_hooks_run_before_every_commit_and_only_assigned_offsets_are_committed(
    tmp_path: Path,
) -> None:
    """adapter.commit: the app's lifecycle's before_commit (the runtime's
    outbox cycle) runs first; the commit then covers only assigned partitions,
    without flushing the whole producer."""

    async def main() -> None:
        app = app_for(tmp_path)
        calls: list[Any] = []

        class Hooked(Idle):
            async def before_commit(self) -> None:
                calls.append("hook")

        async def nothing(*args: Any) -> None:
            return None

        app.install(Hooked())
        consumer = RecordingConsumer(
            app.transport,
            callback=nothing,
            on_partitions_revoked=nothing,
            on_partitions_assigned=nothing,
        )
        consumer.calls = calls
        done = await consumer._commit_offsets({TP("events.in", 0): 5, TP("events.in", 1): 7})
        assert done
        assert calls == ["hook", ("commit", {TP("events.in", 0): 5})]
        assert consumer._committed_offset[TP("events.in", 0)] == 5

    asyncio.run(main())
