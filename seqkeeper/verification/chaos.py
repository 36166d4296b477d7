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

"Recovery" is the time from the end of a fault (restart, resume, kill of a
peer) until output flows again: the first new output record, or, for
``failover``, new output on every partition.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from seqkeeper.adapter.offsets import as_topic_partitions, committed_ends
from seqkeeper.broker import LocalBroker
from seqkeeper.demo import message_shape, no_reemissions, publish, verify_topics
from seqkeeper.fleet.poll import poll, records_in
from seqkeeper.processors.dead_letter import REASON
from seqkeeper.security import kafka_options
from seqkeeper.settings import EXAMPLE_HANDLERS, Guarantee, Settings
from seqkeeper.topics import Record, TopicCache, create_topics, end_offsets_of, read_topic
from seqkeeper.verification.corpus import DROPPED, EMITTED, Case, command_cases, ordered_cases
from seqkeeper.verification.verify import Checked, Report
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess

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


class Chaos:
    """Runs scenarios against one broker; workers and data under ``workdir``."""

    def __init__(
        self,
        base: Settings,
        workdir: Path,
        scale: Scale,
        local: LocalBroker | None = None,
        seed: int = 1,
        console: Console | None = None,
        transactions: bool | None = None,
    ) -> None:
        # Input is published over minutes while workers die: a long gap
        # timeout keeps displaced messages from being given up as late
        # arrivals (a policy, tested elsewhere), so every message must show.
        self.base = base.with_overrides(gap_timeout=max(base.ordered.gap_timeout, 600.0))
        self.workdir = workdir
        self.scale = scale
        self.local = local
        self.rng = random.Random(seed)
        self.seed = seed
        self.console = console or Console(quiet=True)
        #: whether the broker has transactions (``None``: asked when a
        #: scenario needs to know, :meth:`has_transactions`)
        self.transactions = transactions
        #: why the broker could not be asked (then no exactly_once run)
        self.probe_error: str | None = None
        #: the guarantee the scenario running now asks of its workers
        #: (``None``: the configured one)
        self.guarantee: str | None = None
        #: the workers the scenario running now started
        self.started: list[WorkerProcess] = []

    # -- plumbing ---------------------------------------------------------

    def has_transactions(self) -> bool:
        """Whether the broker has transactions: asked once (a transactional
        producer of its own starts or does not, as the worker's start-up
        probe asks). When the question cannot be asked, the answer is no,
        and :attr:`probe_error` says why (a failure of the run)."""
        if self.transactions is None and self.probe_error is None:
            from seqkeeper.runtime.guarantee import has_transactions

            bootstrap = self.base.broker.bootstrap
            try:
                self.transactions = asyncio.run(
                    asyncio.wait_for(
                        has_transactions(bootstrap, f"chaos-probe-{uuid.uuid4().hex[:6]}"), 60
                    )
                )
            except Exception as exc:  # (no exactly_once runs: the run fails, see probe_error)
                self.probe_error = (
                    f"could not ask the broker at {bootstrap} whether it has transactions "
                    f"({type(exc).__name__}: {exc}); the exactly_once runs were not made"
                )
                self.say(f"warning: {self.probe_error}")
        return bool(self.transactions)

    def settings(self, scenario: str, **over: object) -> Settings:
        if self.guarantee is not None:
            over.setdefault("processing_guarantee", self.guarantee)
        mode = "-eos" if over.get("processing_guarantee") == EXACTLY_ONCE else ""
        tag = f"{scenario}{mode}-{uuid.uuid4().hex[:6]}"
        s = self.base.with_overrides(
            app_id=f"chaos-{tag}",
            input_topic=f"{tag}.in",
            ordered_topic=f"{tag}.ordered",
            deduped_topic=f"{tag}.deduped",
            dlq_topic=f"{tag}.dlq",
            late_topic=f"{tag}.late",
            command_topic=f"{tag}.commands",
            events_topic=f"{tag}.events",
            command_dlq_topic=f"{tag}.commands.dlq",
            data_dir=self.workdir / tag / "data",
            **over,
        )
        (self.workdir / tag).mkdir(parents=True, exist_ok=True)
        return s

    def prepared(self, scenario: str, *extra_topics: str, **over: object) -> Settings:
        """:meth:`settings` with the topics created."""
        s = self.settings(scenario, **over)
        asyncio.run(
            create_topics(s.broker.bootstrap, [*s.topics(), *extra_topics], s.broker.partitions)
        )
        return s

    def worker(self, settings: Settings, name: str) -> WorkerProcess:
        settings.runtime.data_dir.mkdir(parents=True, exist_ok=True)
        w = WorkerProcess(settings, settings.runtime.data_dir.parent / f"{name}.log").start()
        self.started.append(w)
        return w

    def say(self, text: str) -> None:
        self.console.log(text)

    @staticmethod
    def ends(settings: Settings, topic: str) -> dict[int, int]:
        """``topic``'s end per partition (under exactly_once, its committed
        end: markers and aborted writes are not output)."""
        return asyncio.run(_ends(settings, topic))

    def until_output(
        self,
        settings: Settings,
        topic: str,
        since: dict[int, int],
        every_partition: bool = False,
        timeout: float = 180.0,
        worker: WorkerProcess | None = None,
        done: Callable[[], Awaitable[bool]] | None = None,
    ) -> float | None:
        """Seconds until ``topic`` grows past ``since`` (on every partition
        that ``every_partition`` asks for); ``None`` on timeout or once
        ``done()`` says there is nothing left to output."""
        t0 = time.monotonic()
        moved: set[int] = set()
        took: list[float] = []

        async def read() -> dict[int, int] | None:
            if done is not None and await done():
                return None  # nothing left to output
            return await _ends(settings, topic)

        def flowing(now: dict[int, int] | None) -> bool:
            if now is not None:
                moved.update(p for p, end in now.items() if end > since.get(p, 0))
                if moved and (not every_partition or moved >= set(now)):
                    took.append(time.monotonic() - t0)
            return now is None or bool(took)

        asyncio.run(
            poll(
                read,
                flowing,
                t0 + timeout,
                0.2,
                alive=worker.check_alive if worker is not None else None,
            )
        )
        return took[0] if took else None

    def publish_in_background(
        self,
        settings: Settings,
        topic: str,
        records: list[tuple[bytes | None, bytes | None]],
        seconds: float,
    ) -> threading.Thread:
        """Publish ``records`` evenly over ``seconds`` (input keeps flowing
        while faults happen)."""
        batches = max(1, int(seconds * 2))
        size = -(-len(records) // batches)

        def run() -> None:
            t0 = time.monotonic()
            for i in range(batches):
                asyncio.run(
                    publish(settings.broker.bootstrap, topic, records[i * size : (i + 1) * size])
                )
                time.sleep(max(0.0, t0 + (i + 1) * seconds / batches - time.monotonic()))

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def all_out(self, settings: Settings, topic: str, count: int) -> Callable[[], Awaitable[bool]]:
        """``done`` for :meth:`until_output`: ``topic`` holds ``count`` records
        (under exactly_once, committed records: markers are not records)."""
        if _exactly_once(settings):
            cache = TopicCache(settings.broker.bootstrap, "read_committed")

            async def committed() -> bool:
                return len(await cache.read(topic)) >= count

            return committed

        async def done() -> bool:
            return await records_in(settings.broker.bootstrap, [topic]) >= count

        return done

    def all_distinct(
        self, settings: Settings, topic: str, count: int
    ) -> Callable[[], Awaitable[bool]]:
        """``done`` for :meth:`until_output`: ``topic``'s committed records
        hold ``count`` distinct messageIds."""
        cache = TopicCache(settings.broker.bootstrap, "read_committed")

        async def done() -> bool:
            records = await cache.read(topic)
            return len({orjson.loads(r.value or b"{}").get("messageId") for r in records}) >= count

        return done

    def verified(
        self,
        settings: Settings,
        timeout: float,
        expect_accepted: int,
        worker: WorkerProcess | None = None,
    ) -> Report:
        """Wait until the deduplicated output holds ``expect_accepted``
        messages (cheap: end offsets), then poll the full verification.
        Under exactly_once the outputs are read read_committed, and any
        re-emission fails the report (:func:`seqkeeper.demo.no_reemissions`)."""
        deadline = time.monotonic() + timeout
        exactly = _exactly_once(settings)
        cache = TopicCache(
            settings.broker.bootstrap, "read_committed" if exactly else "read_uncommitted"
        )
        shape = message_shape(settings)  # (once: it loads the codec)

        async def run() -> Report:
            await poll(
                lambda: records_in(settings.broker.bootstrap, [settings.ordered.deduped_topic]),
                lambda accepted: accepted >= expect_accepted,
                deadline,
                1.0,
            )
            return await poll(
                lambda: verify_topics(settings, drained=True, cache=cache, shape=shape),
                lambda report: report.ok,
                deadline,
                2.0,
                timed_out=worker.dump if worker is not None else None,
            )

        report = asyncio.run(run())
        return no_reemissions(report) if exactly else report

    def ordered_result(self, out: Outcome, report: Report) -> Outcome:
        out.add_checks(report, LOSS, ORDER)
        out.reemitted = sum(report.reemitted.values())
        out.dead_lettered = report.dead_lettered
        return out

    def drain_timeout(self, messages: int) -> float:
        return max(180.0, messages / 100)

    # -- scenarios ----------------------------------------------------------

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

    def scenario_kill(self) -> Outcome:
        return self.kills(Outcome("kill -9 the worker"), self.prepared("kill"))

    def scenario_kill_static(self) -> Outcome:
        """As ``kill``, with static group membership (``SEQKEEPER_INSTANCE_ID``,
        as deployed for fast restarts): the restarted worker takes the dead
        one's place in the group at once, where a new member waits for the
        dead one's session to expire."""
        s = self.prepared("kill-static", instance_id="chaos-worker")  # (a new group each run)
        return self.kills(Outcome("kill -9 the worker, static membership"), s)

    def kills(self, out: Outcome, s: Settings) -> Outcome:
        """The kill scenarios: kill -9 a worker ``kills`` times while input
        flows, restart it each time, then verify the output."""
        sc = self.scale
        work = generate(messages=sc.messages, keys=sc.keys, malformed=24, seed=self.seed)
        out.messages = len(work.records)
        # input flows during the kills (a cycle each)
        publisher = self.publish_in_background(
            s, s.ordered.input_topic, work.records, sc.kills * sc.cycle
        )
        finished = self.all_out(s, s.ordered.deduped_topic, work.messages)
        for i in range(sc.kills):
            since = self.ends(s, s.ordered.ordered_topic)
            w = self.worker(s, f"worker-{i}")
            if self.rng.random() < 0.25:  # during start-up or recovery
                time.sleep(self.rng.uniform(0.5, 4.0))
            else:
                out.recovered(
                    self.until_output(s, s.ordered.ordered_topic, since, worker=w, done=finished)
                )
                time.sleep(self.rng.uniform(0.0, 6.0))
            w.check_alive()
            w.kill()
            out.faults += 1
            self.say(f"  kill -9 #{out.faults}")
        publisher.join()
        since = self.ends(s, s.ordered.ordered_topic)
        w = self.worker(s, "worker-final")
        try:
            out.recovered(
                self.until_output(s, s.ordered.ordered_topic, since, worker=w, done=finished)
            )
            report = self.verified(s, self.drain_timeout(work.messages), work.messages, w)
            w.check_alive()
        finally:
            w.stop()
        return self.ordered_result(out, report)

    def scenario_freeze(self) -> Outcome:
        out = Outcome("broker frozen (SIGSTOP)")
        if self.local is None:
            out.skipped = "needs a broker started here (its process must be ours to stop)"
            return out
        sc = self.scale
        s = self.prepared("freeze")
        work = generate(messages=sc.others // 2, keys=sc.keys, malformed=8, seed=self.seed + 1)
        out.messages = len(work.records)
        # input flows before, during and after the freeze
        publisher = self.publish_in_background(
            s, s.ordered.input_topic, work.records, sc.freeze + sc.cycle
        )
        w = self.worker(s, "worker")
        try:
            self.until_output(s, s.ordered.ordered_topic, {}, worker=w)
            time.sleep(2.0)
            self.local.pause()
            self.say(f"  broker frozen for {sc.freeze:.0f}s")
            try:
                time.sleep(sc.freeze)
            finally:
                self.local.resume()
            out.faults = 1
            since = self.ends(s, s.ordered.ordered_topic)
            out.recovered(
                self.until_output(s, s.ordered.ordered_topic, since, worker=w, timeout=120)
            )
            publisher.join()
            report = self.verified(s, self.drain_timeout(work.messages), work.messages, w)
            if w.proc is not None and w.proc.poll() is not None:
                out.fail("the worker exited during the freeze")
        finally:
            w.stop()
        return self.ordered_result(out, report)

    def scenario_failover(self) -> Outcome:
        sc = self.scale
        s = self.prepared("failover")
        work = generate(messages=sc.others, keys=sc.keys, malformed=8, seed=self.seed + 2)
        out = Outcome("two workers, one killed", messages=len(work.records))
        # input keeps flowing on every partition across the failover
        publisher = self.publish_in_background(s, s.ordered.input_topic, work.records, 3 * sc.cycle)
        a_settings = s.with_overrides(data_dir=s.runtime.data_dir / "a")
        b_settings = s.with_overrides(data_dir=s.runtime.data_dir / "b")
        a = self.worker(a_settings, "worker-a")
        b = self.worker(b_settings, "worker-b")
        try:
            # both own partitions: every partition flows
            self.until_output(s, s.ordered.ordered_topic, {}, every_partition=True, worker=b)
            time.sleep(self.rng.uniform(1.0, 3.0))
            since = self.ends(s, s.ordered.ordered_topic)
            a.kill()
            out.faults += 1
            self.say("  kill -9 worker a; b takes over")
            out.recovered(
                self.until_output(s, s.ordered.ordered_topic, since, every_partition=True, worker=b)
            )
            time.sleep(2.0)
            a = self.worker(a_settings, "worker-a-again")
            publisher.join()
            report = self.verified(s, self.drain_timeout(work.messages), work.messages, b)
            a.check_alive()
            b.check_alive()
        finally:
            a.stop()
            b.stop()
        return self.ordered_result(out, report)

    def scenario_local_state(self) -> Outcome:
        sc = self.scale
        s = self.prepared("local-state")
        work = generate(
            messages=sc.others // 2,
            keys=sc.keys,
            malformed=0,
            duplicate_rate=0.0,
            seed=self.seed + 3,
        )
        phases = _phases(work.records, 3)
        out = Outcome("local state deleted, then corrupted", messages=len(work.records))
        asyncio.run(publish(s.broker.bootstrap, s.ordered.input_topic, phases[0]))
        published = list(phases[0])
        w = self.worker(s, "worker-0")
        accepted = len(phases[0])
        try:
            report = self.verified(s, self.drain_timeout(accepted), accepted, w)
        finally:
            w.stop()
        for step, (fault, phase) in enumerate(
            [("deleted", phases[1]), ("corrupted", phases[2])], start=1
        ):
            dbs = sorted(s.runtime.data_dir.rglob("*.db"))
            if not dbs:
                out.fail(f"no local RocksDB to {fault[:-1]}")
            for db in dbs:
                if fault == "deleted":
                    shutil.rmtree(db)
                else:
                    _corrupt(db)
            out.faults += 1
            self.say(f"  local state {fault}")
            since = self.ends(s, s.ordered.ordered_topic)
            w = self.worker(s, f"worker-{step}")
            # the new phase continues every key, plus redeliveries of old messages
            again = self.rng.sample(published, min(50, len(published)))
            asyncio.run(publish(s.broker.bootstrap, s.ordered.input_topic, phase + again))
            published += phase
            accepted += len(phase)
            try:
                out.recovered(self.until_output(s, s.ordered.ordered_topic, since, worker=w))
                report = self.verified(s, self.drain_timeout(accepted), accepted, w)
                w.check_alive()
            finally:
                w.stop()
            if fault == "corrupted" and "is corrupt" not in w.log():
                out.fail("corruption was not reported by the worker")
            if sum(report.reemitted.values()):
                # a clean stop replays nothing: a repeat means lost dedup state
                out.fail(f"re-emissions after a clean stop: {report.reemitted}")
        return self.ordered_result(out, report)

    def scenario_corpus(self) -> Outcome:
        out = Outcome("bad-input corpus")
        s = self.prepared("corpus")
        cases = ordered_cases(s.runtime.app_id)
        work = generate(messages=self.scale.others // 4, keys=20, malformed=0, seed=self.seed)
        w = self.worker(s, "worker")
        try:
            records = _case_records(cases)
            asyncio.run(_send(s.broker.bootstrap, s.ordered.input_topic, records))
            asyncio.run(publish(s.broker.bootstrap, s.ordered.input_topic, work.records))
            report = self.verified(s, self.drain_timeout(work.messages), work.messages, w)
            self.ordered_result(out, report)
            dlq = asyncio.run(read_topic(s.broker.bootstrap, s.ordered.dlq_topic))
            ordered = asyncio.run(read_topic(s.broker.bootstrap, s.ordered.ordered_topic))
            for case, problem in _check_ordered_cases(cases, dlq, ordered):
                out.fail(f"{case.name}: {problem}")
            w.check_alive()
        finally:
            w.stop()
        out.faults += len(cases)
        out.messages = len(records) + len(work.records)
        cmd = self.settings("corpus-commands", topology="commands", handlers=EXAMPLE_HANDLERS)
        replies = f"{cmd.commands.command_topic}.replies"
        asyncio.run(
            create_topics(cmd.broker.bootstrap, [*cmd.topics(), replies], cmd.broker.partitions)
        )
        ccases = command_cases(cmd.runtime.app_id, replies)
        cw = self.worker(cmd, "command-worker")
        try:
            records = _case_records(ccases)
            asyncio.run(_send(cmd.broker.bootstrap, cmd.commands.command_topic, records))
            expected_out = sum(1 for c in ccases if c.expect.startswith("reply:"))
            expected_dlq = len(ccases) - expected_out

            async def answered() -> tuple[int, int]:
                bootstrap = cmd.broker.bootstrap
                return (
                    await records_in(bootstrap, [replies]),
                    await records_in(bootstrap, [cmd.commands.command_dlq_topic]),
                )

            asyncio.run(
                poll(
                    answered,
                    lambda got: got[0] >= expected_out and got[1] >= expected_dlq,
                    time.monotonic() + 120,
                    0.5,
                    alive=cw.check_alive,
                )
            )
            dlq = asyncio.run(read_topic(cmd.broker.bootstrap, cmd.commands.command_dlq_topic))
            answers = asyncio.run(read_topic(cmd.broker.bootstrap, replies))
            out.dead_lettered += len(dlq)
            for case, problem in _check_command_cases(ccases, dlq, answers):
                out.fail(f"{case.name}: {problem}")
            cw.check_alive()
        finally:
            cw.stop()
        out.faults += len(ccases)
        out.messages += len(records)
        return out

    def scenario_commands(self) -> Outcome:
        from seqkeeper.verification.command_storm import storm, wait_until_commands_verified

        sc = self.scale
        s = self.settings("commands", topology="commands", handlers=EXAMPLE_HANDLERS)
        replies = f"{s.commands.command_topic}.replies"
        asyncio.run(create_topics(s.broker.bootstrap, [*s.topics(), replies], s.broker.partitions))
        work = storm(commands=sc.commands, reply_to=replies, seed=self.seed)
        out = Outcome("kill -9 the command worker", messages=len(work.records))
        publisher = self.publish_in_background(
            s, s.commands.command_topic, work.records, sc.command_kills * sc.cycle
        )
        # at_least_once: every record but the poison is answered (copies
        # too); exactly_once: every command (a copy read before its
        # command's transaction shares its reply)
        if _exactly_once(s):
            finished = self.all_distinct(s, replies, work.asking)
        else:
            finished = self.all_out(s, replies, len(work.records) - work.poison)
        for i in range(sc.command_kills):
            since = self.ends(s, replies)
            w = self.worker(s, f"worker-{i}")
            out.recovered(self.until_output(s, replies, since, worker=w, done=finished))
            time.sleep(self.rng.uniform(0.0, 4.0))
            w.check_alive()
            w.kill()
            out.faults += 1
        publisher.join()
        since = self.ends(s, replies)
        w = self.worker(s, "worker-final")
        try:
            out.recovered(self.until_output(s, replies, since, worker=w, done=finished))
            report = wait_until_commands_verified(
                s, replies, self.drain_timeout(len(work.records)), w, every=2.0
            )
        finally:
            w.stop()
        out.add_checks(report, COMMAND_LOSS, COMMAND_STATE)
        out.reemitted = report.redispatched
        if _exactly_once(s):  # (a reply sent again answers a copy that asked after it)
            out.reemitted = report.repeated.get("events", 0)
            out.notes.append(
                f"replies sent again to later copies: {report.repeated.get('replies', 0)}"
            )
        out.dead_lettered = report.dead_lettered
        return out

    def scenario_zombie(self) -> Outcome:
        out = Outcome("zombie worker fenced", guarantee=EXACTLY_ONCE)
        if not self.has_transactions():
            out.skipped = "needs a broker with transactions (exactly_once)"
            return out
        sc = self.scale
        s = self.prepared("zombie", processing_guarantee=EXACTLY_ONCE)
        work = generate(messages=sc.others // 2, keys=sc.keys, malformed=8, seed=self.seed + 4)
        out.messages = len(work.records)
        session = s.runtime.session_timeout
        # input flows before, during and after the freeze
        publisher = self.publish_in_background(
            s, s.ordered.input_topic, work.records, session + 3 * sc.cycle
        )
        a = self.worker(s.with_overrides(data_dir=s.runtime.data_dir / "a"), "worker-a")
        b: WorkerProcess | None = None
        b_code: int | None = None
        try:
            self.until_output(s, s.ordered.ordered_topic, {}, worker=a)
            time.sleep(self.rng.uniform(1.0, 3.0))  # a in the middle of its work
            assert a.proc is not None
            a.proc.send_signal(signal.SIGSTOP)
            out.faults = 1
            self.say(f"  worker a frozen past its session timeout ({session:g} s)")
            time.sleep(session + 2.0)
            since = self.ends(s, s.ordered.ordered_topic)
            b = self.worker(s.with_overrides(data_dir=s.runtime.data_dir / "b"), "worker-b")
            out.recovered(
                self.until_output(s, s.ordered.ordered_topic, since, every_partition=True, worker=b)
            )
            a.proc.send_signal(signal.SIGCONT)
            self.say("  worker b owns every partition; worker a resumed")
            for problem in zombie_problems(a, 60.0):
                out.fail(problem)
            publisher.join()
            report = self.verified(s, self.drain_timeout(work.messages), work.messages, b)
            b.check_alive()
        finally:
            if a.running():
                a.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
                a.stop()
            if b is not None:
                b_code = b.stop()
        if b_code != 0:
            out.fail(f"worker b's clean stop (SIGTERM) exited with {b_code}")
        return self.ordered_result(out, report)


# -- helpers ------------------------------------------------------------------


def zombie_problems(worker: WorkerProcess, timeout: float) -> list[str]:
    """What is wrong with a resumed zombie ``worker`` once its partitions
    have a new owner: it must log ``fenced:`` and exit with a fenced
    worker's code (``FENCED_EXIT``) within ``timeout`` seconds (none: it is
    fenced and gone)."""
    from seqkeeper.runtime.wiring import FENCED_EXIT

    assert worker.proc is not None
    try:
        code: int | None = worker.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        code = None
    log = worker.log()
    fenced = [line for line in log.splitlines() if "fenced:" in line]
    problems = []
    if not fenced:
        problems.append(f"the zombie logged no 'fenced:' line; log: {worker.log_path}")
    if code is None:
        problems.append(
            f"the zombie was still running {timeout:g} s after it was resumed"
            + (" (it logged 'fenced:')" if fenced else "")
            + f"; log: {worker.log_path}"
        )
    elif code != FENCED_EXIT:
        problems.append(
            f"the zombie exited with {code}, not as a fenced worker ({FENCED_EXIT}); "
            f"log: {worker.log_path}"
        )
    return problems


def _phases(
    records: list[tuple[bytes | None, bytes | None]], n: int
) -> list[list[tuple[bytes | None, bytes | None]]]:
    """Split a workload so that each phase holds, per key, the next run of
    sequences (so each phase ends with nothing waiting behind a gap)."""
    import orjson

    per_key: dict[bytes | None, list[tuple[int, tuple[bytes | None, bytes | None]]]] = {}
    for rec in records:
        seq = orjson.loads(rec[1] or b"{}")["seq"]
        per_key.setdefault(rec[0], []).append((seq, rec))
    phases: list[list[tuple[bytes | None, bytes | None]]] = [[] for _ in range(n)]
    for items in per_key.values():
        items.sort(key=lambda x: x[0])
        cut = [len(items) * i // n for i in range(n + 1)]
        for i in range(n):
            phases[i] += [rec for _, rec in items[cut[i] : cut[i + 1]]]
    rng = random.Random(0)
    for phase in phases:
        rng.shuffle(phase)
    return phases


def _exactly_once(settings: Settings) -> bool:
    """Whether ``settings`` ask the workers for exactly_once."""
    return settings.runtime.processing_guarantee == EXACTLY_ONCE


async def _ends(settings: Settings, topic: str) -> dict[int, int]:
    """``topic``'s end offset per partition; under exactly_once, 1 + the
    offset of its last committed record (a transaction's commit or abort
    marker, and an aborted write, move the end offset without output)."""
    if _exactly_once(settings):
        tps = as_topic_partitions(topic, settings.broker.partitions)
        got = await committed_ends(settings.broker.bootstrap, tps)
    else:
        got = await end_offsets_of(settings.broker.bootstrap, [topic])
    return {tp.partition: end for tp, end in got.items()}


def _corrupt(db: Path) -> None:
    """Flip bytes in the middle of every table file (the MANIFEST and CURRENT
    too when there is no table file yet)."""
    targets = sorted(db.glob("*.sst")) or sorted(db.glob("MANIFEST-*"))
    for f in targets:
        data = bytearray(f.read_bytes())
        start = len(data) // 3
        for i in range(start, min(len(data), start + 256)):
            data[i] ^= 0xFF
        f.write_bytes(bytes(data))


def _case_records(
    cases: list[Case],
) -> list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]]:
    out: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]] = []
    for c in cases:
        out += [(k, v, ()) for k, v in c.before]
        out.append((c.key, c.value, c.headers))
    return out


async def _send(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]],
) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        **kafka_options(),
        acks="all",
        max_request_size=1_048_576,
        linger_ms=5,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(topic, v, key=k, headers=list(h) or None) for k, v, h in records
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def _dlq_reasons(dlq: list[Record]) -> dict[tuple[bytes | None, bytes | None], set[str]]:
    """The reason headers of the dead letters, per (key, value)."""
    reasons: dict[tuple[bytes | None, bytes | None], set[str]] = {}
    for r in dlq:
        reasons.setdefault((r.key, r.value), set()).add((r.header(REASON) or b"").decode())
    return reasons


def _check_ordered_cases(
    cases: list[Case], dlq: list[Record], ordered: list[Record]
) -> Iterator[tuple[Case, str]]:
    reasons = _dlq_reasons(dlq)
    emitted: dict[tuple[bytes | None, bytes | None], int] = {}
    for r in ordered:
        emitted[(r.key, r.value)] = emitted.get((r.key, r.value), 0) + 1
    for c in cases:
        got = reasons.get((c.key, c.value), set())
        if c.expect == EMITTED:
            if not emitted.get((c.key, c.value)):
                yield c, "expected in the ordered output, not there"
        elif c.expect == DROPPED:
            first = c.before[0]
            if not emitted.get(first) or (
                (c.key, c.value) != first and emitted.get((c.key, c.value))
            ):
                yield c, "expected the first copy emitted and this one dropped"
        elif got != {c.expect}:
            yield c, f"expected dead letter {c.expect!r}, got {sorted(got) or 'none'}"


def _check_command_cases(
    cases: list[Case], dlq: list[Record], replies: list[Record]
) -> Iterator[tuple[Case, str]]:
    import orjson

    reasons = _dlq_reasons(dlq)
    answers = {}
    for r in replies:
        doc = orjson.loads(r.value or b"{}")
        answers[doc.get("causationId")] = doc
    for c in cases:
        if c.expect.startswith("reply:"):
            mid = orjson.loads(c.value or b"{}").get("messageId")
            doc = answers.get(mid)
            want = c.expect.removeprefix("reply:")
            if doc is None:
                yield c, "no reply"
            elif want == "ok" and (not doc["success"] or doc.get("version") != 1):
                yield c, f"expected applied once (version 1), got {doc}"
            elif want == "failed" and doc["success"]:
                yield c, "expected a failure reply"
            elif want == "expired" and (doc["success"] or doc["message"] != "expired"):
                yield c, f"expected an 'expired' reply, got {doc['message']!r}"
        elif reasons.get((c.key, c.value), set()) != {c.expect}:
            got = sorted(reasons.get((c.key, c.value), set())) or "none"
            yield c, f"expected dead letter {c.expect!r}, got {got}"


# -- the report -----------------------------------------------------------------


def _recovery(out: Outcome) -> str:
    if not out.recovery:
        return "–"
    return f"{max(out.recovery):.1f} (median {sorted(out.recovery)[len(out.recovery) // 2]:.1f})"


ROW = (
    "scenario",
    "messages",
    "faults",
    "lost",
    "order violations",
    "other failures",
    "re-emitted (identical)",
    "dead-lettered",
    "recovery s, worst (median)",
    "result",
)


def _cells(out: Outcome) -> list[str]:
    result = "skipped" if out.skipped else ("PASS" if out.ok else "FAIL")
    return [
        out.scenario,
        f"{out.messages:,}",
        f"{out.faults:,}",
        f"{out.lost:,}",
        f"{out.order_violations:,}",
        f"{out.other_failures:,}",
        f"{out.reemitted:,}",
        f"{out.dead_lettered:,}",
        _recovery(out),
        result,
    ]


#: the columns after :data:`ROW` once runs have processing guarantees: the
#: guarantee of the row's run, and the scenario's run under exactly_once
GUARANTEE_ROW = ("guarantee", EXACTLY_ONCE)


def by_scenario(outcomes: list[Outcome]) -> dict[str, list[Outcome]]:
    """The outcomes of each scenario (one per guarantee it ran under), in
    the order they came."""
    groups: dict[str, list[Outcome]] = {}
    for out in outcomes:
        groups.setdefault(_key(out), []).append(out)
    return groups


def main_outcome(outs: list[Outcome]) -> Outcome:
    """A scenario's row: its at_least_once run when it has one (the
    exactly_once run is its own column), else its only run."""
    return next((o for o in outs if o.guarantee == AT_LEAST_ONCE), outs[0])


def exactly_once_cell(outs: list[Outcome], transactions: bool | None) -> str:
    """The exactly_once column of a scenario: its run under exactly_once
    (:func:`summary_cell`), :data:`NO_TRANSACTIONS` on a broker without
    transactions, else "not run"; "–" for a scenario not verified as
    exactly-once (:data:`VERIFIED_EXACTLY_ONCE`), whatever it ran under."""
    if outs and _key(outs[0]) not in VERIFIED_EXACTLY_ONCE:
        return "–"
    eo = next((o for o in outs if o.guarantee == EXACTLY_ONCE), None)
    if eo is not None and not (eo.skipped and transactions is False):
        return summary_cell(eo)
    return NO_TRANSACTIONS if transactions is False else "not run"


SHORT_ROW = ("scenario", "msgs", "faults", "lost", "order", "other", "re-emit", "DLQ", "recovery s")


def table(outcomes: list[Outcome], transactions: bool | None = None) -> Table:
    """The console's table: a row per scenario, its at_least_once run (or
    its only one), and its exactly_once run in the last column."""
    t = Table(title="seqkeeper chaos", caption="columns: see docs/reliability.md")
    for name in (*SHORT_ROW, "result", *GUARANTEE_ROW):
        t.add_column(
            name,
            justify="left" if name in ("scenario", "result", *GUARANTEE_ROW) else "right",
            no_wrap=name != EXACTLY_ONCE,
        )
    for outs in by_scenario(outcomes).values():
        main = main_outcome(outs)
        t.add_row(*_cells(main), main.guarantee, exactly_once_cell(outs, transactions))
    return t


# -- runs per broker, kept as JSON beside the report --------------------------


@dataclass
class BrokerRun:
    """One broker's chaos run: an entry of the report's JSON (``docs/reliability.json``)."""

    #: stable label, the report's column: see :func:`broker_label`
    broker: str
    #: when the run ended, ISO 8601 in UTC
    generated: str
    #: :func:`machine`
    machine: str
    scale: Scale
    command: str
    outcomes: list[Outcome]
    #: the broker in words, e.g. "the embedded broker (Tansu 0.6)"
    kind: str = ""
    #: whether the broker has transactions (``None``: not known, a run
    #: from before the exactly_once runs)
    transactions: bool | None = None

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["outcomes"] = [{**asdict(o), "ok": o.ok} for o in self.outcomes]
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BrokerRun:
        names = {f.name for f in fields(Outcome)}
        outcomes = [Outcome(**{k: v for k, v in o.items() if k in names}) for o in doc["outcomes"]]
        return cls(
            broker=doc["broker"],
            generated=doc["generated"],
            machine=doc["machine"],
            scale=Scale(**doc["scale"]),
            command=doc["command"],
            outcomes=outcomes,
            kind=doc.get("kind", ""),
            transactions=doc.get("transactions"),
        )


def broker_label(kind: str | None, bootstrap: str) -> str:
    """The report's column for a broker: "embedded", "Apache Kafka <version>"
    (from a started broker's ``kind``), or "external cluster <bootstrap>"
    (``kind`` None: not started here)."""
    if kind is None:
        return f"external cluster {bootstrap}"
    if kind.startswith("Apache Kafka"):
        return kind
    return "embedded"


def machine() -> str:
    """The machine line of the report."""
    return f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def now_utc() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def load_runs(path: Path) -> dict[str, BrokerRun]:
    """The runs kept in ``path`` by broker label (none when it does not exist).
    Raises ``ValueError`` when it cannot be read as such."""
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
        return {label: BrokerRun.from_json(entry) for label, entry in doc.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(
            f"{path}: not a chaos report's runs ({type(exc).__name__}: {exc})"
        ) from exc


def merge_runs(runs: dict[str, BrokerRun], run: BrokerRun) -> dict[str, BrokerRun]:
    """``runs`` with ``run`` in its broker's place; the other brokers' runs kept."""
    return {**runs, run.broker: run}


def write_report(
    report: Path, run: BrokerRun, say: Callable[[str], None] = lambda text: None
) -> Path:
    """Put ``run`` in the JSON beside ``report`` (``report`` with suffix
    ``.json``; its other brokers' runs kept) and regenerate ``report`` from
    every run in it. Returns the JSON's path. An unreadable JSON is moved
    aside to ``*.json.bad`` (and ``say`` tells), not lost."""
    data = report.with_suffix(".json")
    try:
        runs = load_runs(data)
    except ValueError as exc:
        bad = data.with_name(data.name + ".bad")
        data.replace(bad)
        say(f"{exc}; moved to {bad}, the report starts again from this run")
        runs = {}
    runs = merge_runs(runs, run)
    report.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(
        json.dumps({label: r.to_json() for label, r in runs.items()}, indent=2, ensure_ascii=False)
        + "\n"
    )
    report.write_text(markdown(list(runs.values()), data.name))
    return data


# -- the Markdown ---------------------------------------------------------------


def _md(text: str) -> str:
    """``text`` safe in a Markdown table cell or list item."""
    return " ".join(text.split()).replace("|", "\\|")


def _key(out: Outcome) -> str:
    """The scenario's row: its name in :data:`SCENARIOS` (its title if it has none)."""
    return out.key or out.scenario


def _column_order(run: BrokerRun) -> tuple[int, str]:
    label = run.broker
    return (0 if label == "embedded" else 1 if label.startswith("Apache Kafka") else 2, label)


def _scale_text(scale: Scale) -> str:
    return (
        f"{scale.messages:,} messages over {scale.keys:,} keys (5% duplicated, shuffled),"
        f" {scale.kills} kills; {scale.others:,} messages in the other scenarios; broker frozen"
        f" {scale.freeze:.0f}s; {scale.commands:,} commands"
        f" (1–5 copies each), {scale.command_kills} kills"
    )


def _when(generated: str) -> str:
    try:
        return f"{datetime.fromisoformat(generated).astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    except ValueError:
        return generated


def _per_broker(title: str, runs: list[BrokerRun], text: Callable[[BrokerRun], str]) -> list[str]:
    """One list item, or one per broker when the brokers' runs differ."""
    values = [text(r) for r in runs]
    if len(set(values)) == 1:
        return [f"- {title}: {values[0]}"]
    return [f"- {title}, per broker:"] + [
        f"  - {r.broker}: {v}" for r, v in zip(runs, values, strict=True)
    ]


def summary_cell(out: Outcome | None) -> str:
    """One scenario on one broker, compact: ``PASS: 0 lost, 0 order,
    51,192 re-emitted, 74.2 s (median 59.6)``."""
    if out is None:
        return "not run"
    if out.skipped:
        return f"skipped: {_md(out.skipped)}"
    parts = [f"{out.lost:,} lost", f"{out.order_violations:,} order"]
    if out.other_failures:
        parts.append(f"{out.other_failures:,} other")
    parts.append(f"{out.reemitted:,} re-emitted")
    if out.recovery:
        parts.append(_recovery(out).replace(" (", " s (", 1))
    return f"{'PASS' if out.ok else 'FAIL'}: " + ", ".join(parts)


def markdown(runs: list[BrokerRun], data: str = "reliability.json") -> str:
    """The report as Markdown (``docs/reliability.md``) from every broker's
    run: generated, not written. ``data``: the JSON the runs are kept in."""
    runs = sorted(runs, key=_column_order)
    present = {_key(o) for r in runs for o in r.outcomes}
    keys = [k for k in SCENARIOS if k in present] + sorted(present - set(SCENARIOS))
    by_key = [by_scenario(r.outcomes) for r in runs]
    # (the guarantee columns once a run knows of guarantees)
    guarantees = any(
        r.transactions is not None or any(o.guarantee != AT_LEAST_ONCE for o in r.outcomes)
        for r in runs
    )
    row = ROW + GUARANTEE_ROW if guarantees else ROW

    def main_cell(outs: list[Outcome] | None) -> str:
        if not outs:
            return summary_cell(None)
        main = main_outcome(outs)
        under = f" ({main.guarantee})" if guarantees and main.guarantee != AT_LEAST_ONCE else ""
        return summary_cell(main) + under

    def ordered(outcomes: list[Outcome]) -> list[Outcome]:
        return sorted(outcomes, key=lambda o: (keys.index(_key(o)), o.guarantee != AT_LEAST_ONCE))

    def label(out: Outcome) -> str:
        return _md(out.scenario) + (f" ({out.guarantee})" if guarantees else "")

    titles = dict(TITLES)
    for r in runs:
        for o in r.outcomes:
            titles.setdefault(_key(o), o.scenario)
    lines = [
        "# Reliability report",
        "",
        "Generated by `seqkeeper chaos --report`, one run per broker: each run",
        "replaces its own broker's column and keeps the others (the outcomes of",
        f"every run are in `{data}` beside this file). Do not edit: run it",
        "again, with `KAFKA_HOME` set for the Apache Kafka column.",
        "",
        "- Runs:",
    ]
    for r in runs:
        kind = f" ({_md(r.kind)})" if r.kind and r.kind != r.broker else ""
        lines.append(f"  - {_md(r.broker)}{kind}: `{r.command}` on {_when(r.generated)}")
    lines += _per_broker("Machine", runs, lambda r: _md(r.machine))
    lines += _per_broker("Scale", runs, lambda r: _scale_text(r.scale))
    lines += [
        "- Gap timeout 600 s: input is published over minutes while workers die, and no",
        "  message is lost on its way in, so every one must come out (none given up).",
        "",
        "## Summary",
        "",
        "Each cell: result: lost, order violations, other failures (when any),",
        "re-emitted (identical), recovery s worst (median).",
    ]
    if guarantees:
        lines += [
            "A scenario ran under at_least_once unless its cell names another",
            'guarantee; its row "…, exactly_once" is the same scenario under',
            "exactly_once, where a read_committed reader must see every output",
            "once (0 re-emitted; for the command worker every event, its replies",
            "to copies that ask again counted in the notes); on a broker without",
            "transactions that row says",
            f'"{NO_TRANSACTIONS}".',
        ]
    lines += [
        "",
        "| scenario | " + " | ".join(_md(r.broker) for r in runs) + " |",
        "|" + "|".join("---" for _ in range(len(runs) + 1)) + "|",
    ]
    for k in keys:
        cells = [main_cell(outs.get(k)) for outs in by_key]
        lines.append(f"| {_md(titles[k])} | " + " | ".join(cells) + " |")
        if guarantees and k in BOTH_GUARANTEES:
            cells = [
                exactly_once_cell(outs.get(k, []), r.transactions)
                for r, outs in zip(runs, by_key, strict=True)
            ]
            lines.append(f"| {_md(titles[k])}, exactly_once | " + " | ".join(cells) + " |")
    for r in runs:
        lines += [
            "",
            f"## {_md(r.broker)}",
            "",
            f"`{r.command}` on {_when(r.generated)}.",
            "",
            "| " + " | ".join(row) + " |",
            "|" + "|".join("---" for _ in row) + "|",
        ]
        groups = by_scenario(r.outcomes)
        for k in sorted(groups, key=keys.index):
            main = main_outcome(groups[k])
            cells = _cells(main)
            if guarantees:
                cells += [main.guarantee, exactly_once_cell(groups[k], r.transactions)]
            lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
    lines += [
        "",
        "Lost: valid input never emitted (or, for commands, never answered or",
        "without its events). Order violations: a key's output going backwards,",
        "or skipping ahead without a GapSkipped marker (commands: an entity's",
        "state or version differing from a reference without duplicates).",
        "Re-emitted: repeats of an earlier output, each byte-identical (same",
        "messageId), so a downstream idempotent receiver drops them; a changed",
        "repeat is a failure. Recovery: from the end of a fault (restart,",
        "resume, a peer's death) to the first new output record (failover: new",
        "output on every partition).",
        "",
    ]
    if guarantees:
        lines += [
            "Guarantee: the processing guarantee the row's workers ran under",
            "(their `processing guarantee:` line). exactly_once: the scenario",
            "under exactly_once (Kafka transactions), verified read_committed:",
            "any re-emission is a failure there, as are loss and disorder; it",
            f'does not run on a broker without transactions ("{NO_TRANSACTIONS}").',
            "–: a scenario without an exactly-once verification: it runs once,",
            "under the guarantee of its guarantee column, verified as under",
            "at_least_once (identical repeats counted, not failures).",
            "",
        ]
    noted = [r for r in runs if any(o.notes or o.skipped for o in r.outcomes)]
    if noted:
        lines += ["## Notes", ""]
    for r in noted:
        outs = ordered(r.outcomes)
        lines += [f"### {_md(r.broker)}", ""]
        lines += [f"- {label(o)}: skipped — {_md(o.skipped)}" for o in outs if o.skipped]
        lines += [f"- {label(o)}: {_md(n)}" for o in outs for n in o.notes]
        lines.append("")
    return "\n".join(lines)
