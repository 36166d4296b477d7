"""``seqkeeper verify``, ``demo`` and ``chaos``: is the output what the
input promised, on a workload, under faults."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from seqkeeper.cli.errors import Usage, exit_with
from seqkeeper.cli.options import (
    BrokerOpt,
    ClusterOpt,
    CodecOpt,
    DedupedTopicOpt,
    DlqTopicOpt,
    InputTopicOpt,
    IsolationOpt,
    KeyFieldOpt,
    MessageIdFieldOpt,
    MessageIdHeaderOpt,
    OrderedTopicOpt,
    SeqFieldOpt,
    SeqHeaderOpt,
    flag,
    settings_of,
)


def verify(
    broker: ClusterOpt = None,
    input_topic: InputTopicOpt = None,
    ordered_topic: OrderedTopicOpt = None,
    deduped_topic: DedupedTopicOpt = None,
    dlq_topic: DlqTopicOpt = None,
    late_topic: Annotated[Optional[str], flag("late_topic")] = None,
    drained: Annotated[
        bool, typer.Option(help="Every gap must have been given up by now (input finished).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    isolation: IsolationOpt = None,
    exactly_once: Annotated[
        bool,
        typer.Option(
            "--exactly-once",
            help="Also fail (exit 1) when any output was emitted more than once, even "
            "byte-identically (re-emissions, counted per output). It does not change "
            "how the topics are read (--isolation; read_uncommitted also sees the writes "
            "of aborted transactions).",
        ),
    ] = False,
    key_field: KeyFieldOpt = None,
    seq_field: SeqFieldOpt = None,
    seq_header: SeqHeaderOpt = None,
    message_id_field: MessageIdFieldOpt = None,
    message_id_header: MessageIdHeaderOpt = None,
    codec: CodecOpt = None,
) -> None:
    """Check output topics against their input: lost messages, repeats (must
    be byte-identical), per-key order, gaps without a GapSkipped marker,
    dead letters without a reason. Exit 1 on any failure. Messages are read
    as the worker reads them: give it the worker's key, sequence, messageId
    and codec settings (environment or flags)."""
    import asyncio
    import dataclasses

    import orjson
    from rich.console import Console

    from seqkeeper.access import check_topics
    from seqkeeper.demo import message_shape, no_reemissions, summary, verify_topics
    from seqkeeper.plugins import PluginError

    settings = settings_of(
        needs_broker=True,
        connects=True,
        bootstrap=broker,
        input_topic=input_topic,
        ordered_topic=ordered_topic,
        deduped_topic=deduped_topic,
        dlq_topic=dlq_topic,
        late_topic=late_topic,
        key_field=key_field,
        seq_field=seq_field,
        seq_header=seq_header,
        message_id_field=message_id_field,
        message_id_header=message_id_header,
        codec=codec,
        isolation=isolation,
    )
    read = settings.broker.isolation
    try:
        shape = message_shape(settings)
    except (PluginError, ValueError) as e:  # a codec or a dotted path: one line
        raise Usage(str(e)) from None
    started = time.monotonic()
    o = settings.ordered
    # Read on each topic, before the first is read (the late topic may be
    # missing: the default policy never creates it)
    topics = [o.input_topic, o.ordered_topic, o.deduped_topic, o.dlq_topic, o.late_topic]
    asyncio.run(check_topics(settings, reads=topics, optional={o.late_topic}))
    report = asyncio.run(verify_topics(settings, drained, isolation=read, shape=shape))
    if exactly_once:
        no_reemissions(report)
    if as_json:
        doc = dataclasses.asdict(report)
        doc["ok"] = report.ok
        doc["isolation"] = read
        typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    else:
        title = f"seqkeeper verify ({read}{', exactly-once' if exactly_once else ''})"
        Console().print(summary(report, time.monotonic() - started, title))
    exit_with(0 if report.ok else 1)


def chaos(
    broker: BrokerOpt = None,
    scenario: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Run only these (repeatable): kill, kill-static, freeze, failover, corpus, "
            "local-state, commands, zombie. On a broker with transactions kill, kill-static, "
            "freeze and failover run "
            "under at_least_once and again under exactly_once (verified read_committed, "
            "no re-emission allowed); zombie needs one."
        ),
    ] = None,
    short: Annotated[
        bool, typer.Option(help="The seconds-long version (as the tests run).")
    ] = False,
    report: Annotated[
        Optional[Path],
        typer.Option(
            help="Write the report as Markdown here, a column per broker: this run's "
            "outcomes replace its broker's in the JSON beside it (same name, .json), "
            "the other brokers' are kept."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed of workloads and fault times.")] = 1,
    workdir: Annotated[
        Optional[Path], typer.Option(help="Worker data and logs (default: a temporary dir).")
    ] = None,
) -> None:
    """Inject faults (kill -9, broker freeze, failover, bad input, lost or
    corrupted local state, a frozen worker that must be fenced) into real
    workers and verify nothing is lost and per-key order holds, under each
    processing guarantee the broker has. Exit 1 if any scenario fails."""
    import tempfile

    from rich.console import Console

    from seqkeeper.verification.chaos import (
        LONG,
        SCENARIOS,
        SHORT,
        BrokerRun,
        Chaos,
        broker_label,
        machine,
        now_utc,
        table,
        write_report,
    )
    from seqkeeper.worker import broker_for

    names = scenario or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise Usage(f"unknown scenario {', '.join(unknown)}; one of {', '.join(SCENARIOS)}")
    console = Console()
    scale = SHORT if short else LONG
    settings = settings_of(bootstrap=broker, connects=True)
    with (
        broker_for(settings) as settings,
        tempfile.TemporaryDirectory(prefix="seqkeeper-chaos-") as tmp,
    ):
        from seqkeeper.worker import current_local

        local = current_local()  # None when a broker was given
        runner = Chaos(
            settings, workdir or Path(tmp), scale, local=local, seed=seed, console=console
        )
        outcomes = runner.run(
            names,
            lambda o: console.print(f"{o.scenario} ({o.guarantee}): {'PASS' if o.ok else 'FAIL'}"),
        )
    console.print(table(outcomes, runner.transactions))
    for o in outcomes:
        for note in o.notes:
            console.print(f"  {o.scenario} ({o.guarantee}): {note}")
    if runner.probe_error:
        console.print(f"error: {runner.probe_error}")
    if report is not None:
        kind = None if local is None else local.kind
        command = " ".join(
            ["seqkeeper chaos", *(["--short"] if short else [])]
            + [f"--scenario {n}" for n in (scenario or [])]
            + ([f"--seed {seed}"] if seed != 1 else [])
        )
        run = BrokerRun(
            broker=broker_label(kind, settings.broker.bootstrap),
            generated=now_utc(),
            machine=machine(),
            scale=scale,
            command=command,
            outcomes=outcomes,
            kind=kind or "an external cluster",
            transactions=runner.transactions,
        )
        data = write_report(report, run, say=lambda text: console.print(f"warning: {text}"))
        console.print(f"report written to {report} (column {run.broker!r}; runs in {data})")
    # this run's outcomes only: another broker's failure in the report is not this run's
    exit_with(0 if all(o.ok for o in outcomes) and not runner.probe_error else 1)


def demo(
    broker: BrokerOpt = None,
    messages: Annotated[int, typer.Option(help="Valid messages to publish.")] = 100_000,
    keys: Annotated[int, typer.Option(help="Sequence keys.")] = 1_000,
    duplicate_rate: Annotated[
        float, typer.Option(help="Share of messages delivered twice.")
    ] = 0.05,
    malformed: Annotated[int, typer.Option(help="Malformed records mixed in.")] = 24,
    lost: Annotated[int, typer.Option(help="Messages never delivered (permanent gaps).")] = 20,
    seed: Annotated[int, typer.Option(help="Workload random seed.")] = 7,
    partitions: Annotated[Optional[int], typer.Option(help="Topic partitions.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the output.")] = 900.0,
    gap_timeout: Annotated[
        float,
        typer.Option(help="Worker gap timeout in seconds: permanent gaps are given up after it."),
    ] = 10.0,
    topology: Annotated[
        str,
        typer.Option(
            help="ordered (the Resequencer + Idempotent Receiver) or commands "
            "(the command worker on a duplicate storm of inventory commands)."
        ),
    ] = "ordered",
    commands: Annotated[int, typer.Option(help="Distinct commands (--topology commands).")] = 2000,
) -> None:
    """The main job: publish a messy workload, run the worker, verify the output."""
    from seqkeeper.demo import DemoOptions, run_command_demo, run_demo

    if topology == "commands":
        settings = settings_of(bootstrap=broker, partitions=partitions, connects=True)
        exit_with(run_command_demo(settings, commands, seed))

    code = run_demo(
        settings_of(
            bootstrap=broker, partitions=partitions, gap_timeout=gap_timeout, connects=True
        ),
        DemoOptions(
            messages=messages,
            keys=keys,
            duplicate_rate=duplicate_rate,
            malformed=malformed,
            lost=lost,
            seed=seed,
            timeout=timeout,
        ),
    )
    exit_with(code)
