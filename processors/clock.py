"""Stream time per partition: the clock the gap timeout and seen-id ages use.

While a partition has a backlog, its stream time follows the timestamps of
the records as they are processed, so a gap is timed by how far the data has
moved past it, not by how long the worker needs to read the backlog (with a
wall clock, a worker catching up on a backlog would give up gaps whose
missing message is only a little further on in that backlog). Once the
partition is caught up (nothing left to read) and has been quiet for
``IDLE_GRACE`` seconds, stream time moves on with the wall clock, so a
permanent gap at the end of the data still times out.

A record time further ahead of the wall clock than ``max_skew`` seconds
(:func:`too_far_ahead`) is no evidence of how far the stream has moved: a
producer's clock, or a field, is wrong. Were it observed, one such record
would move its partition's stream time that far at once, giving up every
gap waiting there and ageing every seen id; the shell dead-letters it
instead, and the clock is left as it was.

Invariants (``tests/processors/test_clock.py``): stream time never goes
backwards; with a backlog it is the newest record time seen within the skew
bound; a record time beyond the bound never moves it; caught up and quiet,
it advances exactly as the wall clock does after the grace.
"""

from __future__ import annotations

import math

from seqkeeper.processors.values import value

#: Seconds a caught-up partition must be quiet before its time follows the wall clock.
IDLE_GRACE = 1.0


def too_far_ahead(record_time: float | None, wall: float, max_skew: float) -> bool:
    """Whether ``record_time`` runs ahead of the wall clock ``wall`` by more
    than ``max_skew`` seconds (``inf``: no bound)."""
    return record_time is not None and record_time - wall > max_skew


@value
class StreamClock:
    """Stream time (seconds) and the wall time it last moved at."""

    time: float | None = None
    moved_at: float = 0.0

    def observe(
        self, record_time: float | None, wall: float, max_skew: float = math.inf
    ) -> StreamClock:
        """The clock after processing a record with this timestamp at
        ``wall``; this very clock when the time is :func:`too_far_ahead`."""
        if record_time is not None and record_time - wall > max_skew:
            return self
        if self.time is None:
            return StreamClock(wall if record_time is None else record_time, wall)
        if record_time is not None and record_time > self.time:
            return StreamClock(record_time, wall)
        # the same clock (records of one fetch share ``wall``): no new one
        return self if wall == self.moved_at else StreamClock(self.time, wall)

    def idle(self, wall: float) -> StreamClock:
        """The partition is caught up: past the grace, time follows the wall clock."""
        if self.time is None:
            return StreamClock(wall, wall)
        extra = wall - self.moved_at - IDLE_GRACE
        if extra <= 0:
            return self
        return StreamClock(self.time + extra, wall - IDLE_GRACE)

    def now(self, wall: float) -> float:
        """Stream time; before the first record (and not caught up) nothing is
        due yet, so it is minus infinity."""
        return float("-inf") if self.time is None else self.time
