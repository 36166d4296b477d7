"""The worker against a real broker: output verified, restarts on intact
local state (no changelog replay, no crash), and rebuilds from the changelog
when its data directory is gone; in each, it fetches no changelog partition
of its own table once recovered."""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from pathlib import Path

import pytest

from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess

pytestmark = pytest.mark.integration

REPLAYED = re.compile(r"table (\S+): replayed (\d+) changelog records")
#: A partition in the worker's diagnostics (SIGUSR1): name, then aiokafka's
#: view (position, paused, prefetched, highwater).
FETCHER_PARTITION = re.compile(r"'([^']+)/(\d+)': \((?:\d+|None), '(\w*)', '(\w*)', (?:\d+|None)\)")


def settings_for(make_settings) -> Settings:
    s = make_settings(partitions=3)
    asyncio.run(create_topics(s.broker.bootstrap, s.topics(), s.broker.partitions))
    return s


def replayed(log: str) -> dict[str, int]:
    """Changelog records replayed per table in the last recovery of ``log``."""
    found: dict[str, int] = {}
    for table, n in REPLAYED.findall(log):
        found[table] = int(n)
    return found


def fetcher_partitions(worker: WorkerProcess) -> dict[tuple[str, int], tuple[bool, bool]]:
    """(paused, prefetched) per partition of the running worker's aiokafka
    consumer, from its diagnostics (SIGUSR1)."""
    before = worker.log().count("'fetcher': ")
    deadline = time.monotonic() + 30
    while worker.log().count("'fetcher': ") == before:
        assert time.monotonic() < deadline, worker.log()[-3000:]
        worker.dump(wait=0.2)
    line = worker.log().split("'fetcher': ")[-1].split("\n")[0]
    # the producer's side too: where the records of a waiting send are
    state = worker.log().split("state: ")[-1].split("\n")[0]
    assert "'sends waiting (s, partitions)': [" in state, state
    assert "'sender routine': 'running'" in state, state
    return {
        (topic, int(p)): (paused == "paused", prefetched == "prefetched")
        for topic, p, paused, prefetched in FETCHER_PARTITION.findall(line)
    }


def check_fetching(settings: Settings, worker: WorkerProcess) -> None:
    """The worker fetches its input and no changelog partition of its table:
    they are paused in aiokafka and hold no fetched records (records nobody
    takes hold back every fetch from the broker for 100 ms)."""
    parts = fetcher_partitions(worker)
    changelogs = {
        tp: v for tp, v in parts.items() if tp[0] == f"{settings.group_id}-state-changelog"
    }
    inputs = {tp: v for tp, v in parts.items() if tp[0] == settings.ordered.input_topic}
    assert len(changelogs) == len(inputs) == settings.broker.partitions, parts
    assert all(v == (True, False) for v in changelogs.values()), changelogs
    assert not any(paused for paused, _ in inputs.values()), inputs


def run_phase(settings: Settings, records, log_path: Path) -> tuple[WorkerProcess, str]:
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, records))
    worker = WorkerProcess(settings, log_path).start()
    try:
        report = asyncio.run(wait_until_verified(settings, timeout=120, worker=worker))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        assert report.ordered_records > 0
        check_fetching(settings, worker)
    finally:
        code = worker.stop()
    assert code == 0, worker.log()[-3000:]
    return worker, worker.log()


@pytest.fixture
def split_workload():
    w = generate(messages=3000, keys=40, malformed=12, seed=11)
    cut = int(len(w.records) * 0.6)
    return w.records[:cut], w.records[cut:]


@pytest.mark.parametrize("instance_id", ["", "worker-a"], ids=["dynamic", "static"])
def test_restart_on_existing_state_resumes_without_replay(
    make_settings, tmp_path, split_workload, instance_id
) -> None:
    settings = settings_for(make_settings).with_overrides(instance_id=instance_id)
    first, second = split_workload
    run_phase(settings, first, tmp_path / "w1.log")
    # The restart is where the embedded broker's short ListOffsets answer made
    # Faust's recovery crash (ConsistencyError); the fetch high watermark fixes it.
    _, log = run_phase(settings, second, tmp_path / "w2.log")
    assert "ConsistencyError" not in log
    counts = replayed(log)
    assert set(counts) == {"state"}, log[-3000:]
    assert sum(counts.values()) == 0, counts
    # the clean stop named the keys to look at: no reading of every key's state
    assert log.count("(the keys named at the clean stop)") == settings.broker.partitions, log[
        -3000:
    ]
    assert "(every key's state)" not in log
    if instance_id:  # static membership: the member id carries the instance id
        assert f"with member_id {instance_id}" in log, log[-3000:]


def test_deleted_data_dir_is_rebuilt_from_changelog(
    make_settings, tmp_path, split_workload
) -> None:
    settings = settings_for(make_settings)
    first, second = split_workload
    run_phase(settings, first, tmp_path / "w1.log")
    shutil.rmtree(settings.runtime.data_dir)
    # Phase two holds redeliveries of phase-one messages and fills gaps that
    # phase one left buffered: only rebuilt state passes the verification.
    _, log = run_phase(settings, second, tmp_path / "w2.log")
    counts = replayed(log)
    assert counts["state"] > 0, counts
    assert "(the keys named at the clean stop)" not in log  # no local state, no index
    # without an index: the keys with reorder-buffer entries, not every key's state
    assert log.count("(keys with reorder-buffer entries)") == settings.broker.partitions, log[
        -3000:
    ]
    assert "(every key's state)" not in log
