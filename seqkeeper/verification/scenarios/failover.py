"""``failover``: two workers; ``kill -9`` one; the survivor takes its
partitions with their state; start it again."""

from __future__ import annotations

import time

from seqkeeper.verification.outcome import Outcome
from seqkeeper.verification.scenarios.stage import Stage
from seqkeeper.verification.workload import generate


def run(chaos: Stage) -> Outcome:
    sc = chaos.scale
    s = chaos.prepared("failover")
    work = generate(messages=sc.others, keys=sc.keys, malformed=8, seed=chaos.seed + 2)
    out = Outcome("two workers, one killed", messages=len(work.records))
    # input keeps flowing on every partition across the failover
    publisher = chaos.publish_in_background(s, s.ordered.input_topic, work.records, 3 * sc.cycle)
    a_settings = s.with_overrides(data_dir=s.runtime.data_dir / "a")
    b_settings = s.with_overrides(data_dir=s.runtime.data_dir / "b")
    a = chaos.worker(a_settings, "worker-a")
    b = chaos.worker(b_settings, "worker-b")
    try:
        # both own partitions: every partition flows
        chaos.until_output(s, s.ordered.ordered_topic, {}, every_partition=True, worker=b)
        time.sleep(chaos.rng.uniform(1.0, 3.0))
        since = chaos.ends(s, s.ordered.ordered_topic)
        a.kill()
        out.faults += 1
        chaos.say("  kill -9 worker a; b takes over")
        out.recovered(
            chaos.until_output(s, s.ordered.ordered_topic, since, every_partition=True, worker=b)
        )
        time.sleep(2.0)
        a = chaos.worker(a_settings, "worker-a-again")
        publisher.join()
        report = chaos.verified(s, chaos.drain_timeout(work.messages), work.messages, b)
        a.check_alive()
        b.check_alive()
    finally:
        a.stop()
        b.stop()
    return chaos.ordered_result(out, report)
