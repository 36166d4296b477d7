"""What the bench reads from a restarted worker's log (bench/restarts.py):
a log written as the worker writes it, no broker."""

from __future__ import annotations

from datetime import datetime

import pytest

from seqkeeper.bench.restarts import looked_at, phases, replay_detail, replayed, roles, since

LOG = """\
processing guarantee: at_least_once (requested)
the previous worker did not stop cleanly: local state /x/v1/tables is kept; ...
[2026-11-26 07:05:16,668] [1593] [INFO] [^--Producer]: Creating topic 'x-__assignor-__leader'
[2026-11-26 07:05:16,724] [1593] [INFO] (Re-)joining group x
[2026-11-26 07:05:21,737] [1593] [INFO] Joined group 'x' (generation 0) with member_id x-1
[2026-11-26 07:05:24,741] [1593] [INFO] Successfully synced group x with generation 0
[2026-11-26 07:05:24,743] [1593] [INFO] Setting newly assigned partitions
+Topic Partition Set-----------------------+------------+
| x-state-changelog                        | {0-1}      |
+------------------------------------------+------------+ for group x
[2026-11-26 07:05:24,971] [1593] [INFO] [^---SeekFirstRecovery]: Restoring state from changelog topics...
[2026-11-26 07:05:25,919] [1593] [INFO] [^---SeekFirstRecovery]: Restore complete!
[2026-11-26 07:05:25,920] [1593] [INFO] table state: partition 0 (active) replayed 1,976 changelog records, offsets 30,036 → 32,011
[2026-11-26 07:05:25,920] [1593] [INFO] table state: partition 1 (active) replayed 0 changelog records, local state up to offset 29,000
[2026-11-26 07:05:25,921] [1593] [INFO] table state: replayed 1976 changelog records (1976 active, 0 standby)
[2026-11-26 07:05:25,931] [1593] [INFO] partition 0: looked at 494 keys (keys with reorder-buffer entries)
[2026-11-26 07:05:25,964] [1593] [INFO] partition 1: looked at 1,497 keys (keys with reorder-buffer entries)
[2026-11-26 07:05:25,989] [1593] [INFO] [^---SeekFirstRecovery]: Worker ready
[2026-11-26 07:05:26,964] [1593] [INFO] partition 1: looked at 3 keys (every key's state)
"""


def at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_phases_in_seconds_from_the_start() -> None:
    got = phases(LOG, at("2026-11-26 07:05:15,668"))
    assert list(got) == [
        "logging",
        "joining",
        "joined",
        "synced",
        "assigned",
        "replaying",
        "recovered",
        "scanned",
        "ready",
        "assignments",
    ]
    assert got["logging"] == pytest.approx(1.0)
    assert got["joined"] == pytest.approx(6.069)
    assert got["scanned"] == pytest.approx(10.296)  # the last scan line before ready
    assert got["ready"] == pytest.approx(10.321)
    assert got["assignments"] == 1


def test_replayed_and_looked_at() -> None:
    said = replayed(LOG)
    assert (said[0].count, said[0].first, said[0].last, said[0].recoveries) == (
        1976,
        30036,
        32011,
        1,
    )
    assert (said[1].count, said[1].local) == (0, 29000)
    assert looked_at(LOG) == {0: 494, 1: 1497}  # the first scan of each partition


def test_replay_detail_compares_with_the_tail() -> None:
    d = replay_detail(LOG, local={0: 30035, 1: 29000}, ends={0: 32012, 1: 29001})
    assert d["partitions"]["0"]["tail"] == 1976 == d["partitions"]["0"]["count"]
    assert d["partitions"]["1"]["tail"] == 0
    assert d["replayed the tail"] and d["replayed"] == d["tail"] == 1976
    d = replay_detail(LOG, local={0: 30000, 1: 29000}, ends={0: 32012, 1: 29001})
    assert not d["replayed the tail"]


STANDBY = """\
[2026-11-26 08:00:01,000] [7] [INFO] table state: partition 0 (active) replayed 0 changelog records, no local state
[2026-11-26 08:00:01,001] [7] [INFO] table state: partition 1 (active) replayed 0 changelog records, no local state
[2026-11-26 08:00:01,002] [7] [INFO] table state: replayed 0 changelog records (0 active, 0 standby)
[2026-11-26 08:00:05,000] [7] [INFO] Setting newly assigned partitions
[2026-11-26 08:00:05,100] [7] [INFO] table state: partition 1 (active) replayed 0 changelog records, no local state
[2026-11-26 08:00:05,101] [7] [INFO] table state: partition 0 (standby) replayed 0 changelog records, no local state
[2026-11-26 08:00:05,102] [7] [INFO] table state: replayed 0 changelog records (0 active, 0 standby)
[2026-11-26 08:00:09,000] [7] [INFO] table state: partition 0 (active) replayed 12 changelog records, offsets 88 → 99
"""


def test_roles_are_the_last_complete_report() -> None:
    # the last report's partitions; a report without its total line is not one yet
    assert roles(STANDBY) == {"active": {1}, "standby": {0}}
    assert roles(STANDBY.splitlines(keepends=True)[0]) == {"active": set(), "standby": set()}


def test_since_keeps_the_lines_from_a_time_on() -> None:
    after = since(STANDBY, at("2026-11-26 08:00:05,000"))
    assert after.startswith("[2026-11-26 08:00:05,000]")
    assert replayed(after)[0].count == 12 and replayed(after)[0].recoveries == 1
    assert since(STANDBY, at("2026-11-26 09:00:00,000")) == ""
