"""``guarantee``: exactly-once against at-least-once on the same broker and
input (a broker with transactions), both clocked at the committed input
offsets with the same commit interval; their p99 latency at one rate."""

from __future__ import annotations

import asyncio

from seqkeeper.bench.measure import (
    Figure,
    _median_figure,
    _ratio_of_rounds,
    _tag,
)
from seqkeeper.bench.rig import (
    Bench,
)
from seqkeeper.bench.sections.tally import Tally

#: The target for exactly_once / at_least_once throughput on the same broker and input.
GUARANTEE_RATIO = 0.8

#: The commit interval of both modes in the ``guarantee`` section: its clock
#: stops at the committed input offsets, which at-least-once commits only
#: every interval (exactly-once: every outbox cycle); short, so the wait
#: for the last commit is small, and the same for both.
GUARANTEE_COMMIT_INTERVAL = 0.2


def run(bench: Bench, tally: Tally) -> None:
    """Exactly-once against at-least-once on a broker with transactions:
    throughput clocked by committed input offsets, and p99 latency."""
    from seqkeeper.runtime.guarantee import has_transactions

    probe = f"{_tag('guarantee')}-probe"
    if not asyncio.run(has_transactions(bench.bootstrap, probe)):
        bench.say("processing guarantees: not measured, the broker has no transactions")
        tally.ratios.append(
            Figure(
                "exactly_once / at_least_once: not measured (n/a: no transactions)",
                0.0,
                "",
                f"≥ {GUARANTEE_RATIO}",
                None,
                {"why": "the broker has no transactions: exactly_once is refused on it"},
            )
        )
        return
    # Both modes clocked by committed input offsets, with the same
    # commit interval (measure_output): the end offsets of the output
    # would count exactly-once's commit markers as records.
    alos: list[Figure] = []
    eoss: list[Figure] = []
    rounds = max(1, bench.sizes.rounds)

    def measure(mode: str) -> Figure:
        bench.say(f"  {mode}")
        figure = bench.seqkeeper(
            committed=True,
            processing_guarantee=mode,
            commit_interval=GUARANTEE_COMMIT_INTERVAL,
        )
        bench.say(f"  {figure.value:,.0f} msg/s")
        return figure

    for n in range(1, rounds + 1):
        # the order flips each round: a machine that drifts favours neither
        bench.say(f"processing guarantees, round {n} of {rounds}")
        if n % 2:
            alos.append(measure("at_least_once"))
            eoss.append(measure("exactly_once"))
        else:
            eoss.append(measure("exactly_once"))
            alos.append(measure("at_least_once"))
        bench.say(f"  {eoss[-1].value / alos[-1].value:.2f} x")
    alo, eos = _median_figure(alos), _median_figure(eoss)
    tally.figures.extend([alo, eos])
    ratio = _ratio_of_rounds(
        "exactly_once / at_least_once",
        eoss,
        alos,
        f"≥ {GUARANTEE_RATIO}",
        GUARANTEE_RATIO,
    )
    ratio.detail["clock"] = "committed input offsets, both modes"
    ratio.detail["commit interval s"] = GUARANTEE_COMMIT_INTERVAL
    tally.ratios.append(ratio)
    # p99 of both at the same rate: half of at-least-once's throughput,
    # as the throughput section does; both read read_committed
    rate = max(10.0, alo.value / 2)
    by_mode: dict[str, list[Figure]] = {"at_least_once": [], "exactly_once": []}
    for n in range(1, rounds + 1):
        bench.say(f"latency of both guarantees at {rate:,.0f} msg/s, round {n} of {rounds}")
        order = list(by_mode) if n % 2 else list(reversed(by_mode))
        for mode in order:
            by_mode[mode].append(
                bench.latency(
                    rate,
                    read_committed=True,
                    name=f"seqkeeper {mode}",
                    processing_guarantee=mode,
                    commit_interval=GUARANTEE_COMMIT_INTERVAL,
                )
            )
            bench.say(f"  {mode}: p99 {by_mode[mode][-1].value:,.0f} ms")
    tally.figures.extend(_median_figure(lats) for lats in by_mode.values())
