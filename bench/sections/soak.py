"""The soak: state stays flat while keys keep changing (``seqkeeper bench
--only soak``).

One worker with a short key retention (``SEQKEEPER_KEY_RETENTION``) and a
short marker horizon (``SEQKEEPER_FORGOTTEN_KEY_RETENTION``) is fed rounds
of keys it has never seen, each round ``soak_keys`` keys of
``SOAK_SEQS`` messages; between rounds it forgets them (and then their
markers). So it streams ``soak_rounds`` times more keys than are alive at
once. After each round's outputs are all out (the peak: that round's keys
alive) it measures:

* RocksDB's live size: the entries a reader sees (keys and values, bytes and
  count), read through a secondary instance beside the running worker (so
  compaction's lag does not count; RocksDB's own estimate is reported too);
* the changelog after compaction: its last record per key, tombstones
  dropped (what a compacted topic converges to, and what a restore holds);
* the worker's CPU time per message of the round (its own ``/proc`` times).

Targets: state and changelog at the last round ≤ 1.2 × the first round;
CPU per message of the last round ≤ 1.2 × the first.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, cast

import orjson

from seqkeeper.bench.measure import Figure
from seqkeeper.bench.rig import Bench
from seqkeeper.bench.sections.tally import Tally
from seqkeeper.broker import free_port
from seqkeeper.fleet.processes import WorkerProcess
from seqkeeper.fleet.publishing import publish
from seqkeeper.topics import read_topic

#: Messages per key (sequences 1..SOAK_SEQS).
SOAK_SEQS = 4
#: Seconds an idle key is kept, and its marker after it is forgotten.
SOAK_RETENTION = 2.0
SOAK_MARKERS = 2.0
#: End of the soak against its first round: the target.
SOAK_RATIO = 1.2
OUT = 'seqkeeper_messages_out_total{topic="ordered"}'
DROPPED = "seqkeeper_forgotten_markers_dropped_total"


def _metric(port: int, name: str) -> float:
    """A sample of the worker's ``/metrics`` (``name`` with its labels)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    except OSError:  # (not serving yet)
        return 0.0
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def _wait(
    port: int, name: str, want: float, worker: WorkerProcess, timeout: float, what: str
) -> None:
    deadline = time.monotonic() + timeout
    while _metric(port, name) < want:
        if not worker.running():
            raise RuntimeError(f"the soak's worker stopped: {worker.log()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"soak: {what} not within {timeout:.0f} s")
        time.sleep(0.05)


def _rocksdb(data_dir: Path, scratch: Path) -> dict[str, int]:
    """The live entries of the worker's state table (all partitions), read
    through secondary instances (a running worker holds the primary)."""
    from rocksdict import AccessType, Options, Rdict

    from seqkeeper.state.rocksdb import META_KEYS

    entries = size = estimate = 0
    for n, path in enumerate(sorted(data_dir.rglob("state-*.db"))):
        secondary = scratch / f"secondary-{n}"
        secondary.mkdir(parents=True, exist_ok=True)
        db = Rdict(
            str(path), Options(raw_mode=True), access_type=AccessType.secondary(str(secondary))
        )
        try:
            db.try_catch_up_with_primary()
            for key, value in db.items():
                if key not in META_KEYS:
                    entries += 1
                    size += len(cast(bytes, key)) + len(cast(bytes, value))  # (raw mode)
            estimate += db.property_int_value("rocksdb.estimate-live-data-size") or 0
        finally:
            db.close()
    return {"entries": entries, "bytes": size, "rocksdb estimate bytes": estimate}


def _compacted(bootstrap: str, topic: str, isolation: str) -> dict[str, int]:
    """The changelog as compaction leaves it: the last record of each key,
    tombstones dropped."""
    last: dict[tuple[int, bytes], int | None] = {}
    for r in asyncio.run(read_topic(bootstrap, topic, isolation=isolation)):
        last[(r.partition, r.key or b"")] = None if r.value is None else len(r.value)
    live = {k: v for k, v in last.items() if v is not None}
    return {"records": len(live), "bytes": sum(len(k[1]) + v for k, v in live.items())}


#: A ratio of the soak: name, value at the last round, at the first.
Ratio = tuple[str, float, float]


def soak(bench: Bench) -> tuple[list[Ratio], dict[str, Any]]:
    """The soak's ratios (last round against the first; target
    :data:`SOAK_RATIO`) and its detail (every round's figures)."""
    sizes = bench.sizes
    tag = f"bench-soak-{uuid.uuid4().hex[:6]}"
    port = free_port()
    s = bench.settings(
        tag,
        key_retention=SOAK_RETENTION,
        forgotten_key_retention=SOAK_MARKERS,
        timer_interval=0.1,
        web_port=port,
    )
    bench.topics(s.topics())
    guarantee = s.runtime.processing_guarantee
    # (read_uncommitted: the embedded broker answers read_committed with a
    # wrong end; a run without aborts has the same records either way)
    isolation = "read_uncommitted"
    changelog = f"{s.group_id}-state-changelog"
    source = s.ordered.input_topic
    w = WorkerProcess(s, bench.workdir / f"{tag}.log", "warning").start()
    rounds: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="soak-") as scratch:
            total = 0
            for n in range(sizes.soak_rounds + 1):  # round 0 warms up (start, group join)
                keys = 1 if n == 0 else sizes.soak_keys
                records = [
                    (
                        f"r{n}k{k}".encode(),
                        orjson.dumps({"messageId": f"r{n}k{k}s{q}", "seq": q, "type": "t"}),
                    )
                    for q in range(1, SOAK_SEQS + 1)
                    for k in range(keys)
                ]
                cpu = bench.cpu_seconds(w.pid)
                asyncio.run(publish(bench.bootstrap, s.ordered.input_topic, records))
                total += len(records)
                # (taken for production: the state behind them is written)
                _wait(port, OUT, total, w, bench.timeout(len(records)), f"round {n}'s outputs")
                # and committed: under exactly_once the local state takes a
                # cycle's writes only once its transaction committed
                deadline = time.monotonic() + 120
                while bench.committed_input(s.group_id, source) < total:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"soak round {n}: input not committed within 120 s")
                    time.sleep(0.1)
                cost = (bench.cpu_seconds(w.pid) - cpu) / len(records) * 1e6
                if n:
                    state = _rocksdb(s.runtime.data_dir, Path(scratch) / str(n))
                    log = _compacted(bench.bootstrap, changelog, isolation)
                    rounds.append({"cpu µs/msg": cost, "rocksdb": state, "changelog": log})
                    bench.say(
                        f"  soak round {n}: RocksDB {state['entries']:,} entries "
                        f"{state['bytes']:,} B, changelog {log['records']:,} records "
                        f"{log['bytes']:,} B compacted, {cost:.0f} CPU µs/msg"
                    )
                # every key so far forgotten, then its marker dropped
                _wait(port, DROPPED, 1 + n * sizes.soak_keys, w, 120, f"round {n}'s keys forgotten")
    finally:
        w.stop()
    first, last = rounds[0], rounds[-1]
    detail = {
        "rounds": rounds,
        "keys per round": sizes.soak_keys,
        "keys in all": sizes.soak_keys * sizes.soak_rounds,
        "messages per key": SOAK_SEQS,
        "key retention s": SOAK_RETENTION,
        "marker retention s": SOAK_MARKERS,
        "guarantee": guarantee,
        "log": str(bench.workdir / f"{tag}.log"),
    }

    return [
        (
            "soak: RocksDB live bytes, last round / first",
            last["rocksdb"]["bytes"],
            first["rocksdb"]["bytes"],
        ),
        (
            "soak: changelog records after compaction, last round / first",
            last["changelog"]["records"],
            first["changelog"]["records"],
        ),
        (
            "soak: worker CPU per message, last round / first",
            last["cpu µs/msg"],
            first["cpu µs/msg"],
        ),
    ], detail


def run(bench: Bench, tally: Tally) -> None:
    """The soak's ratios, last round against the first."""
    bench.say("soak: keys come and go, state stays flat")
    measured, detail = soak(bench)
    for name, end, start in measured:
        r = end / max(start, 1e-9)
        tally.ratios.append(Figure(name, r, "×", f"≤ {SOAK_RATIO}", r <= SOAK_RATIO, detail))
