"""``throughput`` (and ``latency``): seqkeeper against the limit (plain
aiokafka: consume, produce, commit) and its peer (a Faust agent with two
tables) on the same input, in alternating rounds; p99 latency at half of
seqkeeper's throughput beside the limit's pipeline and a write-ahead."""

from __future__ import annotations

from seqkeeper.bench.measure import (
    Figure,
    _median_figure,
    _ratio_of_rounds,
)
from seqkeeper.bench.rig import (
    LATENCY_P99_MS,
    PINNED,
    Bench,
    limit_ratio,
)
from seqkeeper.bench.sections.tally import Tally


def run(bench: Bench, tally: Tally, latency: bool = True) -> None:
    """The limit, the peer and seqkeeper side by side, in alternating rounds;
    with ``latency``, p99 latency at half of seqkeeper's throughput, beside
    the limit's pipeline and a write-ahead."""
    target = limit_ratio(bench.bootstrap)
    limits: list[Figure] = []
    runs: list[Figure] = []
    peer: Figure | None = None
    rounds = max(1, bench.sizes.rounds)
    for n in range(1, rounds + 1):
        bench.say(f"throughput, round {n} of {rounds}: limit")
        limits.append(bench.limit())
        bench.say(f"  {limits[-1].value:,.0f} msg/s")
        if peer is None:
            bench.say("  peer")
            peer = bench.peer()
            bench.say(f"  {peer.value:,.0f} msg/s")
        bench.say(f"  seqkeeper, {PINNED}")
        runs.append(bench.seqkeeper(processing_guarantee=PINNED))
        bench.say(
            f"  {runs[-1].value:,.0f} msg/s ({runs[-1].value / limits[-1].value:.2f} x limit)"
        )
    assert peer is not None
    limit, ours = _median_figure(limits), _median_figure(runs)
    tally.figures.extend([limit, peer, ours])
    # The peer runs once (it takes minutes); it is compared with the
    # seqkeeper run right after it: this machine's speed drifted by up to
    # 2.5 x within one bench run, so the median round may be far from it.
    beside = runs[0].value
    r_peer = beside / peer.value
    tally.ratios.extend(
        [
            _ratio_of_rounds("seqkeeper / limit", runs, limits, f"≥ {target}", target),
            Figure(
                "seqkeeper / peer",
                r_peer,
                "×",
                "≥ 10",
                r_peer >= 10,
                {"seqkeeper": beside, "round": "the peer's, right after it"},
            ),
        ]
    )
    if latency:
        # alternating rounds, as for throughput: one measurement's p99
        # varies widely between runs of the same code
        rate = max(10.0, ours.value / 2)
        lats: list[Figure] = []
        floors: list[Figure] = []
        aheads: list[Figure] = []
        for n in range(1, rounds + 1):
            bench.say(f"latency at half of seqkeeper's throughput, round {n} of {rounds}")
            lats.append(bench.latency(rate, processing_guarantee=PINNED))
            bench.say(f"  p99 {lats[-1].value:,.0f} ms; through the limit's pipeline")
            floors.append(bench.limit_latency(rate))
            bench.say(f"  p99 {floors[-1].value:,.0f} ms; with a write-ahead")
            aheads.append(bench.limit_latency(rate, write_ahead=True))
            bench.say(f"  p99 {aheads[-1].value:,.0f} ms")
        lat = _median_figure(lats)
        lat.target = f"p99 < {LATENCY_P99_MS} ms"
        lat.met = lat.value < LATENCY_P99_MS
        tally.figures.extend([lat, _median_figure(floors), _median_figure(aheads)])
