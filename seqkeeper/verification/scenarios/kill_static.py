"""``kill-static``: ``kill`` with static group membership
(``SEQKEEPER_INSTANCE_ID``): the restarted worker takes the dead one's place
at once."""

from __future__ import annotations

from seqkeeper.verification.outcome import Outcome
from seqkeeper.verification.scenarios.kill import kills
from seqkeeper.verification.scenarios.stage import Stage


def run(chaos: Stage) -> Outcome:
    """As ``kill``, with static group membership (``SEQKEEPER_INSTANCE_ID``,
    as deployed for fast restarts): the restarted worker takes the dead
    one's place in the group at once, where a new member waits for the
    dead one's session to expire."""
    s = chaos.prepared("kill-static", instance_id="chaos-worker")  # (a new group each run)
    return kills(chaos, Outcome("kill -9 the worker, static membership"), s)
