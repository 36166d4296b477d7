"""``seqkeeper bench``: the benchmark (:mod:`seqkeeper.bench.harness`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from seqkeeper.cli.errors import Usage, exit_with
from seqkeeper.cli.options import BrokerOpt, settings_of


def bench(
    broker: BrokerOpt = None,
    smoke: Annotated[bool, typer.Option(help="Tiny sizes: checks the harness works.")] = False,
    only: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Only these (repeatable): throughput, latency (with the throughput rounds: "
            "it is measured at half their rate), quix, guarantee, depth, restart, failover, "
            "spark, soak."
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Where JSON and PNG results go.")] = Path(
        "bench/results"
    ),
    messages: Annotated[Optional[int], typer.Option(help="Workload size.")] = None,
    state_keys: Annotated[
        Optional[int], typer.Option(help="Keys of state for the restart and memory figures.")
    ] = None,
    workdir: Annotated[
        Optional[Path],
        typer.Option(help="Keep worker data and logs here (default: a temporary directory)."),
    ] = None,
) -> None:
    """Benchmark seqkeeper against plain aiokafka (the limit), a typical
    Faust agent (the peer) and Quix Streams on one broker with the same
    input; restart time, memory, latency, buffer depth, Spark. One table of
    ratios and figures."""
    import dataclasses
    import tempfile

    from rich.console import Console
    from rich.table import Table

    from seqkeeper.bench.harness import FULL, SMOKE, Bench, run, sections, write
    from seqkeeper.worker import broker_for

    try:  # (before a broker starts)
        sections(set(only) if only else None)
    except ValueError as e:
        raise Usage(str(e)) from None
    console = Console()
    sizes = SMOKE if smoke else FULL
    if messages:
        sizes = dataclasses.replace(sizes, messages=messages)
    if state_keys:
        sizes = dataclasses.replace(sizes, state_keys=state_keys)
    settings = settings_of(bootstrap=broker, connects=True)
    if workdir:
        workdir.mkdir(parents=True, exist_ok=True)
    with (
        broker_for(settings) as settings,
        tempfile.TemporaryDirectory(prefix="seqkeeper-bench-") as tmp,
    ):
        from seqkeeper.worker import current_local

        local = current_local()  # None when a broker was given
        runner = Bench(
            settings.broker.bootstrap, sizes, workdir or Path(tmp), lambda s: console.log(s)
        )
        result = run(runner, set(only) if only else None)
        result["broker"] = (
            f"{settings.broker.bootstrap} ({'external' if local is None else local.kind})"
        )
    paths = write(result, out)
    m = result["machine"]
    table = Table(
        title=f"seqkeeper bench on {result['broker']}",
        caption=f"{m['cpu']}, {m['cpus']} CPUs, {m['memory_mb']:,} MB, Python {m['python']}",
    )
    for col in ("figure", "value", "target", "met"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for f in result["ratios"] + result["figures"]:
        met = "" if f["met"] is None else ("[green]yes[/]" if f["met"] else "[red]no[/]")
        table.add_row(f["name"], f"{f['value']:,.2f} {f['unit']}", f["target"], met)
    console.print(table)
    console.print("written: " + ", ".join(str(p) for p in paths))
    if result["failed"]:
        console.print(f"[red]failed sections: {', '.join(result['failed'])}[/]")
        exit_with(1)
