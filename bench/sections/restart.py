"""``restart``: time to first output after a restart with a large state,
after a clean stop and after ``kill -9``; the worker's peak RSS."""

from __future__ import annotations

import asyncio
import re
import time

import orjson

from seqkeeper.bench.measure import (
    Figure,
    _peak_rss_mb,
    _tag,
    measure_output,
)
from seqkeeper.bench.restarts import (
    local_offsets,
    looked_at,
    phases,
    replay_detail,
)
from seqkeeper.bench.rig import (
    PINNED,
    Bench,
    _committed_input,
    changelog_ends,
)
from seqkeeper.bench.sections.tally import Tally
from seqkeeper.fleet.offsets import end_offsets
from seqkeeper.fleet.poll import records_in
from seqkeeper.fleet.probes import first_new_output
from seqkeeper.fleet.processes import WorkerProcess
from seqkeeper.fleet.publishing import publish
from seqkeeper.settings import Settings
from seqkeeper.state.rocksdb import CHECKPOINT_RECORDS
from seqkeeper.topics import read_topic

#: The target for the restart figures: first output within this many
#: seconds of a restart, after a clean stop and after ``kill -9`` (at the
#: section's full scale: 1,000,000 keys of state, about 5 M changelog records).
RESTART_S = 15.0


def run(bench: Bench, tally: Tally) -> None:
    """Restart to first output and peak memory with a large state, after a
    clean stop and after ``kill -9``."""
    bench.say("restart and memory with a large state")
    tally.figures.extend(restart(bench))


def restart(bench: Bench) -> tuple[Figure, Figure, Figure]:
    """Build ``state_keys`` keys of state, stop cleanly, restart: time to
    the first output of new input; the worker's peak RSS; then the same
    after a ``kill -9`` (:func:`_killed`)."""
    n = bench.sizes.state_keys
    tag = _tag("restart")
    # as deployed for fast restarts: static membership (SEQKEEPER_INSTANCE_ID)
    s = bench.settings(tag, instance_id=f"{tag}-worker", processing_guarantee=PINNED)
    bench.topics(s.topics())
    records = [
        (f"s{k:07d}".encode(), orjson.dumps({"messageId": f"s{k}", "seq": 1, "type": "t"}))
        for k in range(n)
    ]
    asyncio.run(publish(bench.bootstrap, s.ordered.input_topic, records))
    w = WorkerProcess(s, bench.workdir / f"{tag}.log", "warning").start()
    try:
        measure_output(
            bench.bootstrap,
            s.ordered.ordered_topic,
            n,
            w.running,
            bench.timeout(n),
        )
        rss = _peak_rss_mb(w.pid)
    finally:
        w.stop()
    ends = changelog_ends(bench.bootstrap, s)
    # at info: the log shows the phases of the restart (join, recovery, ready)
    w = WorkerProcess(s, bench.workdir / f"{tag}-2.log", "info").start()
    t0, started = time.monotonic(), time.time()
    try:
        asyncio.run(
            publish(
                bench.bootstrap,
                s.ordered.input_topic,
                [(b"s0000000", orjson.dumps({"messageId": "again", "seq": 2, "type": "t"}))],
            )
        )
        measure_output(bench.bootstrap, s.ordered.ordered_topic, n + 1, w.running, 600)
        took = time.monotonic() - t0
        rss = max(rss, _peak_rss_mb(w.pid))
        clean = Figure(
            f"restart to first output, {n:,} keys of state, {PINNED}",
            took,
            "s",
            f"< {RESTART_S:g} s",
            took < RESTART_S,
            {
                "changelog records": sum(ends.values()),
                "phases s": {**phases(w.log(), started), "first output": took},
                "log": str(w.log_path),
            },
        )
        bench.say(f"  after a clean stop: first output in {took:.1f} s")
        killed = _killed(bench, s, w, n, tag)
    finally:
        w.stop()
    return (
        clean,
        Figure(f"worker peak RSS, {n:,} keys of state, {PINNED}", rss, "MB", "< 500 MB", rss < 500),
        killed,
    )


def _killed(bench: Bench, s: Settings, w: WorkerProcess, n: int, tag: str) -> Figure:
    """With ``w`` running on ``n`` keys of state (settings ``s``):
    publish more input (the next message of a tenth of the keys), kill
    -9 ``w`` once half of its output is out, restart with the same
    instance id: time from the restart to the first output of input
    that had no output before the kill (a message published right after
    the restart makes sure one comes). The restart first emits again
    the outputs it had not seen confirmed (at-least-once: byte-identical
    to the earlier ones); when the first of any output came is in the
    phases. In the detail, per partition: the changelog offset the local
    state held before the restart, the changelog's end and what the
    restart replayed (the tail: end - (offset + 1)); and the phases of
    the restart from its log."""
    more = max(1, min(n - 1, n // 10))
    ordered = s.ordered.ordered_topic
    starts = asyncio.run(end_offsets(bench.bootstrap, ordered))
    before = sum(starts.values())
    group, source = s.group_id, s.ordered.input_topic
    read = asyncio.run(records_in(bench.bootstrap, [source]))  # input before this one
    records = [
        (
            f"s{k:07d}".encode(),
            orjson.dumps({"messageId": f"s{k}:2", "seq": 2, "type": "t"}),
        )
        for k in range(1, more + 1)
    ]
    asyncio.run(publish(bench.bootstrap, source, records))
    measure_output(bench.bootstrap, ordered, before + more // 2, w.running, bench.timeout(more))
    w.kill()
    committed = asyncio.run(_committed_input(bench.bootstrap, group, source))
    local = local_offsets(s.runtime.data_dir)
    ends = changelog_ends(bench.bootstrap, s)
    at_kill = asyncio.run(end_offsets(bench.bootstrap, ordered))
    # what was output before the kill: a re-emission is byte-identical
    out = asyncio.run(read_topic(bench.bootstrap, ordered, after=starts))
    known = {(r.key, r.value) for r in out}
    again = WorkerProcess(s, bench.workdir / f"{tag}-3.log", "info").start()
    t0, started = time.monotonic(), time.time()
    try:
        asyncio.run(
            publish(
                bench.bootstrap,
                source,
                [(b"s0000000", orjson.dumps({"messageId": "after", "seq": 3, "type": "t"}))],
            )
        )
        first, took, reemitted = asyncio.run(
            first_new_output(bench.bootstrap, ordered, at_kill, known, again.running, t0, 600)
        )
    finally:
        again.stop()
    log = again.log()
    detail = replay_detail(log, local, ends)
    steps = {**phases(log, started), "first output": first, "first new output": took}
    detail.update(
        {
            "changelog": f"{s.group_id}-state-changelog",
            "changelog records": sum(ends.values()),
            "input after the state": more,
            "its outputs before the kill": len(known),
            # Every earlier message was processed, and each of this
            # input's has one output: so much input at least was
            # processed before the kill; what of it was not committed is
            # read again after the restart (it outputs nothing new).
            "input processed before the kill, at least": read + len(known),
            "input committed before the kill": committed,
            "read again after the restart, at least": read + len(known) - committed,
            "local state kept": "is kept" in log,
            "emitted again (log)": sum(
                int(c) for c in re.findall(r"emitting (\d+) unconfirmed ordered", log)
            ),
            "re-emitted outputs before the first new one": reemitted,
            "checkpoint records": CHECKPOINT_RECORDS,
            "looked at": {str(p): k for p, k in sorted(looked_at(log).items())},
            "phases s": steps,
            "log": str(again.log_path),
        }
    )
    bench.say(
        f"  after kill -9 ({len(known):,} of {more:,} outputs out): first new output in "
        f"{took:.1f} s; replayed {detail['replayed']:,} records (tail {detail['tail']:,}, "
        f"changelog {detail['changelog records']:,}); "
        + ", ".join(f"{k} {v:.1f}" for k, v in steps.items() if k != "assignments")
    )
    return Figure(
        f"restart after kill -9 to first output of new input, {n:,} keys of state, {PINNED}",
        took,
        "s",
        f"< {RESTART_S:g} s",
        took < RESTART_S,
        detail,
    )
