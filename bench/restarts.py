"""What a restarted worker's log and local state say about its restart, for
the ``restart`` section of ``seqkeeper bench``: the changelog
records each partition replayed, the offsets its local RocksDB held before
the restart, and when each phase of the restart ended (join, recovery, the
start-up scan of the keys, ready), in seconds from the process's start.

Pure parsing, apart from :func:`local_offsets` (a read-only open of the
worker's databases, while no worker runs on them)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from seqkeeper.state.rocksdb import FAUST_OFFSET_KEY

#: ``[2026-11-26 07:01:08,173] [13630] [INFO] message`` (local time)
_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \[\d+\] \[\w+\] (.*)$")
_REPLAYED = re.compile(
    r"table (\S+): partition (\d+) \((active|standby)\) replayed ([\d,]+) changelog records, "
    r"(?:offsets ([\d,]+) → ([\d,]+)|local state up to offset ([\d,]+)|no local state)"
)
_LOOKED = re.compile(r"partition (\d+): looked at ([\d,]+) keys \(([^)]*)\)")

#: The phases of a start, in the order they happen, each with the first log
#: line that ends it: ``joining`` the process is up and asks to join the
#: group; ``joined`` and ``synced`` the group's join and sync (the group
#: coordinator's answers); ``assigned`` Faust's handling of the assignment
#: starts; ``replaying`` the changelog's tail is read (absent when there is
#: none); ``recovered`` the replay is done; ``scanned`` the start-up scan of
#: the keys (see :func:`phases`); ``ready`` the input is fetched.
PHASES = {
    "logging": "",  # the first timestamped line: the interpreter and imports are up
    "joining": "(Re-)joining group",
    "joined": "Joined group",
    "synced": "Successfully synced group",
    "assigned": "Setting newly assigned partitions",
    "replaying": "Restoring state from changelog topics",
    "recovered": "Restore complete!",
    "scanned": "looked at",
    "ready": "Worker ready",
}


def number(text: str) -> int:
    return int(text.replace(",", ""))


def local_offsets(data_dir: Path, table: str = "state") -> dict[int, int]:
    """Per partition of ``table``, the changelog offset its local RocksDB
    holds everything up to (-1: no offset), as the next start finds it: a
    read-only open replays the write-ahead log, as a start does. Only while
    no worker runs on ``data_dir``."""
    from rocksdict import AccessType, Options, Rdict

    found: dict[int, int] = {}
    for path in sorted(data_dir.rglob(f"{table}-*.db")):
        partition = int(path.name[len(table) + 1 : -len(".db")])
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only(False))
        try:
            raw = db.get(FAUST_OFFSET_KEY)
        finally:
            db.close()
        found[partition] = -1 if raw is None else int(raw)
    return found


@dataclass
class Replayed:
    """What one active changelog partition replayed over every recovery in
    a log: how many records, the first and the last offset applied; when it
    replayed nothing, where its local state ended (``local``)."""

    count: int = 0
    first: int | None = None
    last: int | None = None
    local: int | None = None
    recoveries: int = 0


def replayed(log: str, table: str = "state") -> dict[int, Replayed]:
    """Per active partition of ``table``, what ``log`` says it replayed."""
    found: dict[int, Replayed] = {}
    for name, partition, role, count, first, last, local in _REPLAYED.findall(log):
        if name != table or role != "active":
            continue
        r = found.setdefault(int(partition), Replayed())
        r.recoveries += 1
        if number(count):
            r.first = r.first if r.count else number(first)
            r.last = number(last)
            r.count += number(count)
        else:
            r.local = number(local) if local else None
    return found


def looked_at(log: str) -> dict[int, int]:
    """Per partition, the keys the first start-up scan in ``log`` looked at
    (a rebalance scans again)."""
    found: dict[int, int] = {}
    for p, n, _ in _LOOKED.findall(log):
        found.setdefault(int(p), number(n))
    return found


def timed_lines(log: str) -> list[tuple[float, str]]:
    """Each timestamped line of ``log``: (its time as a Unix timestamp, read
    in this machine's time zone as the worker wrote it, its message)."""
    out = []
    for line in log.splitlines():
        m = _LINE.match(line)
        if m:
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append((at, m.group(2)))
    return out


def phases(log: str, started: float) -> dict[str, float]:
    """When each of :data:`PHASES` first ended, in seconds after ``started``
    (a Unix timestamp: when the process was started); ``scanned`` is the
    last start-up scan line between ``recovered`` and ``ready`` (a line per
    partition). A phase the log does not show is left out. Also
    ``assignments``: how many times the worker was assigned partitions in
    the whole log (more than one: the start went through a rebalance, and
    the phases are the first round's)."""
    lines = timed_lines(log)
    found: dict[str, float] = {}
    assignments = 0
    for at, text in lines:
        if PHASES["assigned"] in text:
            assignments += 1
        for phase, marker in PHASES.items():
            if phase == "scanned":
                if "ready" not in found and "recovered" in found and _LOOKED.search(text):
                    found[phase] = at - started
            elif phase not in found and marker in text:
                found[phase] = at - started
    ordered = {phase: found[phase] for phase in PHASES if phase in found}
    ordered["assignments"] = float(assignments)
    return ordered


def replay_detail(
    log: str, local: dict[int, int], ends: dict[int, int], table: str = "state"
) -> dict[str, Any]:
    """Per partition, for a figure's detail: the local offset before the
    restart, the changelog's end, the tail after the local offset (``end -
    (local + 1)``: what the restart should replay) and what the log says
    it replayed; and whether every partition replayed exactly its tail."""
    said = replayed(log, table)
    partitions: dict[str, Any] = {}
    for p in sorted(set(ends) | set(local) | set(said)):
        offset, end = local.get(p, -1), ends.get(p, 0)
        r = said.get(p, Replayed())
        partitions[str(p)] = {
            "local offset": offset,
            "changelog end": end,
            "tail": end - (offset + 1),
            **asdict(r),
        }
    return {
        "partitions": partitions,
        "replayed": sum(r.count for r in said.values()),
        "tail": sum(v["tail"] for v in partitions.values()),
        "replayed the tail": all(v["count"] == v["tail"] for v in partitions.values()),
    }


_TOTAL = re.compile(r"table (\S+): replayed \d+ changelog records \(")


def roles(log: str, table: str = "state") -> dict[str, set[int]]:
    """The partitions of ``table`` a worker holds now, by role (``active``,
    ``standby``), as the last recovery report in ``log`` lists them (a
    report names every partition the table has after the recovery, then
    the table's total; a recovery overtaken by a rebalance reports
    nothing). Empty sets before the first report."""
    found: dict[str, set[int]] = {"active": set(), "standby": set()}
    block: dict[str, set[int]] = {"active": set(), "standby": set()}
    for line in log.splitlines():
        m = _REPLAYED.search(line)
        if m and m.group(1) == table:
            block[m.group(3)].add(int(m.group(2)))
            continue
        total = _TOTAL.search(line)
        if total and total.group(1) == table:
            found, block = block, {"active": set(), "standby": set()}
    return found


def since(log: str, at: float) -> str:
    """The lines of ``log`` from its first timestamped line at or after
    ``at`` (a Unix timestamp) on; untimestamped lines (tables) kept."""
    lines = log.splitlines(keepends=True)
    for i, line in enumerate(lines):
        m = _LINE.match(line)
        if m and datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() >= at:
            return "".join(lines[i:])
    return ""
