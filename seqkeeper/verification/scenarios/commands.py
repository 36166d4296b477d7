"""``commands``: ``kill -9`` the command worker during a duplicate storm."""

from __future__ import annotations

import asyncio
import time

from seqkeeper.fleet.offsets import exactly_once
from seqkeeper.settings import EXAMPLE_HANDLERS
from seqkeeper.topics import create_topics
from seqkeeper.verification.outcome import COMMAND_LOSS, COMMAND_STATE, Outcome
from seqkeeper.verification.scenarios.stage import Stage


def run(chaos: Stage) -> Outcome:
    from seqkeeper.verification.command_storm import storm, wait_until_commands_verified

    sc = chaos.scale
    s = chaos.settings("commands", topology="commands", handlers=EXAMPLE_HANDLERS)
    replies = f"{s.commands.command_topic}.replies"
    asyncio.run(create_topics(s.broker.bootstrap, [*s.topics(), replies], s.broker.partitions))
    work = storm(commands=sc.commands, reply_to=replies, seed=chaos.seed)
    out = Outcome("kill -9 the command worker", messages=len(work.records))
    publisher = chaos.publish_in_background(
        s, s.commands.command_topic, work.records, sc.command_kills * sc.cycle
    )
    # at_least_once: every record but the poison is answered (copies
    # too); exactly_once: every command (a copy read before its
    # command's transaction shares its reply)
    if exactly_once(s):
        finished = chaos.all_distinct(s, replies, work.asking)
    else:
        finished = chaos.all_out(s, replies, len(work.records) - work.poison)
    for i in range(sc.command_kills):
        since = chaos.ends(s, replies)
        w = chaos.worker(s, f"worker-{i}")
        out.recovered(chaos.until_output(s, replies, since, worker=w, done=finished))
        time.sleep(chaos.rng.uniform(0.0, 4.0))
        w.check_alive()
        w.kill()
        out.faults += 1
    publisher.join()
    since = chaos.ends(s, replies)
    w = chaos.worker(s, "worker-final")
    try:
        out.recovered(chaos.until_output(s, replies, since, worker=w, done=finished))
        report = wait_until_commands_verified(
            s, replies, chaos.drain_timeout(len(work.records)), w, every=2.0
        )
    finally:
        w.stop()
    out.add_checks(report, COMMAND_LOSS, COMMAND_STATE)
    out.reemitted = report.redispatched
    if exactly_once(s):  # (a reply sent again answers a copy that asked after it)
        out.reemitted = report.repeated.get("events", 0)
        out.notes.append(f"replies sent again to later copies: {report.repeated.get('replies', 0)}")
    out.dead_lettered = report.dead_lettered
    return out
