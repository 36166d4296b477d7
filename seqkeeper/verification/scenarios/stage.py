"""The stage every chaos scenario plays on (:class:`Stage`)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
from rich.console import Console

from seqkeeper.broker import LocalBroker
from seqkeeper.fleet.offsets import exactly_once, output_ends
from seqkeeper.fleet.poll import poll, records_in
from seqkeeper.fleet.probes import all_out, until_output
from seqkeeper.fleet.processes import WorkerProcess
from seqkeeper.fleet.publishing import Background, spread
from seqkeeper.settings import Settings
from seqkeeper.topics import TopicCache, create_topics
from seqkeeper.verification.outcome import EXACTLY_ONCE, LOSS, ORDER, Outcome, Scale
from seqkeeper.verification.read_back import message_shape, no_reemissions, verify_topics
from seqkeeper.verification.verify import Report


class Stage:
    """What every chaos scenario uses: one broker, settings and topics of
    its own, the workers it starts (data and logs under ``workdir``), and
    the fleet's probes (:mod:`seqkeeper.fleet`). :class:`~seqkeeper.verification.chaos.Chaos`
    runs the scenarios on it."""

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
        return asyncio.run(output_ends(settings, topic))

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
        ``done()`` says there is nothing left to output
        (:func:`seqkeeper.fleet.probes.until_output`; ``worker``: it must
        stay alive)."""
        return until_output(
            settings,
            topic,
            since,
            every_partition,
            timeout,
            alive=worker.check_alive if worker is not None else None,
            done=done,
        )

    def publish_in_background(
        self,
        settings: Settings,
        topic: str,
        records: list[tuple[bytes | None, bytes | None]],
        seconds: float,
    ) -> Background:
        """Publish ``records`` evenly over ``seconds`` (input keeps flowing
        while faults happen: :func:`seqkeeper.fleet.publishing.spread`); a
        failure to publish is said on the console (then the verification
        finds the input missing)."""
        bootstrap = settings.broker.bootstrap
        return Background(
            lambda stop: spread(bootstrap, topic, records, seconds, stop),
            report=lambda exc: self.say(f"  publishing to {topic} failed: {exc!r}"),
        )

    @staticmethod
    def all_out(settings: Settings, topic: str, count: int) -> Callable[[], Awaitable[bool]]:
        """``done`` for :meth:`until_output`: ``topic`` holds ``count`` records
        (under exactly_once, committed records: markers are not records)."""
        return all_out(settings, topic, count)

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
        re-emission fails the report (:func:`~seqkeeper.verification.read_back.no_reemissions`)."""
        deadline = time.monotonic() + timeout
        exactly = exactly_once(settings)
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
