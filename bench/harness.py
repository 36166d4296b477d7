"""``seqkeeper bench``: every section (:mod:`seqkeeper.bench.sections`, a
module each) measured in one run, on one broker, with the same input
(:class:`~seqkeeper.bench.rig.Bench`), and printed as one table of ratios
and absolute figures; JSON and PNG plots under ``bench/results/``
(:mod:`seqkeeper.bench.report`).

A new section: a module in ``bench/sections/`` with ``run(bench, tally)``,
its name in :data:`SECTIONS` and :data:`RUNS` below (in the order they run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from seqkeeper.bench.measure import Figure
from seqkeeper.bench.report import write as write
from seqkeeper.bench.rig import FULL as FULL
from seqkeeper.bench.rig import SMOKE as SMOKE
from seqkeeper.bench.rig import Bench as Bench
from seqkeeper.bench.sections import (
    depth,
    failover,
    guarantee,
    quix,
    restart,
    soak,
    spark,
    throughput,
)
from seqkeeper.bench.sections.tally import Tally
from seqkeeper.fleet.machine import machine, now_utc

SECTIONS = (
    "throughput",
    "latency",
    "quix",
    "guarantee",
    "depth",
    "restart",
    "failover",
    "spark",
    "soak",
)


def sections(only: set[str] | None) -> set[str] | None:
    """What ``--only`` asks for, as ``run`` runs it: ``latency`` with the
    throughput rounds (it is measured at half the throughput they find).
    A name that is no section is refused (``ValueError``, one line): an
    empty table would look like a run."""
    if only is None:
        return None
    unknown = sorted(only - set(SECTIONS))
    if unknown:
        raise ValueError(
            f"no bench section {', '.join(unknown)}: the sections are {', '.join(SECTIONS)}"
        )
    return only | {"throughput"} if "latency" in only else only


#: Each section's measurement, in the order ``run`` runs them (``latency``
#: runs with ``throughput``, at half of the throughput it finds).
RUNS: dict[str, Callable[[Bench, Tally], None]] = {
    "throughput": throughput.run,
    "quix": quix.run,
    "guarantee": guarantee.run,
    "depth": depth.run,
    "restart": restart.run,
    "failover": failover.run,
    "spark": spark.run,
    "soak": soak.run,
}


def run(bench: Bench, only: set[str] | None = None) -> dict[str, Any]:
    """Every figure, with its ratio to its baseline. A section that fails
    is reported as failed (with the error) and the others still run."""
    only = sections(only)

    def want(name: str) -> bool:
        return only is None or name in only

    tally = Tally()
    failed: list[Figure] = []
    for name, measure in RUNS.items():
        if not want(name):
            continue
        try:
            if name == "throughput":
                throughput.run(bench, tally, latency=want("latency"))
            else:
                measure(bench, tally)
        except Exception as exc:  # noqa: BLE001 - reported, the next section runs
            bench.say(f"  {name} failed: {exc}")
            failed.append(Figure(f"{name}: failed", 0.0, "", "runs", False, {"error": str(exc)}))
    tally.figures.extend(failed)
    return {
        "when": now_utc(),
        "machine": machine(),
        "sizes": asdict(bench.sizes),
        "figures": [asdict(f) for f in tally.figures],
        "ratios": [asdict(f) for f in tally.ratios],
        "failed": [f.name.removesuffix(": failed") for f in failed],
    }
