"""The ``guarantee`` section of the bench, in the shared smoke
run (tests/bench/conftest.py): measured on a broker with transactions, one
n/a row on one without; and its clock, the committed input offsets, counts
input records. Never a speed threshold."""

from __future__ import annotations

import asyncio
import dataclasses
import statistics

import pytest

from seqkeeper.bench.rig import Bench, workload
from seqkeeper.bench.sections.guarantee import GUARANTEE_COMMIT_INTERVAL
from seqkeeper.runtime.guarantee import has_transactions
from tests.bench.conftest import TINY as HARNESS_TINY
from tests.bench.conftest import Smoke

pytestmark = pytest.mark.integration

TINY = dataclasses.replace(HARNESS_TINY, rounds=1)


def test_guarantee_section(broker, smoke: Smoke) -> None:
    bench, result = smoke
    assert "guarantee" not in result["failed"], result["failed"]
    ratios = [r for r in result["ratios"] if r["name"].startswith("exactly_once / at_least_once")]
    names = [r["name"] for r in ratios]
    if not asyncio.run(has_transactions(broker.bootstrap, f"{bench.workdir.name}-probe")):
        # not a failure: one row saying it was not measured
        assert names == ["exactly_once / at_least_once: not measured (n/a: no transactions)"]
        assert ratios[0]["met"] is None
        assert not [f for f in result["figures"] if "exactly_once" in f["name"]]
        return
    assert names == ["exactly_once / at_least_once"]
    ratio = ratios[0]
    rates = {f["name"].split(":")[0]: f for f in result["figures"] if f["unit"] == "msg/s"}
    alo, eos = rates["seqkeeper at_least_once"], rates["seqkeeper exactly_once"]
    # the median of each round's ratio (the smoke run's two rounds)
    per_round = [
        e / a for e, a in zip(eos["detail"]["rounds"], alo["detail"]["rounds"], strict=True)
    ]
    assert len(per_round) == 2
    assert ratio["detail"]["rounds"] == pytest.approx(per_round)
    assert ratio["value"] == pytest.approx(statistics.median(per_round))
    for figure in (alo, eos):
        assert figure["value"] > 0
        assert figure["detail"]["commit interval s"] == GUARANTEE_COMMIT_INTERVAL
        assert 0 < figure["detail"]["counted"] <= len(bench.records)
    modes = ("seqkeeper at_least_once", "seqkeeper exactly_once")
    lat = [
        f for f in result["figures"] if "latency p99" in f["name"] and f["name"].startswith(modes)
    ]
    assert sorted(f["name"].split(",")[0] for f in lat) == [
        "seqkeeper at_least_once",
        "seqkeeper exactly_once",
    ]
    # both read as a read_committed consumer, at half of at-least-once's throughput
    assert all(f["detail"]["isolation"] == "read_committed" for f in lat)
    assert all(f"{alo['value'] / 2:,.0f} msg/s" in f["name"] for f in lat)


def test_the_committed_clock_counts_input_records(broker, tmp_path) -> None:
    # duplicates make fewer ordered outputs than input records: a count of
    # the output could never reach the input's count, the committed offsets do
    records, distinct = workload(300, 20, dup=0.2)
    assert len(records) > distinct
    bench = Bench(broker.bootstrap, TINY, tmp_path, lambda s: None)
    figure = bench.seqkeeper(
        records,
        distinct,
        committed=True,
        processing_guarantee="at_least_once",
        commit_interval=GUARANTEE_COMMIT_INTERVAL,
    )
    assert figure.name == "seqkeeper at_least_once: input per s to committed offsets"
    assert 0 < figure.detail["counted"] <= len(records)
    assert figure.detail["outputs per s"] == pytest.approx(figure.value * distinct / len(records))
