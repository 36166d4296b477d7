"""``freeze``: freeze the broker (SIGSTOP) mid-run, then resume it (needs a
broker started here, embedded or from KAFKA_HOME: the process must be ours
to stop)."""

from __future__ import annotations

import time

from seqkeeper.verification.outcome import Outcome
from seqkeeper.verification.scenarios.stage import Stage
from seqkeeper.verification.workload import generate


def run(chaos: Stage) -> Outcome:
    out = Outcome("broker frozen (SIGSTOP)")
    if chaos.local is None:
        out.skipped = "needs a broker started here (its process must be ours to stop)"
        return out
    sc = chaos.scale
    s = chaos.prepared("freeze")
    work = generate(messages=sc.others // 2, keys=sc.keys, malformed=8, seed=chaos.seed + 1)
    out.messages = len(work.records)
    # Input flows before, during and after the freeze: a tenth of it at
    # once, for the worker's first output, then the rest over the freeze
    # and a cycle from that output on. (Spread over that time from before
    # the worker started instead, all of it could be out before the freeze
    # when the worker is slow to start, on a busy machine: no output would
    # then be left to measure the recovery by.)
    head = len(work.records) // 10
    chaos.publish_in_background(s, s.ordered.input_topic, work.records[:head], 0.5).join()
    w = chaos.worker(s, "worker")
    try:
        chaos.until_output(s, s.ordered.ordered_topic, {}, worker=w)
        publisher = chaos.publish_in_background(
            s, s.ordered.input_topic, work.records[head:], sc.freeze + sc.cycle
        )
        time.sleep(2.0)
        chaos.local.pause()
        chaos.say(f"  broker frozen for {sc.freeze:.0f}s")
        try:
            time.sleep(sc.freeze)
        finally:
            chaos.local.resume()
        out.faults = 1
        since = chaos.ends(s, s.ordered.ordered_topic)
        out.recovered(chaos.until_output(s, s.ordered.ordered_topic, since, worker=w, timeout=120))
        publisher.join()
        report = chaos.verified(s, chaos.drain_timeout(work.messages), work.messages, w)
        if w.proc is not None and w.proc.poll() is not None:
            out.fail("the worker exited during the freeze")
    finally:
        w.stop()
    return chaos.ordered_result(out, report)
