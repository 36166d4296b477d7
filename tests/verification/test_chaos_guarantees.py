"""Chaos under each processing guarantee: the ordered scenarios run under
at_least_once and, on a broker with transactions, again under exactly_once;
each outcome says the guarantee its workers ran under; the report's
exactly_once column; a re-emission fails an exactly_once run; the zombie
scenario's verdict on the fenced worker (its run on a broker:
tests/verification/test_chaos.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from seqkeeper.demo import REEMITTED, no_reemissions
from seqkeeper.settings import Settings
from seqkeeper.verification.chaos import Chaos
from seqkeeper.verification.outcome import (
    AT_LEAST_ONCE,
    BOTH_GUARANTEES,
    EXACTLY_ONCE,
    LOSS,
    NO_TRANSACTIONS,
    ORDER,
    SCENARIOS,
    SHORT,
    TITLES,
    Outcome,
)
from seqkeeper.verification.reliability import ROW, BrokerRun, markdown, table, write_report
from seqkeeper.verification.scenarios.zombie import zombie_problems
from seqkeeper.verification.verify import Check, Report
from seqkeeper.worker import WorkerProcess


def outcome(key: str, guarantee: str = AT_LEAST_ONCE, **kw: object) -> Outcome:
    return Outcome(TITLES[key], messages=100, key=key, guarantee=guarantee, **kw)  # type: ignore[arg-type]


def run_of(label: str, outcomes: list[Outcome], transactions: bool | None) -> BrokerRun:
    return BrokerRun(
        broker=label,
        generated="2026-11-26T10:00:00+00:00",
        machine="Linux-x, 2 CPUs, Python 3.11.7",
        scale=SHORT,
        command="seqkeeper chaos --short",
        outcomes=outcomes,
        kind=label,
        transactions=transactions,
    )


def rows_after(md: str, heading: str) -> list[list[str]]:
    """The cells of the first table after ``heading`` (header row included)."""
    lines = md.splitlines()
    rows = []
    for line in lines[lines.index(heading) + 1 :]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                rows.append([c.strip() for c in line.strip("|").split(" | ")])
        elif rows:
            break
    return rows


@pytest.fixture
def runs() -> list[BrokerRun]:
    kafka = [
        outcome("kill", reemitted=1_234, recovery=[3.0, 5.0]),
        outcome("kill", EXACTLY_ONCE, recovery=[4.0]),
        outcome("freeze", reemitted=12),
        outcome("freeze", EXACTLY_ONCE, reemitted=2, other_failures=2),  # a re-emission fails
        outcome("corpus", EXACTLY_ONCE),  # (auto on a broker with transactions)
        outcome("zombie", EXACTLY_ONCE, faults=1),
    ]
    embedded = [
        outcome("kill", reemitted=999),
        outcome("corpus"),
        outcome("zombie", EXACTLY_ONCE, skipped="needs a broker with transactions"),
    ]
    return [run_of("Apache Kafka 4.1.0", kafka, True), run_of("embedded", embedded, False)]


def test_the_report_has_an_exactly_once_column(runs: list[BrokerRun]) -> None:
    md = markdown(runs)
    kafka = rows_after(md, "## Apache Kafka 4.1.0")
    assert kafka[0] == [*ROW, "guarantee", "exactly_once"]
    by_title = {r[0]: r for r in kafka[1:]}
    kill = by_title[TITLES["kill"]]
    # the row: the at_least_once run; the column: the exactly_once run
    assert kill[ROW.index("re-emitted (identical)")] == "1,234"
    assert kill[-2:] == [AT_LEAST_ONCE, "PASS: 0 lost, 0 order, 0 re-emitted, 4.0 s (median 4.0)"]
    assert by_title[TITLES["freeze"]][-1] == "FAIL: 0 lost, 0 order, 2 other, 2 re-emitted"
    assert by_title[TITLES["freeze"]][-3] == "PASS"  # (its at_least_once run passed)
    # ran under exactly_once, not verified as exactly-once: no cell of its own
    assert by_title[TITLES["corpus"]][-2:] == [EXACTLY_ONCE, "–"]
    assert by_title[TITLES["zombie"]][-2:] == [EXACTLY_ONCE, "PASS: 0 lost, 0 order, 0 re-emitted"]
    assert [r[0] for r in kafka[1:]] == [TITLES[k] for k in ("kill", "freeze", "corpus", "zombie")]
    embedded = {r[0]: r for r in rows_after(md, "## embedded")[1:]}
    assert embedded[TITLES["kill"]][-2:] == [AT_LEAST_ONCE, NO_TRANSACTIONS]
    assert embedded[TITLES["corpus"]][-2:] == [AT_LEAST_ONCE, "–"]
    assert embedded[TITLES["zombie"]][-1] == NO_TRANSACTIONS
    summary = rows_after(md, "## Summary")
    assert summary[0] == ["scenario", "embedded", "Apache Kafka 4.1.0"]
    titles = [r[0] for r in summary[1:]]
    assert titles == [
        TITLES["kill"],
        f"{TITLES['kill']}, exactly_once",
        TITLES["freeze"],
        f"{TITLES['freeze']}, exactly_once",
        TITLES["corpus"],
        TITLES["zombie"],
    ]
    eo_kill = summary[2]
    assert eo_kill[1] == NO_TRANSACTIONS
    assert eo_kill[2].startswith("PASS: 0 lost, 0 order, 0 re-emitted")
    assert summary[3][1] == "not run" and summary[4][1] == NO_TRANSACTIONS
    assert summary[5][2] == "PASS: 0 lost, 0 order, 0 re-emitted (exactly_once)"
    assert summary[5][1] == "PASS: 0 lost, 0 order, 0 re-emitted"
    notes = md[md.index("## Notes") :]
    assert "- zombie worker fenced (exactly_once): skipped — needs a broker" in notes


def test_runs_without_guarantees_keep_their_columns() -> None:
    old = run_of("embedded", [outcome("kill")], None)
    md = markdown([old])
    assert rows_after(md, "## embedded")[0] == list(ROW)
    assert "exactly_once" not in md


def test_the_runs_json_keeps_guarantees_and_transactions(
    runs: list[BrokerRun], tmp_path: Path
) -> None:
    report = tmp_path / "reliability.md"
    for run in runs:
        write_report(report, run)
    doc = json.loads(report.with_suffix(".json").read_text())
    assert doc["embedded"]["transactions"] is False
    kafka = doc["Apache Kafka 4.1.0"]
    assert kafka["transactions"] is True
    assert [o["guarantee"] for o in kafka["outcomes"][:2]] == [AT_LEAST_ONCE, EXACTLY_ONCE]
    assert BrokerRun.from_json(kafka) == runs[0]
    # a run written before guarantees: at_least_once, transactions unknown
    for o in kafka["outcomes"]:
        del o["guarantee"]
    del kafka["transactions"]
    old = BrokerRun.from_json(kafka)
    assert old.transactions is None
    assert {o.guarantee for o in old.outcomes} == {AT_LEAST_ONCE}


def test_the_console_table_has_the_exactly_once_column(runs: list[BrokerRun]) -> None:
    console = Console(width=250, record=True)
    console.print(table(runs[0].outcomes, True))
    text = console.export_text()
    assert "exactly_once" in text.splitlines()[2]  # the header
    kill = next(line for line in text.splitlines() if TITLES["kill"] in line)
    assert "1,234" in kill and "PASS: 0 lost, 0 order, 0 re-emitted" in kill
    console = Console(width=250, record=True)
    console.print(table(runs[1].outcomes, False))
    kill = next(line for line in console.export_text().splitlines() if TITLES["kill"] in line)
    assert NO_TRANSACTIONS in kill


def test_a_re_emission_fails_an_exactly_once_report() -> None:
    clean = no_reemissions(Report(reemitted={"ordered": 0, "deduped": 0, "dlq": 0}))
    assert clean.ok
    report = no_reemissions(
        Report(reemitted={"ordered": 2, "deduped": 1, "dlq": 0}, checks=[Check("ordered: lost", 0)])
    )
    assert not report.ok
    assert [(c.name, c.count, c.detail) for c in report.failures()] == [
        (REEMITTED, 3, "ordered 2, deduped 1, dlq 0")
    ]
    out = Outcome("x")
    out.add_checks(report, LOSS, ORDER)
    assert (out.lost, out.order_violations, out.other_failures, out.ok) == (0, 0, 3, False)


class Recorder:
    """Scenarios replaced: each records the guarantee it was run under (the
    settings a scenario makes pin it) and starts a "worker" whose log
    says a guarantee."""

    def __init__(self, runner: Chaos, tmp_path: Path, logs: str | None = None) -> None:
        self.runner, self.tmp_path, self.logs = runner, tmp_path, logs
        self.calls: list[tuple[str, str]] = []

    def scenario(self, key: str) -> Outcome:
        s = self.runner.settings(key)
        self.calls.append((key, s.runtime.processing_guarantee))
        if self.logs is not None:
            said = s.runtime.processing_guarantee
            if said == "auto":  # (as the worker resolves it)
                said = EXACTLY_ONCE if self.runner.transactions else AT_LEAST_ONCE
            log = self.tmp_path / f"{key}-{len(self.calls)}.log"
            log.write_text(self.logs.format(said))
            self.runner.started.append(WorkerProcess(s, log))
        return Outcome(TITLES[key])


def recorded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, transactions: bool, logs: str | None
) -> tuple[Chaos, Recorder]:
    runner = Chaos(Settings.of(bootstrap="127.0.0.1:1"), tmp_path, SHORT, transactions=transactions)
    recorder = Recorder(runner, tmp_path, logs)
    for key in ("kill", "freeze", "failover", "corpus"):
        monkeypatch.setattr(Chaos, "scenario_" + key, lambda self, key=key: recorder.scenario(key))
    return runner, recorder


def test_ordered_scenarios_run_under_both_guarantees_where_there_are_transactions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner, recorder = recorded(
        monkeypatch, tmp_path, True, "x\nprocessing guarantee: {} (requested)\n"
    )
    outcomes = runner.run(["kill", "corpus", "failover"])
    assert recorder.calls == [
        ("kill", AT_LEAST_ONCE),
        ("kill", EXACTLY_ONCE),
        ("corpus", "auto"),  # the configured one
        ("failover", AT_LEAST_ONCE),
        ("failover", EXACTLY_ONCE),
    ]
    assert [(o.key, o.guarantee) for o in outcomes] == [
        ("kill", AT_LEAST_ONCE),
        ("kill", EXACTLY_ONCE),
        ("corpus", EXACTLY_ONCE),  # (as its worker said)
        ("failover", AT_LEAST_ONCE),
        ("failover", EXACTLY_ONCE),
    ]
    assert all(o.ok for o in outcomes)
    assert set(BOTH_GUARANTEES) == {"kill", "kill-static", "freeze", "failover", "commands"}
    assert runner.guarantee is None  # (only while a scenario runs)


def test_without_transactions_only_at_least_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner, recorder = recorded(monkeypatch, tmp_path, False, None)
    outcomes = runner.run(["freeze", "corpus", "zombie"])
    assert recorder.calls == [("freeze", AT_LEAST_ONCE), ("corpus", "auto")]
    assert [(o.key, o.guarantee) for o in outcomes] == [
        ("freeze", AT_LEAST_ONCE),
        ("corpus", AT_LEAST_ONCE),  # auto, resolved: no transactions
        ("zombie", EXACTLY_ONCE),
    ]
    zombie = outcomes[-1]
    assert zombie.skipped and "transactions" in zombie.skipped and zombie.ok


def test_workers_that_ran_under_another_guarantee_fail_the_outcome(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner, _ = recorded(
        monkeypatch, tmp_path, True, "processing guarantee: at_least_once (requested)\n"
    )
    alo, eo = runner.run(["kill"])
    assert alo.ok and alo.guarantee == AT_LEAST_ONCE
    assert not eo.ok and eo.guarantee == AT_LEAST_ONCE
    assert eo.notes == ["asked for exactly_once, its workers ran under at_least_once"]


def test_a_broker_that_cannot_be_asked_is_a_failure_of_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner, recorder = recorded(monkeypatch, tmp_path, True, None)
    runner.transactions = None  # ask 127.0.0.1:1: nobody answers
    outcomes = runner.run(["kill"])
    assert [(o.key, o.guarantee) for o in outcomes] == [("kill", AT_LEAST_ONCE)]
    assert runner.probe_error and "127.0.0.1:1" in runner.probe_error


# -- the zombie's verdict ---------------------------------------------------------


def zombie(tmp_path: Path, script: str) -> WorkerProcess:
    """A "worker": a Python process running ``script``, its output in its log."""
    w = WorkerProcess(Settings.of(bootstrap="127.0.0.1:1"), tmp_path / "zombie.log")
    with open(w.log_path, "wb") as log:
        w.proc = subprocess.Popen([sys.executable, "-c", script], stdout=log, stderr=log)
    return w


def test_a_fenced_zombie_that_exits_is_no_problem(tmp_path: Path) -> None:
    w = zombie(tmp_path, "print('[ERROR] fenced: input partition p/0 ...'); raise SystemExit(3)")
    assert zombie_problems(w, 30) == []


@pytest.mark.parametrize(
    ("script", "says"),
    [
        ("print('fenced: p/0')", "exited with 0"),
        ("raise SystemExit(1)", "no 'fenced:' line"),
        ("import time; print('fenced: p/0', flush=True); time.sleep(60)", "still running"),
    ],
)
def test_a_zombie_that_goes_on_or_is_not_fenced_is_a_problem(
    tmp_path: Path, script: str, says: str
) -> None:
    w = zombie(tmp_path, script)
    try:
        problems = zombie_problems(w, 3)
    finally:
        w.kill()
    assert problems and says in problems[0], problems


def test_the_zombie_is_a_scenario() -> None:
    assert "zombie" in SCENARIOS and "zombie" not in BOTH_GUARANTEES
