"""``failover``: two workers, one killed: time until its partitions' output
flows again on the survivor, with a standby replica and without; what
standbys cost in throughput and CPU."""

from __future__ import annotations

import asyncio
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from seqkeeper.adapter.producer import Partitioner
from seqkeeper.bench.measure import (
    Figure,
    _cpu_seconds,
    _median_figure,
    _per_input,
    _ratio_of_rounds,
    _tag,
    measure_output,
)
from seqkeeper.bench.restarts import (
    phases,
    replayed,
    roles,
    since,
)
from seqkeeper.bench.rig import (
    PINNED,
    Bench,
    Records,
    changelog_ends,
)
from seqkeeper.bench.sections.tally import Tally
from seqkeeper.broker import free_port
from seqkeeper.fleet.offsets import end_offsets
from seqkeeper.fleet.probes import first_new_per_partition
from seqkeeper.fleet.processes import WorkerProcess
from seqkeeper.fleet.publishing import Background, publish, trickle
from seqkeeper.settings import Settings

#: The target for a failover to a standby replica: from the survivor's
#: assignment of the dead worker's partitions to their first output.
FAILOVER_S = 5.0


def run(bench: Bench, tally: Tally) -> None:
    """Failover to a standby replica and without one; what standbys cost."""
    bench.say("failover to a standby replica, two workers; then without one")
    took: dict[int, Figure] = {}
    for replicas in (1, 0):
        bench.say(f"  SEQKEEPER_STANDBY_REPLICAS={replicas}")
        took[replicas], session = failover(bench, replicas)
        tally.figures.extend([took[replicas], session])
    tally.ratios.append(
        Figure(
            "failover, assignment to first new output: without a standby / with one",
            took[0].value / took[1].value,
            "×",
            detail={"with": took[1].value, "without": took[0].value, "round": "one each"},
        )
    )
    # what standbys cost: the same two workers, replicas 1 against 0
    ones: list[Figure] = []
    zeros: list[Figure] = []
    rounds = max(1, bench.sizes.rounds)

    def measure(replicas: int) -> Figure:
        figure = standby_cost(bench, replicas)
        bench.say(
            f"  replicas {replicas}: {figure.value:,.0f} msg/s, CPU "
            f"{figure.detail['CPU s']:.1f} s, "
            f"{figure.detail['standby records applied']:,} standby records applied"
        )
        return figure

    for n in range(1, rounds + 1):
        # the order flips each round: a machine that drifts favours neither
        bench.say(f"standby cost, round {n} of {rounds}")
        if n % 2:
            zeros.append(measure(0))
            ones.append(measure(1))
        else:
            ones.append(measure(1))
            zeros.append(measure(0))
    tally.figures.extend([_median_figure(zeros), _median_figure(ones)])
    ratio = _ratio_of_rounds("two workers: 1 standby replica / none", ones, zeros, "", 0.0)
    ratio.met = None
    tally.ratios.append(ratio)
    per = [
        (one.detail["CPU s"] - zero.detail["CPU s"])
        / max(1, one.detail["standby records applied"])
        * 1e6
        for one, zero in zip(ones, zeros, strict=True)
    ]
    tally.figures.append(
        Figure(
            "CPU per standby changelog record applied, two workers",
            statistics.median(per),
            "µs",
            detail={
                "rounds": per,
                "how": "(CPU s of both workers with 1 replica - with none, the same "
                "round) / standby records both applied; median of the rounds",
            },
        )
    )


def pair(
    bench: Bench, s: Settings, tag: str, suffix: str = ""
) -> tuple[WorkerProcess, WorkerProcess]:
    """Workers A and B of ``s``'s group (dynamic membership), each with
    its own data directory and web port (its ``/metrics``), started, at
    info (their recovery reports name the partitions they hold)."""
    workers = []
    for name in ("a", "b"):
        ws = s.with_overrides(data_dir=bench.workdir / tag / name, web_port=free_port())
        log = bench.workdir / f"{tag}-{name}{suffix}.log"
        workers.append(WorkerProcess(ws, log, "info").start())
    return workers[0], workers[1]


def failover(
    bench: Bench, replicas: int, session_timeout: float | None = None
) -> tuple[Figure, Figure]:
    """Two workers, A and B, with ``replicas`` standby replicas, build
    ``state_keys`` keys of state; input flows (the next message of a
    tenth of the keys); once half of its outputs are out, A is killed
    with ``kill -9``, and one more message goes to each of A's
    partitions. B takes A's partitions when A's session expires. Two
    figures: from B's assignment of them (the first "Setting newly
    assigned partitions" in B's log after the kill) to the first output
    on each of them that was not there before the kill (the slowest
    partition's), and from the kill to that assignment. In the detail,
    per partition B took over: what B's log says it replayed, the
    changelog's end at the kill, and each partition's first new output;
    and the phases of B's log after the kill (:func:`phases`, seconds
    from the kill)."""
    n = bench.sizes.state_keys
    tag = _tag(f"failover{replicas}")
    over: dict[str, Any] = {"standby_replicas": replicas, "processing_guarantee": PINNED}
    if session_timeout is not None:
        over["session_timeout"] = session_timeout
    s = bench.settings(tag, **over)
    bench.topics(s.topics())
    ordered, source = s.ordered.ordered_topic, s.ordered.input_topic
    a, b = pair(bench, s, tag)
    try:
        # both in the group before the state: neither restores the other's
        _settled([a, b], s.broker.partitions, replicas)
        records = [
            (f"s{k:07d}".encode(), orjson.dumps({"messageId": f"s{k}", "seq": 1, "type": "t"}))
            for k in range(n)
        ]
        asyncio.run(publish(bench.bootstrap, source, records))
        alive = lambda: a.running() and b.running()  # noqa: E731
        measure_output(bench.bootstrap, ordered, n, alive, bench.timeout(n))
        moved = sorted(roles(a.log())["active"])
        caught_up = None
        built = changelog_ends(bench.bootstrap, s)
        if replicas:
            # less a partition's first record (its state format marker),
            # which B may hold already and then never replays: under load B
            # can be alone in the group for a moment before A joins, take
            # every partition and mark it
            want = sum(built[p] for p in moved) - len(moved)
            caught_up = _wait_applied(b, want, bench.timeout(want))
        # input flowing: the next message of a tenth of the keys, in chunks
        more = max(1, min(n - 1, n // 10))
        starts = asyncio.run(end_offsets(bench.bootstrap, ordered))
        flow = [
            (
                f"s{k:07d}".encode(),
                orjson.dumps({"messageId": f"s{k}:2", "seq": 2, "type": "t"}),
            )
            for k in range(1, more + 1)
        ]
        feeder = Background(lambda stop: trickle(bench.bootstrap, source, flow, stop), "flow")
        measure_output(
            bench.bootstrap, ordered, sum(starts.values()) + more // 2, alive, bench.timeout(more)
        )
        moved = sorted(roles(a.log())["active"])  # (as A holds them at the kill)
        a.kill()
        killed_at = time.time()
        # one more message on each of A's partitions: new input for each
        pick = Partitioner(list(range(s.broker.partitions)))
        markers: Records = []
        for p in moved:
            k = next(k for k in range(10_000) if pick(f"m{p}-{k}".encode()) == p)
            key = f"m{p}-{k}"
            markers.append((key.encode(), orjson.dumps({"messageId": key, "seq": 1, "type": "t"})))
        asyncio.run(publish(bench.bootstrap, source, markers))
        # (A's writes in flight land; nobody writes its partitions till B takes them)
        time.sleep(0.5)
        at_kill = asyncio.run(end_offsets(bench.bootstrap, ordered))
        ends = changelog_ends(bench.bootstrap, s)
        firsts = asyncio.run(
            first_new_per_partition(
                bench.bootstrap,
                ordered,
                {p: starts[p] for p in moved},
                at_kill,
                b.running,
                s.runtime.session_timeout + 600,
            )
        )
        feeder.stop()
        feeder.join(60)
        if feeder.failed:
            raise RuntimeError(f"publishing the input failed: {feeder.failed[0]!r}")
    finally:
        if a.running():
            a.kill()
        b.stop()
    log = since(b.log(), killed_at)
    # (``logging``, B's first line after the kill, is no phase of the failover)
    steps = {k: v for k, v in phases(log, killed_at).items() if k != "logging"}
    if "assigned" not in steps:
        raise RuntimeError(f"no assignment in B's log after the kill: {b.log_path}")
    assigned = steps["assigned"]
    said = replayed(log)
    partitions: dict[str, Any] = {}
    for p in moved:
        r = said.get(p)
        first_any, first_new, reemitted = firsts[p]
        partitions[str(p)] = {
            "changelog end before the flow": built.get(p, 0),
            "changelog end at the kill": ends.get(p, 0),
            "replayed": 0 if r is None else r.count,
            "first": None if r is None else r.first,
            "last": None if r is None else r.last,
            "local": None if r is None else r.local,
            "recoveries": 0 if r is None else r.recoveries,
            # B's copy ended here when it took the partition
            "standby offset": (
                None if r is None else (r.first - 1 if r.count and r.first else r.local)
            ),
            "first output s after assignment": first_any - killed_at - assigned,
            "first new output s after assignment": first_new - killed_at - assigned,
            "re-emitted outputs before it": reemitted,
        }
    took = max(v["first new output s after assignment"] for v in partitions.values())
    slowest = max(firsts.values(), key=lambda f: f[1])[1] - killed_at
    steps = {**steps, "first new output, every partition": slowest}
    standby = "standby replica" if replicas == 1 else "standby replicas"
    what = f"{replicas} {standby}, two workers, {n:,} keys of state, {PINNED}"
    detail: dict[str, Any] = {
        "membership": "dynamic (no instance id)",
        "session timeout s": s.runtime.session_timeout,
        "moved partitions": moved,
        "partitions": partitions,
        "replayed": sum(v["replayed"] for v in partitions.values()),
        "changelog records of the moved partitions": sum(ends.get(p, 0) for p in moved),
        "changelog": f"{s.group_id}-state-changelog",
        "input flowing": more,
        "standby caught up before the flow": caught_up,
        "phases s": steps,
        "log": str(b.log_path),
        "log of A": str(a.log_path),
    }
    bench.say(
        f"  {replicas} standby: assigned {assigned:.1f} s after the kill, first new output on "
        f"every moved partition {took:.1f} s after that; replayed {detail['replayed']:,} of "
        f"{detail['changelog records of the moved partitions']:,} changelog records; "
        + ", ".join(f"{k} {v:.1f}" for k, v in steps.items() if k != "assignments")
    )
    target = f"< {FAILOVER_S:g} s" if replicas else ""
    return (
        Figure(
            f"failover, assignment to first new output on every moved partition, {what}",
            took,
            "s",
            target,
            took < FAILOVER_S if replicas else None,
            detail,
        ),
        Figure(
            f"failover, kill -9 to the survivor's assignment, {what}",
            assigned,
            "s",
            detail={
                "session timeout s": s.runtime.session_timeout,
                "phases s": {k: v for k, v in steps.items() if k in ("joining", "assigned")},
            },
        ),
    )


def standby_cost(bench: Bench, replicas: int) -> Figure:
    """Throughput of the workload through two workers with ``replicas``
    standby replicas, timed from the start of its publication (both
    workers in the group by then); in the detail, each worker's CPU
    seconds and the standby changelog records it applied (its
    ``/metrics``), both read once the changelogs and the standbys are
    still (a standby may trail the output)."""
    tag = _tag(f"standby{replicas}")
    s = bench.settings(tag, standby_replicas=replicas, processing_guarantee=PINNED)
    bench.topics(s.topics())
    a, b = pair(bench, s, tag)
    workers = [a, b]
    try:
        _settled(workers, s.broker.partitions, replicas)
        # (what the assignments wrote, such as each partition's state
        # format marker, counted out of both once the standbys have it)
        before = _still(
            lambda: (
                sum(changelog_ends(bench.bootstrap, s).values()),
                sum(_standby_applied(w) for w in workers),
            )
        )[0]
        cpu0 = [_cpu_seconds(w.pid) for w in workers]
        applied0 = [_standby_applied(w) for w in workers]
        rate, counted = measure_output(
            bench.bootstrap,
            s.ordered.ordered_topic,
            bench.distinct,
            lambda: a.running() and b.running(),
            bench.timeout(bench.distinct),
            feed=lambda: asyncio.run(
                publish(bench.bootstrap, s.ordered.input_topic, bench.records)
            ),
        )
        changelog = (
            _still(
                lambda: (
                    sum(changelog_ends(bench.bootstrap, s).values()),
                    sum(_standby_applied(w) for w in workers),
                )
            )[0]
            - before
        )
        cpu = [_cpu_seconds(w.pid) - c for w, c in zip(workers, cpu0, strict=True)]
        applied = [_standby_applied(w) - c for w, c in zip(workers, applied0, strict=True)]
    finally:
        for w in workers:
            w.stop()
    standby = "standby replica" if replicas == 1 else "standby replicas"
    figure = _per_input(
        f"two workers, {replicas} {standby}, {PINNED}", rate, len(bench.records), bench.distinct
    )
    figure.detail.update(
        {
            "counted": counted,
            "timed": "from the start of the input's publication",
            "CPU s per worker": cpu,
            "CPU s": sum(cpu),
            "standby records applied per worker": applied,
            "standby records applied": sum(applied),
            "changelog records": changelog,
            "logs": [str(w.log_path) for w in workers],
        }
    )
    return figure


def _settled(
    workers: list[WorkerProcess], partitions: int, replicas: int, timeout: float = 180.0
) -> list[dict[str, set[int]]]:
    """Wait until ``workers`` share the ``partitions`` as their last
    recovery reports say: each active for some, together for each once
    (and each standby for some, with ``replicas``); what each holds."""
    deadline = time.monotonic() + timeout
    while True:
        held = [roles(w.log()) for w in workers]
        actives = [h["active"] for h in held]
        if (
            all(actives)
            and sum(len(x) for x in actives) == partitions
            and set().union(*actives) == set(range(partitions))
            and (not replicas or all(h["standby"] for h in held))
        ):
            return held
        for w in workers:
            w.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the workers did not share the partitions: {held}")
        time.sleep(0.2)


def _standby_applied(worker: WorkerProcess) -> int:
    """The standby changelog records ``worker`` applied since it started
    (``seqkeeper_changelog_replayed_total{role="standby"}`` of its ``/metrics``)."""
    import urllib.request

    url = f"http://127.0.0.1:{worker.settings.runtime.web_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - our own worker
        text = answer.read().decode()
    m = re.search(r'^seqkeeper_changelog_replayed_total\{role="standby"\} (\S+)$', text, re.M)
    return int(float(m.group(1))) if m else 0


def _wait_applied(worker: WorkerProcess, want: int, timeout: float) -> bool:
    """Wait until ``worker``'s standbys applied ``want`` changelog records;
    whether they did within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while _standby_applied(worker) < want:
        worker.check_alive()
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _still(look: Callable[[], Any], timeout: float = 60.0, looks: int = 4) -> Any:
    """What ``look()`` says once it says the same ``looks`` times in a row,
    0.5 s apart (or after ``timeout`` seconds). Twice was too few: once all
    the output was out, the changelog of a pair without standbys read the
    same twice at 977,206 of the workload's 1,000,000 records."""
    deadline = time.monotonic() + timeout
    last, same = look(), 1
    while same < looks and time.monotonic() < deadline:
        time.sleep(0.5)
        now = look()
        same = same + 1 if now == last else 1
        last = now
    return last
