"""What a chaos run is made of and what it yields: its scale, its scenarios
(names, titles, the guarantees each runs under) and each scenario's
:class:`Outcome` (a row of the reliability report)."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqkeeper.settings import Guarantee
from seqkeeper.verification.verify import Checked

LOSS = ("ordered: lost", "deduped: lost", "ordered: still waiting behind a gap")
ORDER = ("ordered: out of order", "ordered: gap without GapSkipped")
COMMAND_LOSS = ("commands without a reply", "events missing")
COMMAND_STATE = (
    "entities whose state differs from the reference",
    "entities whose version is not the applied commands",
    "entities with negative stock",
)


@dataclass(frozen=True)
class Scale:
    messages: int
    keys: int
    kills: int
    freeze: float
    commands: int
    command_kills: int
    #: messages of the freeze, failover and local-state scenarios
    others: int
    #: seconds of input flow per fault cycle (a kill, the freeze); the
    #: failover and the zombie keep it flowing for three cycles
    cycle: float = 20.0


LONG = Scale(
    messages=200_000,
    keys=2_000,
    kills=20,
    freeze=30.0,
    commands=3_000,
    command_kills=5,
    others=40_000,
)
SHORT = Scale(
    messages=3_000, keys=60, kills=3, freeze=5.0, commands=200, command_kills=2, others=3_000
)
SCENARIOS = (
    "kill",
    "kill-static",
    "freeze",
    "failover",
    "corpus",
    "local-state",
    "commands",
    "zombie",
)
#: the scenarios run under each guarantee on a broker with transactions
BOTH_GUARANTEES = ("kill", "kill-static", "freeze", "failover", "commands")
#: the scenarios verified as exactly-once (read_committed, no re-emission):
#: the report's exactly_once column (the others run once, under the
#: configured guarantee, verified as under at_least_once)
VERIFIED_EXACTLY_ONCE = (*BOTH_GUARANTEES, "zombie")
AT_LEAST_ONCE, EXACTLY_ONCE = Guarantee.AT_LEAST_ONCE.value, Guarantee.EXACTLY_ONCE.value
#: the exactly_once column on a broker without transactions
NO_TRANSACTIONS = "n/a (no transactions)"
#: each scenario's row title (the scenario methods' ``Outcome`` titles; a
#: test holds them equal)
TITLES = {
    "kill": "kill -9 the worker",
    "kill-static": "kill -9 the worker, static membership",
    "freeze": "broker frozen (SIGSTOP)",
    "failover": "two workers, one killed",
    "corpus": "bad-input corpus",
    "local-state": "local state deleted, then corrupted",
    "commands": "kill -9 the command worker",
    "zombie": "zombie worker fenced",
}


@dataclass
class Outcome:
    """One row of the reliability report."""

    scenario: str
    messages: int = 0
    faults: int = 0
    lost: int = 0
    order_violations: int = 0
    other_failures: int = 0
    reemitted: int = 0
    dead_lettered: int = 0
    recovery: list[float] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None
    #: the scenario's name in :data:`SCENARIOS` (set by :meth:`Chaos.run`)
    key: str = ""
    #: the processing guarantee its workers ran under (runs before there
    #: was a choice were at-least-once)
    guarantee: str = AT_LEAST_ONCE

    def fail(self, note: str) -> None:
        """Count a failure that is not a loss or an order violation."""
        self.other_failures += 1
        self.notes.append(note)

    def recovered(self, seconds: float | None) -> None:
        """Record a recovery time (``None``: not measured, e.g. nothing left to output)."""
        if seconds is not None:
            self.recovery.append(seconds)

    @property
    def ok(self) -> bool:
        return self.skipped is not None or (
            self.lost == 0 and self.order_violations == 0 and self.other_failures == 0
        )

    def add_checks(self, report: Checked, loss: tuple[str, ...], order: tuple[str, ...]) -> None:
        for check in report.failures():
            if check.name in loss:
                self.lost += check.count
            elif check.name in order:
                self.order_violations += check.count
            else:
                self.other_failures += check.count
            self.notes.append(f"{check.name}: {check.count} {check.detail}".strip())
