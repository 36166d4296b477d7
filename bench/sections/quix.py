"""The ``quix`` section of the bench: seqkeeper beside Quix Streams, the
Python library its users compare it with, on the same broker and input, in
alternating rounds, in both processing guarantees.

Per system and guarantee: throughput, CPU per input record, changelog
records written per input record, peak RSS, and p99 latency at a fixed
moderate rate (:data:`MODERATE_RATE`) and at half of the system's own
throughput. The clocks are the same for both: the output's end offsets
under at-least-once; the group's committed input offsets under
exactly-once (end offsets would count commit markers), with the output
then read back read_committed. Quix's output is checked as ours is: every
message out, and no messageId twice under exactly-once."""

from __future__ import annotations

import asyncio
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from seqkeeper.bench.measure import (
    Figure,
    _cpu_seconds,
    _latency_figure,
    _median_figure,
    _peak_rss_mb,
    _per_input,
    _ratio_of_rounds,
    _tag,
    measure_output,
)
from seqkeeper.bench.rig import Bench
from seqkeeper.bench.sections.tally import Tally
from seqkeeper.fleet.processes import process
from seqkeeper.fleet.publishing import publish
from seqkeeper.topics import end_offsets_of, read_topic

if TYPE_CHECKING:
    pass


#: The fixed latency rate, besides half of each system's throughput: a
#: moderate load both keep up with on a small machine.
MODERATE_RATE = 2_000.0

#: Commit interval of both systems: Quix's default is 5 s, ours 1 s; the
#: same for both, so that neither's clock waits longer for its last commit.
COMMIT_INTERVAL = 1.0

#: Every figure of the section is named with it.
PREFIX = "quix section: "

#: seqkeeper's processing guarantee name → Quix Streams'.
QUIX_GUARANTEE = {"at_least_once": "at-least-once", "exactly_once": "exactly-once"}

#: The section's targets: seqkeeper's throughput at least this many times
#: Quix Streams' on the same input, and its p99 latency (ms) at the moderate
#: rate, per guarantee.
QUIX_RATIO = 1.5
P99_MS = {"at_least_once": 40.0, "exactly_once": 100.0}


class Sampler:
    """A process's CPU seconds, sampled at every look of a measurement (its
    ``alive`` callback), so that the CPU of the measured window alone can be
    taken, without the process's start-up (imports, group join)."""

    def __init__(self, pid: int | None, alive: Callable[[], bool]) -> None:
        self.pid, self.alive = pid, alive
        self.samples: list[tuple[float, float]] = []

    def __call__(self) -> bool:

        if self.alive():
            self.samples.append((time.monotonic(), _cpu_seconds(self.pid)))
            return True
        return False

    def since(self, start: float) -> float:
        """CPU seconds from the last sample at or before ``start`` to the
        last sample."""
        if not self.samples:
            return 0.0
        before = [cpu for at, cpu in self.samples if at <= start]
        return self.samples[-1][1] - (before[-1] if before else self.samples[0][1])


def quix_blocker(bootstrap: str) -> str | None:
    """Why Quix Streams cannot run here, or None."""
    if importlib.util.find_spec("quixstreams") is None:
        return "quixstreams is not installed (pip install 'seqkeeper[bench]')"
    if not asyncio.run(_describes_topic_configs(bootstrap)):
        return (
            "the broker answers DescribeConfigs empty, and Quix Streams derives its "
            "changelog topics' settings from the input topic's retention.ms"
        )
    return None


async def _describes_topic_configs(bootstrap: str) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from seqkeeper.security import kafka_options
    from seqkeeper.topics import create_topics

    probe = f"bench-quix-probe-{time.time_ns()}"
    await create_topics(bootstrap, [probe], 1)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
    await admin.start()
    try:
        answers = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, probe)])
        names = {entry[0] for answer in answers for res in answer.resources for entry in res[4]}
        return "retention.ms" in names
    finally:
        await admin.close()


@dataclass
class Run:
    """One throughput run of one system."""

    figure: Figure
    changelog_records: int = 0
    cpu_seconds: float = 0.0
    rss_mb: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def _changelog_records(bootstrap: str, topics: list[str]) -> int:
    """Records written to ``topics`` (end offsets: at-least-once writes no
    commit markers)."""
    if not topics:
        return 0
    return sum(asyncio.run(end_offsets_of(bootstrap, topics)).values())


async def _topics_named(bootstrap: str, prefix: str) -> list[str]:
    from aiokafka import AIOKafkaConsumer

    from seqkeeper.security import kafka_options

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **kafka_options())
    await consumer.start()
    try:
        return sorted(t for t in await consumer.topics() if t.startswith(prefix))
    finally:
        await consumer.stop()


def check_output(bootstrap: str, topic: str, ids: set[str], guarantee: str) -> dict[str, int]:
    """Every message of ``ids`` on ``topic``; under exactly-once (read
    read_committed), none twice. Raises if not; returns the counts."""
    committed = guarantee == "exactly_once"
    isolation = "read_committed" if committed else "read_uncommitted"
    records = asyncio.run(read_topic(bootstrap, topic, isolation=isolation))
    got = [orjson.loads(r.value)["messageId"] for r in records if r.value]
    missing = ids - set(got)
    if missing:
        raise RuntimeError(f"{topic}: {len(missing):,} of {len(ids):,} messages missing")
    twice = len(got) - len(set(got))
    if committed and twice:
        raise RuntimeError(f"{topic}: {twice:,} messages twice under exactly-once")
    return {"output records": len(got), "repeated": twice}


def quix_run(bench: Bench, guarantee: str, ids: set[str]) -> Run:
    """Quix Streams over the bench's workload (:mod:`seqkeeper.bench.quix`)."""
    tag = _tag("quix")
    src, dst = f"{tag}.in", f"{tag}.out"
    bench.topics([src, dst])
    asyncio.run(publish(bench.bootstrap, src, bench.records))
    with process(
        [sys.executable, "-m", "seqkeeper.bench.quix"],
        _quix_env(bench, tag, src, dst, guarantee),
        bench.workdir / f"{tag}.log",
    ) as p:
        measured = _measure(bench, guarantee, p.pid, lambda: p.poll() is None, dst, (tag, src))
    changelogs = asyncio.run(_topics_named(bench.bootstrap, f"changelog__{tag}"))
    run = _run(bench, "Quix Streams", guarantee, measured, dst, changelogs, ids)
    run.figure.detail["log"] = str(bench.workdir / f"{tag}.log")
    run.extra["changelog topics"] = changelogs
    return run


def seqkeeper_run(bench: Bench, guarantee: str, ids: set[str]) -> Run:
    """seqkeeper over the same workload, with the same commit interval."""
    from seqkeeper.worker import WorkerProcess

    tag = _tag("seqkeeper")
    s = bench.settings(tag, processing_guarantee=guarantee, commit_interval=COMMIT_INTERVAL)
    bench.topics(s.topics())
    asyncio.run(publish(bench.bootstrap, s.ordered.input_topic, bench.records))
    changelog = f"{s.group_id}-state-changelog"
    w = WorkerProcess(s, bench.workdir / f"{tag}.log", "warning").start()
    try:
        measured = _measure(
            bench,
            guarantee,
            w.pid,
            w.running,
            s.ordered.ordered_topic,
            (s.group_id, s.ordered.input_topic),
            start_on=[changelog, s.ordered.deduped_topic],
        )
    finally:
        w.stop()
    run = _run(bench, "seqkeeper", guarantee, measured, s.ordered.ordered_topic, [changelog], ids)
    run.figure.detail["log"] = str(w.log_path)
    return run


def _measure(
    bench: Bench,
    guarantee: str,
    pid: int | None,
    alive: Callable[[], bool],
    output: str,
    group_and_source: tuple[str, str],
    start_on: list[str] | None = None,
) -> tuple[float, int, float, float]:
    """(rate, records counted, CPU seconds of the measured window, peak RSS
    MB) of the running process ``pid`` writing ``output``: its output's end
    offsets under at-least-once, its group's committed input offsets under
    exactly-once (:func:`measure_output`)."""
    committed = guarantee == "exactly_once"
    sampler = Sampler(pid, alive)
    rate, counted = measure_output(
        bench.bootstrap,
        output,
        len(bench.records) if committed else bench.distinct,
        sampler,
        bench.timeout(bench.distinct),
        start_on=start_on or (),
        committed=group_and_source if committed else None,
    )
    return rate, counted, sampler.since(time.monotonic() - counted / rate), _peak_rss_mb(pid)


def _run(
    bench: Bench,
    system: str,
    guarantee: str,
    measured: tuple[float, int, float, float],
    output: str,
    changelogs: list[str],
    ids: set[str],
) -> Run:
    """A measured run as a figure, its output checked (:func:`check_output`)."""
    rate, counted, cpu, rss = measured
    checked = check_output(bench.bootstrap, output, ids, guarantee)
    if guarantee == "exactly_once":
        figure = _figure_committed(f"{system} {guarantee}", rate, counted)
        changelog_records = 0  # (end offsets would count commit markers)
    else:
        figure = _per_input(
            f"{system} {guarantee}: input per s", rate, len(bench.records), bench.distinct
        )
        changelog_records = _changelog_records(bench.bootstrap, changelogs)
    figure.detail.update(checked)
    return Run(figure, changelog_records, cpu, rss)


def _quix_env(bench: Bench, tag: str, src: str, dst: str, guarantee: str) -> dict[str, str]:
    return {
        "BENCH_BROKER": bench.bootstrap,
        "BENCH_IN": src,
        "BENCH_OUT": dst,
        "BENCH_APP": tag,
        "BENCH_DATA": str(bench.workdir / tag),
        "BENCH_GUARANTEE": QUIX_GUARANTEE[guarantee],
        "BENCH_COMMIT_INTERVAL": f"{COMMIT_INTERVAL:g}",
    }


def _figure_committed(name: str, rate: float, counted: int) -> Figure:
    return Figure(
        f"{name}: input per s to committed offsets",
        rate,
        "msg/s",
        detail={"counted": counted, "clock": "first sign of work to committed input offsets"},
    )


def quix_latency(bench: Bench, guarantee: str, rate: float) -> Figure:
    """Quix's p99 latency at ``rate`` (read as a consumer of its output
    would: read_committed under exactly-once)."""

    tag = _tag("quix-latency")
    src, dst = f"{tag}.in", f"{tag}.out"
    bench.topics([src, dst])
    isolation = "read_committed" if guarantee == "exactly_once" else "read_uncommitted"
    with process(
        [sys.executable, "-m", "seqkeeper.bench.quix"],
        _quix_env(bench, tag, src, dst, guarantee),
        bench.workdir / f"{tag}.log",
    ):
        lat = asyncio.run(bench._latency(src, dst, rate, bench.sizes.latency_seconds, isolation))
    figure = _latency_figure(
        f"Quix Streams {guarantee}, latency p99 at {rate:,.0f} msg/s, in order", lat
    )
    figure.detail["isolation"] = isolation
    return figure


def section(bench: Bench) -> tuple[list[Figure], list[Figure]]:
    """(figures, ratios) of the ``quix`` section."""
    from seqkeeper.runtime.guarantee import has_transactions

    blocker = quix_blocker(bench.bootstrap)
    if blocker is not None:
        bench.say(f"Quix Streams: not measured ({blocker})")
        na = Figure(
            "seqkeeper / Quix Streams: not measured (n/a)", 0.0, "", f"≥ {QUIX_RATIO}", None
        )
        na.detail["why"] = blocker
        return [], [na]
    guarantees = ["at_least_once"]
    if asyncio.run(has_transactions(bench.bootstrap, f"{bench.workdir.name}-quix-probe")):
        guarantees.append("exactly_once")
    figures: list[Figure] = []
    ratios: list[Figure] = []
    rounds = max(1, bench.sizes.rounds)
    n_in = len(bench.records)
    ids = {orjson.loads(v)["messageId"] for _, v in bench.records if v}
    for guarantee in guarantees:
        runs: dict[str, list[Run]] = {"seqkeeper": [], "Quix Streams": []}
        for n in range(1, rounds + 1):
            bench.say(f"seqkeeper and Quix Streams, {guarantee}, round {n} of {rounds}")
            # the order flips each round: a machine that drifts favours neither
            order = ["seqkeeper", "Quix Streams"] if n % 2 else ["Quix Streams", "seqkeeper"]
            for system in order:
                run = (seqkeeper_run if system == "seqkeeper" else quix_run)(bench, guarantee, ids)
                runs[system].append(run)
                bench.say(f"  {system}: {run.figure.value:,.0f} msg/s")
        for system, done in runs.items():
            figure = _median_figure([r.figure for r in done])
            figure.detail["cpu µs per input record"] = [
                round(r.cpu_seconds / n_in * 1e6, 1) for r in done
            ]
            figure.detail["peak RSS MB"] = [round(r.rss_mb) for r in done]
            if guarantee == "at_least_once":
                figure.detail["changelog records per input record"] = [
                    round(r.changelog_records / n_in, 2) for r in done
                ]
            figures.append(figure)
            figures.append(
                Figure(
                    f"{system} {guarantee}: CPU per input record",
                    statistics.median([r.cpu_seconds / n_in * 1e6 for r in done]),
                    "µs",
                )
            )
            figures.append(
                Figure(
                    f"{system} {guarantee}: peak RSS",
                    statistics.median([r.rss_mb for r in done]),
                    "MB",
                )
            )
            if guarantee == "at_least_once":
                figures.append(
                    Figure(
                        f"{system}: changelog records per input record",
                        statistics.median([r.changelog_records / n_in for r in done]),
                        "records",
                    )
                )
        ratios.append(
            _ratio_of_rounds(
                f"seqkeeper / Quix Streams, {guarantee}",
                [r.figure for r in runs["seqkeeper"]],
                [r.figure for r in runs["Quix Streams"]],
                f"≥ {QUIX_RATIO}",
                QUIX_RATIO,
            )
        )
        half = {
            s: max(10.0, statistics.median([r.figure.value for r in done]) / 2)
            for s, done in runs.items()
        }
        for rate_name, rates in (("moderate", dict.fromkeys(runs, MODERATE_RATE)), ("half", half)):
            bench.say(f"latency, {guarantee}, {rate_name} rate")
            ours = bench.latency(
                rates["seqkeeper"],
                read_committed=guarantee == "exactly_once",
                name=f"seqkeeper {guarantee}",
                processing_guarantee=guarantee,
                commit_interval=COMMIT_INTERVAL,
            )
            if rate_name == "moderate":
                ours.target = f"p99 ≤ {P99_MS[guarantee]:g} ms"
                ours.met = ours.value <= P99_MS[guarantee]
            theirs = quix_latency(bench, guarantee, rates["Quix Streams"])
            bench.say(f"  p99 seqkeeper {ours.value:,.0f} ms, Quix {theirs.value:,.0f} ms")
            figures.extend([ours, theirs])
    # (the names apart from the other sections' figures of seqkeeper)
    for figure in figures:
        figure.name = f"{PREFIX}{figure.name}"
    return figures, ratios


def run(bench: Bench, tally: Tally) -> None:
    """seqkeeper beside Quix Streams (:func:`section`)."""
    more, more_ratios = section(bench)
    tally.figures.extend(more)
    tally.ratios.extend(more_ratios)
