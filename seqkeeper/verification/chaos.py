"""``seqkeeper chaos``: faults injected into real worker processes on a real
broker, and the outputs verified — nothing lost, per-key order never broken.

Scenarios (each on its own topics and app id, so they share one broker):

* ``kill``        — ``kill -9`` the ordered worker at random moments while a
  shuffled, duplicated workload flows in; restart it each time. A new
  group member: the group waits for the dead one's session to expire.
* ``kill-static`` — the same with static group membership
  (``SEQKEEPER_INSTANCE_ID``): the restarted worker takes the dead one's
  place at once.
* ``freeze``      — freeze the broker (SIGSTOP) mid-run, then resume it
  (needs a broker started here, embedded or from KAFKA_HOME: the process must be ours to stop).
* ``failover``    — two workers; ``kill -9`` one; the survivor takes its
  partitions with their state; start it again.
* ``corpus``      — bad and borderline input (:mod:`seqkeeper.verification.corpus`)
  to the ordered worker and the command worker: each case dead-lettered with
  its reason or handled by its documented policy; the workers stay up.
* ``local-state`` — RocksDB deleted while the worker is stopped, then
  corrupted: rebuilt from the changelog both times, never silently used.
* ``commands``    — ``kill -9`` the command worker during a duplicate storm.
* ``zombie``      — (exactly_once, a broker with transactions) freeze a worker
  (SIGSTOP) past its session timeout while input flows; a second worker
  takes every partition over; the first, resumed, must be fenced (log a
  ``fenced:`` line and exit non-zero) and write nothing that a
  read_committed reader sees twice.

Processing guarantees: on a broker with transactions, the ordered scenarios
(``kill``, ``kill-static``, ``freeze``, ``failover``) and ``commands`` run twice, under ``at_least_once``
(verified read_uncommitted: identical re-emissions are allowed and counted)
and under ``exactly_once`` (verified read_committed: no re-emission at all,
for the command worker no repeated event or reply);
on a broker without transactions only under ``at_least_once``. The other
scenarios run under the configured guarantee (``auto`` unless
``SEQKEEPER_PROCESSING_GUARANTEE`` says otherwise). Each outcome says the
guarantee its workers ran under (their ``processing guarantee:`` line).

Each scenario is a module of :mod:`seqkeeper.verification.scenarios`
(a function of the :class:`~seqkeeper.verification.scenarios.stage.Stage`
it plays on); the outcomes are rendered by
:mod:`seqkeeper.verification.reliability`.

"Recovery" is the time from the end of a fault (restart, resume, kill of a
peer) until output flows again: the first new output record, or, for
``failover``, new output on every partition.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from seqkeeper.fleet.machine import machine_line, now_utc
from seqkeeper.verification.outcome import (
    AT_LEAST_ONCE,
    BOTH_GUARANTEES,
    EXACTLY_ONCE,
    LONG,
    SCENARIOS,
    SHORT,
    TITLES,
    Outcome,
)
from seqkeeper.verification.reliability import BrokerRun, broker_label, table, write_report
from seqkeeper.verification.scenarios import (
    commands,
    corpus,
    failover,
    freeze,
    kill,
    kill_static,
    local_state,
    zombie,
)
from seqkeeper.verification.scenarios.stage import Stage

#: what ``seqkeeper chaos`` (seqkeeper/cli.py) imports from here
__all__ = [
    "LONG",
    "SCENARIOS",
    "SHORT",
    "BrokerRun",
    "Chaos",
    "broker_label",
    "machine",
    "now_utc",
    "table",
    "write_report",
]


def machine() -> str:
    """The machine line of the report (:func:`seqkeeper.fleet.machine.machine_line`)."""
    return machine_line()


class Chaos(Stage):
    """Runs scenarios against one broker; workers and data under ``workdir``.
    Scenario ``name`` is the method ``scenario_<name>`` (dashes as
    underscores): the ``run`` of its module in
    :mod:`seqkeeper.verification.scenarios`."""

    scenario_kill = kill.run
    scenario_kill_static = kill_static.run
    scenario_freeze = freeze.run
    scenario_failover = failover.run
    scenario_corpus = corpus.run
    scenario_local_state = local_state.run
    scenario_commands = commands.run
    scenario_zombie = zombie.run

    def run(
        self, names: list[str], on_done: Callable[[Outcome], None] = lambda o: None
    ) -> list[Outcome]:
        """Run the scenarios ``names``: those of :data:`BOTH_GUARANTEES`
        under at_least_once, then, on a broker with transactions, under
        exactly_once (an outcome each); the others under the configured
        guarantee."""
        outcomes = []
        for name in names:
            modes: list[str | None] = [None]
            if name in BOTH_GUARANTEES:
                modes = [AT_LEAST_ONCE, EXACTLY_ONCE]
            for mode in modes:
                if mode == EXACTLY_ONCE and not self.has_transactions():
                    continue  # (the report says n/a)
                out = self.run_one(name, mode)
                outcomes.append(out)
                on_done(out)
        return outcomes

    def run_one(self, name: str, guarantee: str | None) -> Outcome:
        """The scenario ``name`` with its workers under ``guarantee``
        (``None``: the configured one)."""
        started = time.monotonic()
        self.say(f"scenario {name}" + (f" ({guarantee})" if guarantee else ""))
        self.guarantee, self.started = guarantee, []
        try:
            out: Outcome = getattr(self, "scenario_" + name.replace("-", "_"))()
        except Exception as exc:  # a scenario that cannot finish is a failure, shown
            out = Outcome(
                TITLES.get(name, name),
                other_failures=1,
                notes=[f"raised {type(exc).__name__}: {exc}"],
            )
        finally:
            self.guarantee = None
        out.key = name
        out.guarantee = self.ran_under(out, guarantee)
        out.seconds = time.monotonic() - started
        return out

    def ran_under(self, out: Outcome, asked: str | None) -> str:
        """The guarantee the scenario's workers said they ran under (their
        ``processing guarantee: <mode>`` line); when none said, the one
        asked for (the configured one resolved as the worker would)."""
        said = {
            m for w in self.started for m in re.findall(r"processing guarantee: (\w+)", w.log())
        }
        if len(said) > 1:
            out.fail(f"its workers ran under different guarantees: {', '.join(sorted(said))}")
        if said:
            if asked is not None and said != {asked}:
                out.fail(f"asked for {asked}, its workers ran under {', '.join(sorted(said))}")
            return "+".join(sorted(said))
        if out.guarantee != AT_LEAST_ONCE:
            return out.guarantee  # (the scenario's own, e.g. zombie's)
        configured = asked or self.base.runtime.processing_guarantee
        if configured == "auto" and self.transactions is not None:
            return EXACTLY_ONCE if self.transactions else AT_LEAST_ONCE
        return configured
