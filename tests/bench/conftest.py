"""One smoke run of every bench section, shared by the tests that read its
figures: each section runs once per CI pass, not once per test that looks
at it (each worker start costs a group join, half the session timeout on
the embedded broker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from seqkeeper.bench.harness import run
from seqkeeper.bench.rig import Bench, Sizes

TINY = Sizes(
    messages=300,
    keys=20,
    partitions=2,
    deep_buffer=40,
    state_keys=2_000,
    spark_records=500,
    latency_seconds=1.0,
    rounds=2,
    soak_rounds=3,
    soak_keys=50,
)
#: The bench workers' session timeout in the smoke run: the embedded broker
#: joins a group in half of it, and the failover waits it out.
SESSION_TIMEOUT = 6.0

#: pytest's bound on the test that sets the smoke run up: every section runs
#: inside that one fixture, and beside CI's other test processes the whole
#: run outlasted the default 600 s on Apache Kafka while each section was
#: still within its own bounds (a warm-up waits 180 s at most, a soak round
#: 120 s), so this only stops a run that hangs.
SMOKE_TIMEOUT = 1800

#: The smoke run's bench and its result (``run``'s).
Smoke = tuple[Bench, dict[str, Any]]


@pytest.fixture(scope="session")
def smoke(broker: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Smoke:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SEQKEEPER_SESSION_TIMEOUT", f"{SESSION_TIMEOUT:g}")
        bench = Bench(broker.bootstrap, TINY, Path(tmp_path_factory.mktemp("smoke")), print)
        return bench, run(bench)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "smoke" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(SMOKE_TIMEOUT))


def figure(result: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The one figure of ``result`` whose name starts with ``prefix``."""
    found = [f for f in result["figures"] if f["name"].startswith(prefix)]
    assert len(found) == 1, (prefix, [f["name"] for f in result["figures"]])
    return found[0]
