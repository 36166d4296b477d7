"""kill -9 against a real broker: a restarted worker loses nothing, keeps
per-key order; under at_least_once what it emits again is byte-identical
(counted), under exactly_once a read_committed reader sees nothing twice.
It keeps its local state and replays only the changelog records after the
offset that state holds."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from seqkeeper.bench.restarts import local_offsets
from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.runtime.repartition import group_of
from seqkeeper.runtime.task import read_members
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker
from tests.integration.replays import Replayed, changelog_of, replayed

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("guarantee", ["auto", "at_least_once"])
def test_kill_9_while_processing_loses_nothing(
    make_settings, tmp_path, broker: Broker, guarantee: str
) -> None:
    """``auto`` is exactly_once on Apache Kafka and at_least_once on the
    embedded broker; at_least_once runs on Apache Kafka too."""
    if guarantee == "at_least_once" and broker.is_tansu:
        pytest.skip("auto is at_least_once on the embedded broker")
    mode = "exactly_once" if guarantee == "auto" and not broker.is_tansu else "at_least_once"
    isolation = "read_committed" if mode == "exactly_once" else "read_uncommitted"
    settings = make_settings(partitions=3, gap_timeout=600.0, processing_guarantee=guarantee)
    asyncio.run(
        create_topics(settings.broker.bootstrap, settings.topics(), settings.broker.partitions)
    )
    w = generate(messages=6000, keys=60, malformed=6, seed=5)
    kills = 3
    n = len(w.records)
    waves = [w.records[i * n // (kills + 1) : (i + 1) * n // (kills + 1)] for i in range(kills + 1)]
    rng = random.Random(5)
    logs = []
    tails: list[dict[int, list[int]]] = []  # per kill, what the restart must replay
    for i in range(kills):
        asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, waves[i]))
        worker = WorkerProcess(settings, tmp_path / f"killed-{i}.log").start()
        worker.wait_ready()
        time.sleep(rng.uniform(0.5, 2.5))  # in the middle of the wave
        worker.kill()
        logs.append(worker.log())
        # What the next start finds: the local offsets and the changelog
        local = local_offsets(settings.runtime.data_dir)
        offsets, _ = changelog_of(settings, mode)
        tails.append({p: [o for o in offsets[p] if o > local.get(p, -1)] for p in offsets})
        print(f"kill {i}: local offsets {local}, tail {[len(t) for t in tails[-1].values()]}")
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, waves[kills]))
    final = WorkerProcess(settings, tmp_path / "final.log").start()
    try:
        report = asyncio.run(
            wait_until_verified(settings, timeout=180, worker=final, isolation=isolation)
        )
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        assert report.valid_messages >= 6000
        if mode == "exactly_once":
            assert report.reemitted == {"ordered": 0, "deduped": 0, "dlq": 0}, report.reemitted
    finally:
        assert final.stop() == 0
    # every restart after a kill kept its local state and replayed, per
    # partition, exactly the changelog records after the offset it held
    restarts = [*logs[1:], final.log()]
    assert all("did not stop cleanly" in log and "is kept" in log for log in restarts)
    for log, tail in zip(restarts, tails, strict=True):
        replays = replayed(log)
        for p, records in tail.items():
            r = replays.get(p, Replayed())
            got = (r.count, r.first, r.last)
            want = (len(records), records[0], records[-1]) if records else (0, None, None)
            assert got == want, (p, got, want, log[-3000:])
    assert all(f"processing guarantee: {mode}" in log for log in [*logs, final.log()])
    print("re-emitted:", report.reemitted)


def group_members(bootstrap: str, group: str) -> list[str]:
    """The member ids the group coordinator lists for ``group``."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def describe() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            (response,) = await admin.describe_consumer_groups([group])
            (described,) = response.groups
            return [member[0] for member in described[5]]  # (members: member_id first)
        finally:
            await admin.close()

    return asyncio.run(describe())


def test_a_restart_after_kill_9_removes_the_dead_member_from_the_group(
    make_settings, tmp_path, broker: Broker
) -> None:
    """Under dynamic membership the killed worker's members (the worker's
    group and its repartition stage's) would stay in their groups until
    their sessions expire (20 s or more here); the restart removes them first, so
    the groups rebalance without them at once. A clean stop left the
    groups itself: the start after it removes nothing."""
    # (the session must outlast the second worker's start, or the dead
    # member expires before the restart can remove it: on a loaded machine
    # a start took longer than 20 s on Kafka; the embedded broker joins in
    # half the session, so it keeps 20 s)
    session = 20.0 if broker.is_tansu else 45.0
    settings = make_settings(session_timeout=session, key_field="account.id")
    groups = [settings.group_id, group_of(settings)]
    asyncio.run(
        create_topics(settings.broker.bootstrap, settings.topics(), settings.broker.partitions)
    )
    kept = settings.runtime.data_dir / "group.members"

    def members_of(worker: WorkerProcess, old: dict[str, str]) -> dict[str, str]:
        """The member ids of ``worker``'s completed joins, once it has one in each group."""
        deadline = time.monotonic() + 60
        while True:  # (the repartition stage joins beside the worker)
            now = {g: m.id for g, m in read_members(kept).items() if m.joined}
            if all(now.get(g) not in (None, old.get(g)) for g in groups):
                return now
            worker.check_alive()
            assert time.monotonic() < deadline, (now, worker.log()[-3000:])
            time.sleep(0.1)

    first = WorkerProcess(settings, tmp_path / "first.log").start()
    first.wait_ready()
    dead = members_of(first, {})
    first.kill()
    for group in groups:
        assert group_members(settings.broker.bootstrap, group) == [dead[group]]

    second = WorkerProcess(settings, tmp_path / "second.log").start()
    try:
        second.wait_ready()
        alive = members_of(second, dead)
        log = second.log()
        for group in groups:
            line = f"removed the previous worker's member {dead[group]} from group {group!r}"
            assert line in log, log[-3000:]
            # the dead member is gone long before its session would expire
            # (the embedded broker may list the repartition stage's still:
            # its deviation 4, a member that left stays until its session ends)
            if group == settings.group_id or not broker.is_tansu:
                assert group_members(settings.broker.bootstrap, group) == [alive[group]]
    finally:
        assert second.stop() == 0
    assert not kept.exists()  # (a clean stop left the groups)

    third = WorkerProcess(settings, tmp_path / "third.log").start()
    try:
        third.wait_ready()
        assert "previous worker's member" not in third.log()
    finally:
        assert third.stop() == 0


def test_a_worker_killed_before_its_join_completed_is_joined_as(
    make_settings, tmp_path, broker: Broker
) -> None:
    """The member id is kept as the coordinator gives it (the first
    JoinGroup's answer), not once the join completed: a worker killed in
    between leaves a member the coordinator counts in until its session
    expires, and the restart joins as that member (its second JoinGroup,
    KIP-394). The group then rebalances once: a LeaveGroup would not do on
    the embedded broker, which keeps such a member (its deviation 4) and
    rebalanced again when the member's session expired. On the embedded
    broker a join takes half the session (10 s here), so the kill lands
    inside it; Apache Kafka may complete the join first, and then the dead
    member is removed instead."""
    settings = make_settings(session_timeout=20.0)
    asyncio.run(
        create_topics(settings.broker.bootstrap, settings.topics(), settings.broker.partitions)
    )
    kept = settings.runtime.data_dir / "group.members"
    first = WorkerProcess(settings, tmp_path / "first.log").start()
    deadline = time.monotonic() + 60
    while settings.group_id not in read_members(kept):
        first.check_alive()
        assert time.monotonic() < deadline, first.log()[-3000:]
        time.sleep(0.02)
    first.kill()
    given = read_members(kept)[settings.group_id]
    if broker.is_tansu:
        assert "Joined group" not in first.log() and not given.joined  # (inside the join)
    second = WorkerProcess(settings, tmp_path / "second.log").start()
    try:
        second.wait_ready()
        log = second.log()
        if given.joined:
            assert f"removed the previous worker's member {given.id}" in log, log[-3000:]
        else:
            line = f"joining group {settings.group_id!r} as the previous worker's member {given.id}"
            assert line in log, log[-3000:]
            assert f"Joined group {settings.group_id!r} (generation" in log
            assert f"with member_id {given.id}" in log, log[-3000:]
        # the group did not wait for the dead member, then rebalance
        assert log.count("Joined group") == 1, log[-3000:]
    finally:
        assert second.stop() == 0
