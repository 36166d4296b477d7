"""What a table's recovery replayed, per changelog partition and role
(seqkeeper.adapter.tables.Replays, plain values): the lines logged after a
recovery and the totals behind ``seqkeeper_changelog_replayed_total``. The
same from a running worker: tests/integration/test_restore_progress.py."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.adapter.tables import (
    ACTIVE,
    STANDBY,
    Replay,
    ReplayCounter,
    Replays,
    replay_line,
)


def test_a_partition_says_how_many_records_it_replayed_and_their_offsets() -> None:
    assert replay_line("state", 3, ACTIVE, Replay(4_566_999, 4_568_233, 1_234), 4_568_233) == (
        "table state: partition 3 (active) replayed 1,234 changelog records, "
        "offsets 4,566,999 → 4,568,233"
    )


def test_a_partition_that_replayed_nothing_says_where_its_local_state_ends() -> None:
    assert replay_line("state", 0, ACTIVE, None, 4_568_233) == (
        "table state: partition 0 (active) replayed 0 changelog records, "
        "local state up to offset 4,568,233"
    )
    assert replay_line("state", 1, STANDBY, Replay(7, 7, 0), 0) == (
        "table state: partition 1 (standby) replayed 0 changelog records, "
        "local state up to offset 0"
    )
    for none in (None, -1):  # (Faust: -1 for no offset)
        assert replay_line("state", 2, ACTIVE, None, none) == (
            "table state: partition 2 (active) replayed 0 changelog records, no local state"
        )


def test_a_report_has_every_partition_of_the_table_by_role_then_the_total() -> None:
    replays = Replays("state")
    for offset in range(10, 15):
        replays.add(ACTIVE, 1, offset)
    replays.add(STANDBY, 0, 41)
    replays.add(STANDBY, 0, 44)  # (offsets gaps: compaction, transaction markers)
    lines = replays.report({(STANDBY, 0): 44, (ACTIVE, 1): 14, (ACTIVE, 2): 99, (ACTIVE, 0): None})
    assert lines == [
        "table state: partition 0 (active) replayed 0 changelog records, no local state",
        "table state: partition 1 (active) replayed 5 changelog records, offsets 10 → 14",
        "table state: partition 2 (active) replayed 0 changelog records, local state up to offset 99",
        "table state: partition 0 (standby) replayed 2 changelog records, offsets 41 → 44",
        "table state: replayed 7 changelog records (5 active, 2 standby)",
    ]
    assert replays.totals == {ACTIVE: 5, STANDBY: 2}


def test_each_report_counts_from_the_last_one_and_the_totals_from_the_start() -> None:
    totals = {ACTIVE: 0, STANDBY: 0}  # (the app's, shared by its tables)
    replays = Replays("state", totals)
    replays.add(ACTIVE, 0, 0)
    replays.add(ACTIVE, 0, 1)
    replays.report({(ACTIVE, 0): 1})
    # A promoted standby: its records as a standby, then as an active.
    replays.add(STANDBY, 1, 5)
    replays.add(ACTIVE, 1, 6)
    lines = replays.report({(ACTIVE, 0): 1, (ACTIVE, 1): 6})
    assert lines == [
        "table state: partition 0 (active) replayed 0 changelog records, local state up to offset 1",
        "table state: partition 1 (active) replayed 1 changelog records, offsets 6 → 6",
        "table state: partition 1 (standby) replayed 1 changelog records, offsets 5 → 5",
        "table state: replayed 2 changelog records (1 active, 1 standby)",
    ]
    assert totals == {ACTIVE: 3, STANDBY: 1}
    assert replays.report({}) == ["table state: replayed 0 changelog records (0 active, 0 standby)"]


def test_a_fetch_applied_at_once_counts_as_its_records() -> None:
    """A batch restore (adapter.recovery.BatchRestore) tells a fetch's
    records at once: the same line as one record at a time."""
    replays = Replays("state")
    replays.add(ACTIVE, 0, 1_999, count=2_000, first=0)
    replays.add(ACTIVE, 0, 2_999, count=1_000, first=2_000)
    assert replays.report({(ACTIVE, 0): 2_999})[0] == (
        "table state: partition 0 (active) replayed 3,000 changelog records, offsets 0 → 2,999"
    )
    assert replays.totals[ACTIVE] == 3_000


@given(
    st.lists(
        st.tuples(st.sampled_from([ACTIVE, STANDBY]), st.integers(0, 3), st.integers(1, 3)),
        max_size=60,
    )
)
def test_per_partition_counts_add_up_to_the_total(steps: list[tuple[str, int, int]]) -> None:
    replays = Replays("t")
    offsets: dict[tuple[str, int], list[int]] = {}
    for role, partition, step in steps:  # increasing offsets per partition
        seen = offsets.setdefault((role, partition), [])
        seen.append((seen[-1] if seen else -1) + step)
        replays.add(role, partition, seen[-1])
    lines = replays.report({})
    assert len(lines) == len(offsets) + 1
    for (role, partition), seen in offsets.items():
        line = replay_line("t", partition, role, Replay(seen[0], seen[-1], len(seen)), None)
        assert line in lines
    assert lines[-1] == (
        f"table t: replayed {len(steps)} changelog records "
        f"({sum(len(v) for (r, _), v in offsets.items() if r == ACTIVE)} active, "
        f"{sum(len(v) for (r, _), v in offsets.items() if r == STANDBY)} standby)"
    )


def test_the_counter_takes_the_role_from_faust_and_the_local_offset_from_the_table(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ReplayCounter between Faust's table callbacks and Replays: a record's
    role is its partition's in Faust's recovery (neither: not counted), and
    a partition that replayed nothing reports its table's persisted offset."""
    changelog = "app-state-changelog"
    tp0, tp1, tp2 = (TP(changelog, p) for p in range(3))

    class Table:  # (hashable, as Faust's: its recovery maps tables to partitions)
        app: Any = None
        persisted_offset = {tp0: 11, tp1: None, tp2: 3}.get

    table = Table()
    recovery = SimpleNamespace(
        active_tps={tp0, tp1},
        standby_tps={tp2},
        actives_for_table=defaultdict(set),
        standbys_for_table=defaultdict(set),
    )
    recovery.actives_for_table[table] = {tp0, tp1}
    recovery.standbys_for_table[table] = {tp2}
    table.app = SimpleNamespace(tables=SimpleNamespace(recovery=recovery))
    totals = {ACTIVE: 0, STANDBY: 0}
    counter = ReplayCounter("state", totals)
    counter.table = table

    def event(tp: TP, offset: int) -> Any:
        return SimpleNamespace(message=SimpleNamespace(tp=tp, offset=offset))

    async def main() -> None:
        for tp, offset in [(tp1, 0), (tp1, 1), (tp2, 3), (TP(changelog, 7), 9)]:
            await counter.on_changelog_event(event(tp, offset))
        with caplog.at_level(logging.INFO, logger="seqkeeper.recovery"):
            await counter.on_recover()

    asyncio.run(main())
    assert [r.getMessage() for r in caplog.records] == [
        "table state: partition 0 (active) replayed 0 changelog records, local state up to offset 11",
        "table state: partition 1 (active) replayed 2 changelog records, offsets 0 → 1",
        "table state: partition 2 (standby) replayed 1 changelog records, offsets 3 → 3",
        "table state: replayed 3 changelog records (2 active, 1 standby)",
    ]
    assert totals == {ACTIVE: 2, STANDBY: 1}


def test_a_failing_report_costs_its_lines_not_the_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counter = ReplayCounter("state")  # no table: the report fails
    with caplog.at_level(logging.INFO, logger="seqkeeper.recovery"):
        asyncio.run(counter.on_recover())
    assert [r.getMessage() for r in caplog.records] == ["table state: the replay report failed"]
