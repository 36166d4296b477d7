"""``local-state``: RocksDB deleted while the worker is stopped, then
corrupted: rebuilt from the changelog both times, never silently used."""

from __future__ import annotations

import asyncio
import random
import shutil
from pathlib import Path

import orjson

from seqkeeper.fleet.publishing import publish
from seqkeeper.verification.outcome import Outcome
from seqkeeper.verification.scenarios.stage import Stage
from seqkeeper.verification.workload import generate


def run(chaos: Stage) -> Outcome:
    sc = chaos.scale
    s = chaos.prepared("local-state")
    work = generate(
        messages=sc.others // 2,
        keys=sc.keys,
        malformed=0,
        duplicate_rate=0.0,
        seed=chaos.seed + 3,
    )
    phases = _phases(work.records, 3)
    out = Outcome("local state deleted, then corrupted", messages=len(work.records))
    asyncio.run(publish(s.broker.bootstrap, s.ordered.input_topic, phases[0]))
    published = list(phases[0])
    w = chaos.worker(s, "worker-0")
    accepted = len(phases[0])
    try:
        report = chaos.verified(s, chaos.drain_timeout(accepted), accepted, w)
    finally:
        w.stop()
    for step, (fault, phase) in enumerate(
        [("deleted", phases[1]), ("corrupted", phases[2])], start=1
    ):
        dbs = sorted(s.runtime.data_dir.rglob("*.db"))
        if not dbs:
            out.fail(f"no local RocksDB to {fault[:-1]}")
        for db in dbs:
            if fault == "deleted":
                shutil.rmtree(db)
            else:
                _corrupt(db)
        out.faults += 1
        chaos.say(f"  local state {fault}")
        since = chaos.ends(s, s.ordered.ordered_topic)
        w = chaos.worker(s, f"worker-{step}")
        # the new phase continues every key, plus redeliveries of old messages
        again = chaos.rng.sample(published, min(50, len(published)))
        asyncio.run(publish(s.broker.bootstrap, s.ordered.input_topic, phase + again))
        published += phase
        accepted += len(phase)
        try:
            out.recovered(chaos.until_output(s, s.ordered.ordered_topic, since, worker=w))
            report = chaos.verified(s, chaos.drain_timeout(accepted), accepted, w)
            w.check_alive()
        finally:
            w.stop()
        if fault == "corrupted" and "is corrupt" not in w.log():
            out.fail("corruption was not reported by the worker")
        if sum(report.reemitted.values()):
            # a clean stop replays nothing: a repeat means lost dedup state
            out.fail(f"re-emissions after a clean stop: {report.reemitted}")
    return chaos.ordered_result(out, report)


def _phases(
    records: list[tuple[bytes | None, bytes | None]], n: int
) -> list[list[tuple[bytes | None, bytes | None]]]:
    """Split a workload so that each phase holds, per key, the next run of
    sequences (so each phase ends with nothing waiting behind a gap)."""
    per_key: dict[bytes | None, list[tuple[int, tuple[bytes | None, bytes | None]]]] = {}
    for rec in records:
        seq = orjson.loads(rec[1] or b"{}")["seq"]
        per_key.setdefault(rec[0], []).append((seq, rec))
    phases: list[list[tuple[bytes | None, bytes | None]]] = [[] for _ in range(n)]
    for items in per_key.values():
        items.sort(key=lambda x: x[0])
        cut = [len(items) * i // n for i in range(n + 1)]
        for i in range(n):
            phases[i] += [rec for _, rec in items[cut[i] : cut[i + 1]]]
    rng = random.Random(0)
    for phase in phases:
        rng.shuffle(phase)
    return phases


def _corrupt(db: Path) -> None:
    """Flip bytes in the middle of every table file (the MANIFEST and CURRENT
    too when there is no table file yet)."""
    targets = sorted(db.glob("*.sst")) or sorted(db.glob("MANIFEST-*"))
    for f in targets:
        data = bytearray(f.read_bytes())
        start = len(data) // 3
        for i in range(start, min(len(data), start + 256)):
            data[i] ^= 0xFF
        f.write_bytes(bytes(data))
