"""The main job: broker, topics, worker, a messy workload, and a verification.

The publishing (:mod:`seqkeeper.fleet.publishing`) and the read-back
verification (:mod:`seqkeeper.verification.read_back`) it uses are imported
here under their names (``publish``, ``verify_topics``, ``message_shape``,
``no_reemissions``, ``REEMITTED``, ``wait_until_verified``): the command
line and the tests import them from here. Nothing under
``seqkeeper.verification`` imports this module (tests/test_layers.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from seqkeeper.fleet.poll import poll, records_in
from seqkeeper.fleet.processes import WorkerProcess
from seqkeeper.fleet.publishing import publish as publish
from seqkeeper.settings import EXAMPLE_HANDLERS, Settings
from seqkeeper.topics import create_topics
from seqkeeper.verification.read_back import REEMITTED as REEMITTED
from seqkeeper.verification.read_back import message_shape as message_shape
from seqkeeper.verification.read_back import no_reemissions as no_reemissions
from seqkeeper.verification.read_back import verify_topics as verify_topics
from seqkeeper.verification.read_back import wait_until_verified as wait_until_verified
from seqkeeper.verification.verify import Report
from seqkeeper.verification.workload import Workload, generate
from seqkeeper.worker import broker_for


@dataclass
class DemoOptions:
    messages: int = 100_000
    keys: int = 1_000
    duplicate_rate: float = 0.05
    malformed: int = 24
    lost: int = 20
    seed: int = 7
    timeout: float = 600.0
    quiet: bool = False

    def workload(self) -> Workload:
        """The (deterministic) workload these options describe."""
        return generate(
            self.messages,
            self.keys,
            self.duplicate_rate,
            self.malformed,
            seed=self.seed,
            lost=self.lost,
        )


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        disable=console.quiet,
    )


async def wait_for_output(
    settings: Settings,
    topics: list[str],
    expected: int,
    label: str,
    progress: Progress,
    timeout: float,
    worker: WorkerProcess,
) -> None:
    """Wait until ``topics`` hold ``expected`` records, or they stop growing."""
    task = progress.add_task(label, total=expected)
    last, last_change = -1, time.monotonic()

    def settled(done: int) -> bool:
        nonlocal last, last_change
        if done >= expected:
            return True
        if done != last:
            last, last_change = done, time.monotonic()
            return False
        # stalled: let the verification say what is missing
        return time.monotonic() - last_change > 60

    await poll(
        lambda: records_in(settings.broker.bootstrap, topics),
        settled,
        time.monotonic() + timeout,
        0.5,
        alive=worker.check_alive,
        progress=lambda done: progress.update(task, completed=min(done, expected)),
    )


def summary(report: Report, elapsed: float, title: str = "seqkeeper demo: verification") -> Table:
    table = Table(title=title)
    table.add_column("check")
    table.add_column("count", justify="right")
    table.add_column("result")
    for name, value in [
        ("input records", report.input_records),
        ("valid messages", report.valid_messages),
        ("redeliveries dropped", report.redeliveries),
        ("ordered output", report.ordered_records),
        ("deduped output", report.deduped_records),
        ("dead-lettered", report.dead_lettered),
        ("gaps given up (markers)", report.gaps_skipped),
        ("late arrivals dead-lettered", report.late_arrivals),
        ("re-emitted, byte-identical", sum(report.reemitted.values())),
    ]:
        table.add_row(name, f"{value:,}", "")
    for check in report.checks:
        table.add_row(
            check.name,
            f"{check.count:,}",
            "[green]ok[/]" if check.ok else f"[red]FAIL[/] {check.detail}",
        )
    table.caption = f"{'PASSED' if report.ok else 'FAILED'} in {elapsed:.1f}s"
    return table


@contextlib.contextmanager
def demo_worker(
    settings: Settings, extra_topics: Sequence[str] = ()
) -> Iterator[tuple[Settings, WorkerProcess, Path]]:
    """A broker (given or embedded), the topics, and a started worker with
    its data and log in a temporary directory."""
    with (
        broker_for(settings) as settings,
        tempfile.TemporaryDirectory(prefix="seqkeeper-demo-") as tmp,
    ):
        if settings.runtime.data_dir == Settings().runtime.data_dir:
            settings = settings.with_overrides(data_dir=Path(tmp) / "data")
        log_path = Path(tmp) / "worker.log"
        asyncio.run(
            create_topics(
                settings.broker.bootstrap,
                [*settings.topics(), *extra_topics],
                settings.broker.partitions,
                settings.broker.replication,
            )
        )
        yield settings, WorkerProcess(settings, log_path).start(), log_path


def run_demo(settings: Settings, options: DemoOptions) -> int:
    """Run the demo; return the process exit code (0 only if verified)."""
    console = Console(quiet=options.quiet)
    started = time.monotonic()
    workload = options.workload()
    with demo_worker(settings) as (settings, worker, log_path):
        try:
            with _progress(console) as progress:
                asyncio.run(
                    publish(
                        settings.broker.bootstrap,
                        settings.ordered.input_topic,
                        workload.records,
                        progress,
                    )
                )
                delivered = workload.messages - workload.lost
                # Every delivered message is accepted (deduped) or, if its
                # gap was already given up, dead-lettered as late; plus the
                # malformed records.
                asyncio.run(
                    wait_for_output(
                        settings,
                        [
                            settings.ordered.deduped_topic,
                            settings.ordered.dlq_topic,
                            settings.ordered.late_topic,
                        ],
                        delivered + workload.malformed,
                        "accepted or dead-lettered",
                        progress,
                        options.timeout,
                        worker,
                    )
                )
                # Ordered: the last permanent gaps are given up after the gap
                # timeout; poll the verification until it passes (or times out).
                progress.add_task("ordered: waiting for the last gaps to time out", total=None)
                report = asyncio.run(
                    wait_until_verified(
                        settings,
                        settings.ordered.gap_timeout + 60,
                        worker,
                        drained=True,
                        isolation=settings.broker.isolation,
                    )
                )
        except BaseException:
            if os.path.exists(log_path):
                console.print(Path(log_path).read_text()[-4000:])
            raise
        finally:
            worker.stop()
        console.print(summary(report, time.monotonic() - started))
        if not report.ok:
            console.print(Path(log_path).read_text()[-4000:])
        return 0 if report.ok else 1


def run_command_demo(settings: Settings, commands: int, seed: int, quiet: bool = False) -> int:
    """The command worker's demo: a duplicate storm of inventory commands
    (each delivered 1-5 times, plus poison), verified: every command
    answered, each applied once, stock equal to a reference computed
    without duplicates and never negative. Exit code 0 only if verified."""
    from seqkeeper.verification.command_storm import storm, wait_until_commands_verified

    console = Console(quiet=quiet)
    started = time.monotonic()
    # the storm and its checks are the example domain's
    settings = settings.with_overrides(topology="commands", handlers=EXAMPLE_HANDLERS)
    replies = f"{settings.commands.command_topic}.replies"
    work = storm(commands=commands, reply_to=replies, seed=seed)
    with demo_worker(settings, [replies]) as (settings, worker, log_path):
        try:
            with _progress(console) as progress:
                asyncio.run(
                    publish(
                        settings.broker.bootstrap,
                        settings.commands.command_topic,
                        work.records,
                        progress,
                    )
                )
                asyncio.run(
                    wait_for_output(
                        settings,
                        [replies],
                        commands,
                        "commands answered",
                        progress,
                        600.0,
                        worker,
                    )
                )
                report = wait_until_commands_verified(settings, replies, 60, worker)
        finally:
            worker.stop()
        table = Table(title="seqkeeper demo: command worker")
        table.add_column("check")
        table.add_column("count", justify="right")
        table.add_column("result")
        for name, value in (
            ("command records (with copies and poison)", report.copies),
            ("distinct commands", report.commands),
            ("replies", report.replies),
            ("domain events", report.events),
            ("dead-lettered", report.dead_lettered),
            ("replies re-sent or messages re-dispatched (identical)", report.redispatched),
        ):
            table.add_row(name, f"{value:,}", "")
        for c in report.checks:
            table.add_row(
                c.name, f"{c.count:,}", "[green]ok[/]" if c.ok else f"[red]FAIL[/] {c.detail}"
            )
        table.caption = (
            f"{'PASSED' if report.ok else 'FAILED'} in {time.monotonic() - started:.1f}s"
        )
        console.print(table)
        if not report.ok:
            console.print(log_path.read_text()[-4000:])
        return 0 if report.ok else 1
