"""``depth``: throughput while one key holds many buffered messages against
while it holds 10."""

from __future__ import annotations

import asyncio

import orjson

from seqkeeper.bench.measure import (
    Figure,
    _median_figure,
    _per_input,
    _ratio_of_rounds,
    _tag,
    measure_output,
)
from seqkeeper.bench.rig import (
    PINNED,
    Bench,
    Records,
)
from seqkeeper.bench.sections.tally import Tally
from seqkeeper.fleet.processes import WorkerProcess
from seqkeeper.fleet.publishing import publish


def run(bench: Bench, tally: Tally) -> None:
    """Throughput with 10 and with ``deep_buffer`` messages buffered on one
    key, in alternating rounds, and their ratio."""
    # alternating rounds, as for throughput: single pairs measured
    # 0.77 x and 1.24 x in two runs ten minutes apart
    shallows: list[Figure] = []
    deeps: list[Figure] = []
    rounds = max(1, bench.sizes.rounds)
    for n in range(1, rounds + 1):
        bench.say(f"buffer depth, round {n} of {rounds}")
        shallows.append(with_buffered(bench, 10))
        deeps.append(with_buffered(bench, bench.sizes.deep_buffer))
        bench.say(
            f"  {shallows[-1].value:,.0f} msg/s with 10, "
            f"{deeps[-1].value:,.0f} with {bench.sizes.deep_buffer:,}"
        )
    tally.figures.extend([_median_figure(shallows), _median_figure(deeps)])
    name = f"{bench.sizes.deep_buffer:,} buffered / 10 buffered"
    tally.ratios.append(_ratio_of_rounds(name, deeps, shallows, "≥ 0.7", 0.7))


def with_buffered(bench: Bench, depth: int) -> Figure:
    """Throughput of the usual workload while one key holds ``depth``
    buffered messages (its seq 1 never comes)."""
    stuck: Records = [
        (b"stuck", orjson.dumps({"messageId": f"stuck:{n}", "seq": n, "type": "t"}))
        for n in range(2, depth + 2)
    ]
    return _depth(bench, stuck, depth)


def _depth(bench: Bench, stuck: Records, depth: int) -> Figure:
    """:func:`with_buffered` with the stuck key's records given."""
    tag = _tag("depth")
    s = bench.settings(
        tag,
        max_buffered_per_key=depth * 2,
        max_buffered_total=max(1_000_000, depth * 4),
        processing_guarantee=PINNED,
    )
    bench.topics(s.topics())
    asyncio.run(publish(bench.bootstrap, s.ordered.input_topic, stuck))
    w = WorkerProcess(s, bench.workdir / f"{tag}.log", "warning").start()
    try:
        # the stuck key is buffered when its messages reached the deduped output
        measure_output(
            bench.bootstrap,
            s.ordered.deduped_topic,
            len(stuck),
            w.running,
            bench.timeout(len(stuck)),
        )
        # Timed from the start of the workload's publication, every
        # ordered output counted: the worker runs while it is published
        # (it holds the stuck key's messages); timed from after the
        # publication, much of the work would go unclocked.
        rate, counted = measure_output(
            bench.bootstrap,
            s.ordered.ordered_topic,
            bench.distinct,
            w.running,
            bench.timeout(bench.distinct),
            feed=lambda: asyncio.run(
                publish(bench.bootstrap, s.ordered.input_topic, bench.records)
            ),
        )
    finally:
        w.stop()
    figure = _per_input(
        f"seqkeeper with {depth:,} buffered on one key, {PINNED}",
        rate,
        len(bench.records),
        bench.distinct,
    )
    figure.detail.update(counted=counted, timed="from the start of the input's publication")
    return figure
