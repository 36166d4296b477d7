"""``kill``: ``kill -9`` the ordered worker at random moments while a
shuffled, duplicated workload flows in; restart it each time. A new group
member: the group waits for the dead one's session to expire."""

from __future__ import annotations

import time

from seqkeeper.settings import Settings
from seqkeeper.verification.outcome import Outcome
from seqkeeper.verification.scenarios.stage import Stage
from seqkeeper.verification.workload import generate


def run(chaos: Stage) -> Outcome:
    return kills(chaos, Outcome("kill -9 the worker"), chaos.prepared("kill"))


def kills(chaos: Stage, out: Outcome, s: Settings) -> Outcome:
    """The kill scenarios: kill -9 a worker ``kills`` times while input
    flows, restart it each time, then verify the output."""
    sc = chaos.scale
    work = generate(messages=sc.messages, keys=sc.keys, malformed=24, seed=chaos.seed)
    out.messages = len(work.records)
    # input flows during the kills (a cycle each)
    publisher = chaos.publish_in_background(
        s, s.ordered.input_topic, work.records, sc.kills * sc.cycle
    )
    finished = chaos.all_out(s, s.ordered.deduped_topic, work.messages)
    for i in range(sc.kills):
        since = chaos.ends(s, s.ordered.ordered_topic)
        w = chaos.worker(s, f"worker-{i}")
        if chaos.rng.random() < 0.25:  # during start-up or recovery
            time.sleep(chaos.rng.uniform(0.5, 4.0))
        else:
            out.recovered(
                chaos.until_output(s, s.ordered.ordered_topic, since, worker=w, done=finished)
            )
            time.sleep(chaos.rng.uniform(0.0, 6.0))
        w.check_alive()
        w.kill()
        out.faults += 1
        chaos.say(f"  kill -9 #{out.faults}")
    publisher.join()
    since = chaos.ends(s, s.ordered.ordered_topic)
    w = chaos.worker(s, "worker-final")
    try:
        out.recovered(
            chaos.until_output(s, s.ordered.ordered_topic, since, worker=w, done=finished)
        )
        report = chaos.verified(s, chaos.drain_timeout(work.messages), work.messages, w)
        w.check_alive()
    finally:
        w.stop()
    return chaos.ordered_result(out, report)
