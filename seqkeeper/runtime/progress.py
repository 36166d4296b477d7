"""Restore progress and readiness, as plain values: per changelog
partition, how much of it a recovery has replayed, out of how much, and
about how long the rest takes; and whether the worker is ready.

Nothing here reads a clock, logs or talks to Faust: time and where the
lines go are arguments (``tests/runtime/test_progress.py``). The adapter
(:class:`seqkeeper.adapter.recovery.SeekFirstRecovery`) hands every
recovery's positions to a :class:`RestoreProgress`; the runtime serves what
it knows (:mod:`seqkeeper.runtime.wiring`: ``/ready`` and the
``seqkeeper_restore_remaining_records`` gauge), and the records replayed
(``seqkeeper_changelog_replayed_total``, counted by
:class:`seqkeeper.adapter.tables.ReplayCounter`).

Positions are offsets: ``(next offset to apply, end offset)``. Counted in
offsets, a total includes what a log holds besides records (transaction
markers, offsets removed by compaction), so it is an upper bound on the
records replayed.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from seqkeeper.runtime.task import TaskState

#: A changelog partition: (topic, partition).
Partition = tuple[str, int]
#: Where a partition's restore is: (next offset to apply, end offset).
Position = tuple[int, int]


@dataclass
class PartitionRestore:
    """One partition's restore: ``0 <= remaining <= total`` and
    ``replayed + remaining == total`` at every step."""

    start: int  #: the first offset this recovery applied (or was to)
    applied: int  #: the next offset to apply
    end: int  #: one past the last offset to apply
    #: (time, applied) samples, oldest first, for the rate
    samples: deque[tuple[float, int]] = field(default_factory=deque)
    done_at: float | None = None  #: when it reached its end

    @property
    def total(self) -> int:
        return max(self.end - self.start, 0)

    @property
    def remaining(self) -> int:
        return min(max(self.end - self.applied, 0), self.total)

    @property
    def replayed(self) -> int:
        return self.total - self.remaining

    def move(self, now: float, position: Position, window: float) -> None:
        applied, end = position
        self.start = min(self.start, applied)  # a seek back starts it over
        self.applied, self.end = applied, end
        samples = self.samples
        if samples and samples[-1][1] > applied:
            samples.clear()  # (the rate of another read)
        samples.append((now, applied))
        while len(samples) > 2 and now - samples[1][0] >= window:
            samples.popleft()  # keep at least two, and one older than the window

    def eta(self) -> float | None:
        """Seconds until the end at the rate over the last samples; None
        until two samples show progress."""
        if self.remaining == 0:
            return 0.0
        if len(self.samples) < 2:
            return None
        (then, was), (now, now_at) = self.samples[0], self.samples[-1]
        if now <= then or now_at <= was:
            return None
        return self.remaining / ((now_at - was) / (now - then))


def name(partition: Partition) -> str:
    return f"{partition[0]}/{partition[1]}"


def about(seconds: float | None) -> str:
    if seconds is None:
        return "time left not known yet"
    if seconds < 100:
        return f"about {math.ceil(seconds)} s left"
    return f"about {math.ceil(seconds / 60)} min left"


class RestoreProgress:
    """Every changelog partition of the current (or last) recovery, and the
    lines that tell its progress: for the partitions still behind, one line
    each at the first sight of them and then at most every ``interval``
    seconds; and a last line per partition once it reached its end.

    Partitions with nothing to replay get no line (a restart on intact local
    state is silent), but count as restored (remaining 0)."""

    def __init__(
        self, say: Callable[[str], None] = lambda line: None, interval: float = 2.0
    ) -> None:
        self.say = say
        self.interval = interval
        #: how far back the rate of the ETA looks, in seconds
        self.window = 10.0
        self.partitions: dict[Partition, PartitionRestore] = {}
        self.began: float | None = None
        self.reported: float | None = None
        self.restoring = False

    def begin(self, now: float) -> None:
        """A recovery began (a rebalance reached the tables): what the last
        one knew is gone (its partitions may be another worker's now)."""
        self.partitions.clear()
        self.began, self.reported, self.restoring = now, None, True

    def observe(self, now: float, positions: Mapping[Partition, Position]) -> None:
        """The partitions' positions at ``now`` (those whose end is known)."""
        if self.began is None:
            self.begin(now)
        for partition, position in positions.items():
            restore = self.partitions.get(partition)
            if restore is None:
                applied, end = position
                restore = self.partitions[partition] = PartitionRestore(applied, applied, end)
            restore.move(now, position, self.window)
        for partition, restore in sorted(self.partitions.items()):
            if restore.done_at is None and restore.remaining == 0 and restore.total > 0:
                self.finish(now, partition, restore)
        behind = sorted((p, r) for p, r in self.partitions.items() if r.remaining > 0)
        if behind and (self.reported is None or now - self.reported >= self.interval):
            self.reported = now
            for partition, restore in behind:
                self.say(
                    f"restoring {name(partition)}: {restore.replayed:,} of {restore.total:,} "
                    f"records ({100 * restore.replayed // restore.total} %), "
                    f"{about(restore.eta())}"
                )

    def end(self, now: float, positions: Mapping[Partition, Position]) -> None:
        """The recovery is complete (Faust says so): every partition is
        restored, whatever the last positions said."""
        self.observe(now, positions)
        for partition, restore in sorted(self.partitions.items()):
            restore.applied = max(restore.applied, restore.end)
            if restore.done_at is None and restore.total > 0:
                self.finish(now, partition, restore)
        self.restoring = False

    def finish(self, now: float, partition: Partition, restore: PartitionRestore) -> None:
        restore.done_at = now
        took = now - (self.began if self.began is not None else now)
        self.say(f"restored {name(partition)}: {restore.total:,} records in {took:.1f} s")

    def remaining(self) -> dict[Partition, int]:
        """Offsets still to replay, per partition of the recovery."""
        return {p: r.remaining for p, r in sorted(self.partitions.items())}


class RestoreCollector(Collector):
    """``seqkeeper_restore_remaining_records{topic,partition}``: what
    :meth:`RestoreProgress.remaining` says, at each scrape."""

    def __init__(self, progress: RestoreProgress) -> None:
        self.progress = progress

    def describe(self) -> Iterator[Any]:
        yield self.gauge()

    def collect(self) -> Iterator[Any]:
        gauge = self.gauge()
        for (topic, partition), remaining in self.progress.remaining().items():
            gauge.add_metric([topic, str(partition)], remaining)
        yield gauge

    @staticmethod
    def gauge() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "seqkeeper_restore_remaining_records",
            "Changelog records (offsets) a restore has still to replay; 0 once restored",
            labels=["topic", "partition"],
        )


class ReplayCollector(Collector):
    """``seqkeeper_changelog_replayed_total{role}``: changelog records
    applied to local state since the worker started, by the role of their
    partition (``active``: restores; ``standby``: standby replicas kept up
    to date), read from ``totals`` at each scrape."""

    def __init__(self, totals: Mapping[str, int]) -> None:
        self.totals = totals

    def describe(self) -> Iterator[Any]:
        yield self.counter()

    def collect(self) -> Iterator[Any]:
        counter = self.counter()
        for role, records in sorted(self.totals.items()):
            counter.add_metric([role], records)
        yield counter

    @staticmethod
    def counter() -> CounterMetricFamily:
        return CounterMetricFamily(
            "seqkeeper_changelog_replayed",
            "Changelog records applied to local state (restores and standby replicas)",
            labels=["role"],
        )


@dataclass(frozen=True)
class Readiness:
    """An answer of ``GET /ready`` or ``GET /health``: status and JSON body."""

    status: int
    body: dict[str, Any]


def readiness(
    task: TaskState, rebalancing: bool, stopping: bool, remaining: Mapping[Partition, int]
) -> Readiness:
    """``GET /ready``: 200 while the task runs and no rebalance is under way,
    else 503 saying why, with the offsets each partition has left to
    restore."""
    if task is TaskState.RUNNING and not rebalancing and not stopping:
        return Readiness(200, {"ready": True})
    if stopping or task in (TaskState.SUSPENDED, TaskState.CLOSED):
        state = "stopping"
    elif any(remaining.values()) or task is TaskState.RESTORING:
        state = "restoring"
    elif rebalancing:
        state = "rebalancing"
    else:
        state = "starting"  # (CREATED: no partitions assigned yet)
    return Readiness(
        503,
        {
            "ready": False,
            "state": state,
            "remaining": {name(p): n for p, n in sorted(remaining.items())},
        },
    )


def liveness(task: TaskState, stopping: bool) -> Readiness:
    """``GET /health``: 200 while the worker is not stopping (answering at
    all says that its event loop turns), whether or not it restores."""
    if stopping or task in (TaskState.SUSPENDED, TaskState.CLOSED):
        return Readiness(503, {"alive": False, "state": "stopping"})
    return Readiness(200, {"alive": True})
