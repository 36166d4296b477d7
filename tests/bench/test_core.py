"""``python -m bench.core`` works: a broker-free run of the worker's
per-record path emits every message once on each output topic, confirms
everything, and reports its figures (never a speed threshold)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from seqkeeper.bench.core import PARTITIONS, Core, _partitions, main
from seqkeeper.bench.rig import workload
from seqkeeper.settings import Settings


def test_the_core_path_emits_every_message_once_and_confirms_all(tmp_path: Path) -> None:
    records, distinct = workload(600, 30)
    core = Core(Settings.of(bootstrap="-", gap_timeout=3600.0), tmp_path)
    asyncio.run(core.run(records, _partitions(records), every=50))
    offsets = core.local.offsets
    assert sum(n for (topic, _), n in offsets.items() if topic == "ordered") == distinct
    assert sum(n for (topic, _), n in offsets.items() if topic == "deduped") == distinct
    assert sum(n for (topic, _), n in offsets.items() if topic == "state-changelog") > distinct
    assert not core.topology.outbox and not core.topology.in_flight  # all confirmed
    assert core.topology.total_buffered == 0
    assert set(p for _, p in offsets) <= set(range(PARTITIONS))


def test_the_command_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "core.json"
    main(
        ["--messages", "300", "--keys", "20", "--cycle", "40", "--rounds", "1", "--json", str(out)]
    )
    result = orjson.loads(out.read_bytes())
    (row,) = result["rounds"]
    assert row["us per record"] > 0 and row["collections"] >= 0
    assert set(row["cycle us"]) == {
        "take",
        "changelog and local writes",
        "grouping",
        "outputs",
        "confirm",
    }
    assert result["records"] == len(workload(300, 20)[0])


def test_families_count_each_changelog_record_once() -> None:
    import argparse

    from seqkeeper.bench.core import families

    args = argparse.Namespace(messages=600, keys=30, cycle=50, processor=False)
    per = families(args)
    records, distinct = workload(600, 30)
    assert per["all"] == sum(v for k, v in per.items() if k != "all")
    # every message's buffer entry is written, then deleted once it is confirmed
    assert per["buffer write"] == per["buffer delete"] > 0
    # one seen id (and its place in the window) per distinct message
    assert round(per["seen_id write"] * len(records)) == distinct
    assert not any(name.startswith("processed") for name in per)


def test_families_under_exactly_once_leave_out_buffer_entries_released_in_their_cycle() -> None:
    import argparse

    from seqkeeper.bench.core import families

    def run(exactly_once: bool) -> dict[str, float]:
        args = argparse.Namespace(
            messages=600, keys=30, cycle=50, processor=True, exactly_once=exactly_once
        )
        return families(args)

    before, after = run(False), run(True)
    # each entry still written is deleted in a later transaction
    assert after.get("buffer write", 0) == after.get("buffer delete", 0)
    assert after.get("buffer write", 0) < before["buffer write"]
    # a processor's stored outputs are taken and confirmed in one transaction
    assert not any(name.startswith("outputs") for name in after)
    assert after["seen_id write"] == before["seen_id write"]
    assert after["all"] < before["all"]
