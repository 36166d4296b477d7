"""The chaos report: the console's table, and ``docs/reliability.md``
rendered from every broker's run kept as JSON beside it
(``docs/reliability.json``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from seqkeeper.verification.outcome import (
    AT_LEAST_ONCE,
    BOTH_GUARANTEES,
    EXACTLY_ONCE,
    NO_TRANSACTIONS,
    SCENARIOS,
    TITLES,
    VERIFIED_EXACTLY_ONCE,
    Outcome,
    Scale,
)


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
