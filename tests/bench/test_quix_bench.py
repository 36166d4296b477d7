"""The ``quix`` section of the bench, in the shared smoke run
(tests/bench/conftest.py): seqkeeper beside Quix Streams where Quix can
run, one n/a row saying why where it cannot; and the Quix app's per-key
logic. Never a speed threshold."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.bench.quix import accept
from seqkeeper.bench.sections.quix import MODERATE_RATE, PREFIX, Sampler, quix_blocker
from tests.bench.conftest import Smoke


class State:
    """Quix's per-key ``State``, as the app uses it (get with a default, set)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6)), max_size=60))
def test_the_quix_app_accepts_each_message_id_once_per_key(events: list[tuple[int, int]]) -> None:
    states: dict[int, State] = {}
    accepted: list[tuple[int, int]] = []
    for key, seq in events:
        value = {"messageId": f"k{key}:{seq}", "seq": seq}
        if accept(value, states.setdefault(key, State())):
            accepted.append((key, seq))
    assert sorted(accepted) == sorted(set(events))
    for key, state in states.items():
        seqs = [seq for k, seq in accepted if k == key]
        assert state.get("seq") == max(seqs)
        assert state.get("count") == len(seqs)


def test_the_sampler_takes_the_cpu_of_the_window_only() -> None:
    sampler = Sampler(None, lambda: True)
    sampler.samples = [(1.0, 5.0), (2.0, 6.0), (3.0, 9.0)]
    assert sampler.since(2.5) == 3.0  # from the sample at 2.0
    assert sampler.since(0.5) == 4.0  # before the first: from the first
    assert Sampler(None, lambda: False)() is False


@pytest.mark.integration
def test_quix_section(broker, smoke: Smoke) -> None:
    bench, result = smoke
    assert "quix" not in result["failed"], result["failed"]
    ratios = [r for r in result["ratios"] if r["name"].startswith("seqkeeper / Quix Streams")]
    figures = [f for f in result["figures"] if f["name"].startswith(PREFIX)]
    blocker = quix_blocker(bench.bootstrap)
    if blocker is not None:
        # the embedded broker answers DescribeConfigs empty, which Quix needs
        assert broker.kind == "embedded", blocker
        assert [r["name"] for r in ratios] == ["seqkeeper / Quix Streams: not measured (n/a)"]
        assert ratios[0]["met"] is None and ratios[0]["detail"]["why"] == blocker
        assert figures == []
        return
    guarantees = ["at_least_once", "exactly_once"] if broker.kind == "kafka" else ["at_least_once"]
    assert [r["name"] for r in ratios] == [f"seqkeeper / Quix Streams, {g}" for g in guarantees]
    by_name = {f["name"][len(PREFIX) :]: f for f in figures}
    for g in guarantees:
        for system in ("seqkeeper", "Quix Streams"):
            rate = next(f for n, f in by_name.items() if n.startswith(f"{system} {g}: input per s"))
            assert rate["value"] > 0 and len(rate["detail"]["rounds"]) == bench.sizes.rounds
            # every message out, none twice under exactly-once (the section checks, and says)
            assert rate["detail"]["output records"] >= bench.distinct
            if g == "exactly_once":
                assert rate["detail"]["repeated"] == 0
                assert rate["detail"]["output records"] == bench.distinct
            # (a tiny run's window can be shorter than the kernel's CPU tick: ≥ 0)
            assert by_name[f"{system} {g}: CPU per input record"]["value"] >= 0
            assert len(rate["detail"]["cpu µs per input record"]) == bench.sizes.rounds
            assert by_name[f"{system} {g}: peak RSS"]["value"] > 0
            lat = [n for n in by_name if n.startswith(f"{system} {g}, latency p99 at ")]
            assert len(lat) == 2 and any(f"{MODERATE_RATE:,.0f} msg/s" in n for n in lat)
    for system in ("seqkeeper", "Quix Streams"):
        assert by_name[f"{system}: changelog records per input record"]["value"] > 0
