"""The short version of every chaos scenario against the test broker, and
the checks that make a scenario fail (a chaos run that cannot fail is a
defect)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import orjson
import pytest

from seqkeeper.processors.dead_letter import REASON
from seqkeeper.topics import Record
from seqkeeper.verification.chaos import Chaos
from seqkeeper.verification.corpus import DROPPED, EMITTED, command_cases, ordered_cases
from seqkeeper.verification.outcome import LONG, SCENARIOS, SHORT, TITLES, Outcome, Scale
from seqkeeper.verification.reliability import ROW, BrokerRun, broker_label, markdown, write_report
from seqkeeper.verification.scenarios.corpus import check_command_cases, check_ordered_cases
from seqkeeper.verification.verify import Check, Report


def test_the_corpus_has_at_least_50_kinds() -> None:
    cases = ordered_cases("t") + command_cases("t", "replies")
    assert len({c.name for c in cases}) == len(cases) >= 50
    assert len({c.key for c in ordered_cases("t")}) == len(ordered_cases("t"))  # one key each


def rec(key: bytes | None, value: bytes | None, reason: str | None = None) -> Record:
    headers = ((REASON, reason.encode()),) if reason else ()
    return Record("t", 0, 0, key, value, headers, 0)


def test_ordered_case_checks_fail_on_wrong_handling() -> None:
    cases = ordered_cases("t")
    dead = [c for c in cases if c.expect not in (EMITTED, DROPPED)]
    kept = [c for c in cases if c.expect == EMITTED]
    dup = [c for c in cases if c.expect == DROPPED]
    good_dlq = [rec(c.key, c.value, c.expect) for c in dead]
    good_out = [rec(c.key, c.value) for c in kept] + [rec(*c.before[0]) for c in dup]
    assert list(check_ordered_cases(cases, good_dlq, good_out)) == []
    wrong = [rec(c.key, c.value, "invalid-json") for c in dead[1:]]  # one missing, reasons off
    problems = dict((c.name, p) for c, p in check_ordered_cases(cases, wrong, good_out))
    assert dead[0].name in problems and "none" in problems[dead[0].name]
    assert any("invalid-json" in p for p in problems.values())
    doubled = good_out + [rec(c.key, c.value) for c in dup if (c.key, c.value) != c.before[0]]
    assert any("dropped" in p for _, p in check_ordered_cases(cases, good_dlq, doubled))
    missing = [r for r in good_out if r.value != kept[0].value]
    assert [c.name for c, _ in check_ordered_cases(cases, good_dlq, missing)] == [kept[0].name]


def test_command_case_checks_fail_on_wrong_handling() -> None:
    cases = command_cases("t", "replies")
    dead = [c for c in cases if not c.expect.startswith("reply:")]
    replies = []
    for c in cases:
        if c.expect.startswith("reply:"):
            mid = orjson.loads(c.value or b"{}")["messageId"]
            ok = c.expect == "reply:ok"
            message = "expired" if c.expect == "reply:expired" else "x"
            doc = {"causationId": mid, "success": ok, "message": message, "version": 1}
            replies.append(rec(b"k", orjson.dumps(doc)))
    dlq = [rec(c.key, c.value, c.expect) for c in dead]
    assert list(check_command_cases(cases, dlq, replies)) == []
    assert len(list(check_command_cases(cases, dlq[1:], replies))) == 1
    assert len(list(check_command_cases(cases, dlq, replies[1:]))) == 1
    flipped = [rec(r.key, r.value.replace(b'"success":false', b'"success":true')) for r in replies]
    assert len(list(check_command_cases(cases, dlq, flipped))) >= 2


def test_outcome_counts_loss_and_order_apart() -> None:
    report = Report(
        checks=[
            Check("ordered: lost", 2),
            Check("ordered: out of order", 1),
            Check("dlq: without a reason header", 3),
            Check("deduped: lost", 0),
        ]
    )
    out = Outcome("x")
    out.add_checks(report, ("ordered: lost", "deduped: lost"), ("ordered: out of order",))
    assert (out.lost, out.order_violations, out.other_failures, out.ok) == (2, 1, 3, False)
    md = markdown([run_of("embedded", [out], SHORT)])
    assert "| x | FAIL: 2 lost, 1 order, 3 other, 0 re-emitted |" in md  # the summary
    assert "| x | 0 | 0 | 2 | 1 | 3 | 0 | 0 | – | FAIL |" in md  # the detailed table
    assert "- x: ordered: lost: 2" in md  # its notes


# -- the report: a column per broker, runs kept as JSON ------------------------


def run_of(
    label: str,
    outcomes: list[Outcome],
    scale: Scale = LONG,
    generated: str = "2026-11-25T10:00:00+00:00",
    kind: str = "",
) -> BrokerRun:
    return BrokerRun(
        broker=label,
        generated=generated,
        machine="Linux-x, 2 CPUs, Python 3.11.7",
        scale=scale,
        command="seqkeeper chaos",
        outcomes=outcomes,
        kind=kind,
    )


def passed(key: str, reemitted: int = 0, recovery: list[float] | None = None) -> Outcome:
    return Outcome(TITLES[key], messages=100, reemitted=reemitted, recovery=recovery or [], key=key)


def table_rows(md: str, heading: str) -> list[list[str]]:
    """The cells of the first table after ``heading`` (header row included)."""
    lines = md.splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                rows.append([c.strip() for c in line.strip("|").split(" | ")])
        elif rows:
            break
    return rows


def test_markdown_has_a_column_per_broker() -> None:
    embedded = run_of(
        "embedded",
        [passed(k, reemitted=51_192, recovery=[59.6, 74.2, 12.0]) for k in SCENARIOS],
        kind="the embedded broker (Tansu 0.6)",
    )
    failed = Outcome(TITLES["kill"], lost=3, order_violations=0, key="kill")
    skipped = Outcome(TITLES["freeze"], skipped="needs | a broker started here", key="freeze")
    # out of order, and without "commands": rows follow SCENARIOS all the same
    kafka = run_of(
        "Apache Kafka 4.1.0",
        [passed("corpus"), skipped, failed, passed("failover"), passed("local-state")],
        generated="2026-11-26T08:30:00+00:00",
    )
    md = markdown([kafka, embedded])
    # a function of the runs only: not of their order, nor of the order each
    # run's scenarios came in, nor of which objects hold them
    again = [
        dataclasses.replace(r, outcomes=[dataclasses.replace(o) for o in reversed(r.outcomes)])
        for r in (embedded, kafka)
    ]
    assert markdown(again) == md
    summary = table_rows(md, "## Summary")
    assert summary[0] == ["scenario", "embedded", "Apache Kafka 4.1.0"]
    assert [row[0] for row in summary[1:]] == [TITLES[k] for k in SCENARIOS]
    assert all(len(row) == 3 for row in summary)
    kill = summary[1]
    assert kill[1] == "PASS: 0 lost, 0 order, 51,192 re-emitted, 74.2 s (median 59.6)"
    assert kill[2].startswith("FAIL: 3 lost, 0 order")
    assert summary[SCENARIOS.index("freeze") + 1][2] == "skipped: needs \\| a broker started here"
    assert summary[-1][2] == "not run"
    for run in (embedded, kafka):  # each broker's detailed table, in SCENARIOS order
        rows = table_rows(md, f"## {run.broker}")
        assert rows[0] == list(ROW)
        assert [r[0] for r in rows[1:]] == [
            TITLES[k] for k in SCENARIOS if k in {o.key for o in run.outcomes}
        ]
    kafka_rows = table_rows(md, "## Apache Kafka 4.1.0")
    assert (kafka_rows[1][-1], kafka_rows[2][-1]) == ("FAIL", "skipped")
    # each figure of the runs in its own column, read back from the table
    embedded_kill, kafka_kill = table_rows(md, "## embedded")[1], kafka_rows[1]
    assert len(embedded_kill) == len(kafka_kill) == len(ROW)
    assert dict(zip(ROW, embedded_kill, strict=True)) == {
        "scenario": TITLES["kill"],
        "messages": "100",
        "faults": "0",
        "lost": "0",
        "order violations": "0",
        "other failures": "0",
        "re-emitted (identical)": "51,192",
        "dead-lettered": "0",
        "recovery s, worst (median)": "74.2 (median 59.6)",
        "result": "PASS",
    }
    assert dict(zip(ROW, kafka_kill, strict=True))["lost"] == "3"
    assert (
        "  - embedded (the embedded broker (Tansu 0.6)): `seqkeeper chaos` on 2026-11-25 10:00 UTC"
        in md
    )
    assert "  - Apache Kafka 4.1.0: `seqkeeper chaos` on 2026-11-26 08:30 UTC" in md
    assert "- Scale: 200,000 messages" in md  # one scale: said once
    assert "Do not edit" in md and "- Machine: Linux-x, 2 CPUs" in md
    notes = md[md.index("## Notes") :]
    assert "### Apache Kafka 4.1.0" in notes and "### embedded" not in notes
    short = markdown([embedded, dataclasses.replace(kafka, scale=SHORT)])
    assert "- Scale, per broker:" in short
    assert "  - Apache Kafka 4.1.0: 3,000 messages" in short


def test_report_json_keeps_other_brokers_and_replaces_its_own(tmp_path: Path) -> None:
    report = tmp_path / "docs" / "reliability.md"
    first = run_of("embedded", [passed("kill", reemitted=1), passed("freeze")])
    kafka = run_of("Apache Kafka 4.1.0", [passed("kill", reemitted=7)], kind="Apache Kafka 4.1.0")
    again = run_of(
        "embedded",
        [Outcome(TITLES["kill"], lost=2, key="kill")],
        generated="2026-11-27T00:00:00+00:00",
    )
    assert write_report(report, first) == tmp_path / "docs" / "reliability.json"
    write_report(report, kafka)
    write_report(report, again)
    doc = json.loads(report.with_suffix(".json").read_text())
    assert set(doc) == {"embedded", "Apache Kafka 4.1.0"}
    assert doc["Apache Kafka 4.1.0"] == kafka.to_json()  # kept as it was
    mine = doc["embedded"]
    assert mine["generated"] == "2026-11-27T00:00:00+00:00"  # replaced, not merged
    assert [(o["key"], o["lost"], o["ok"]) for o in mine["outcomes"]] == [("kill", 2, False)]
    assert {"broker", "generated", "machine", "scale", "command", "outcomes"} <= set(mine)
    assert mine["scale"] == dataclasses.asdict(LONG)
    assert BrokerRun.from_json(mine) == again
    md = report.read_text()
    assert md == markdown([again, kafka], "reliability.json")
    summary = table_rows(md, "## Summary")
    assert summary[0] == ["scenario", "embedded", "Apache Kafka 4.1.0"]
    assert summary[1][1].startswith("FAIL: 2 lost") and summary[1][2].startswith("PASS")


def test_an_unreadable_report_json_is_moved_aside(tmp_path: Path) -> None:
    report = tmp_path / "reliability.md"
    report.with_suffix(".json").write_text("{not json")
    said: list[str] = []
    write_report(report, run_of("embedded", [passed("kill")]), say=said.append)
    assert (tmp_path / "reliability.json.bad").read_text() == "{not json"
    assert set(json.loads(report.with_suffix(".json").read_text())) == {"embedded"}
    assert said and "reliability.json.bad" in said[0]


def test_broker_labels_are_stable() -> None:
    assert broker_label("the embedded broker (Tansu 0.6)", "127.0.0.1:1") == "embedded"
    assert broker_label("Apache Kafka 4.1.0", "127.0.0.1:2") == "Apache Kafka 4.1.0"
    assert broker_label(None, "kafka:9092") == "external cluster kafka:9092"


def test_a_scenario_that_raises_is_a_failed_outcome(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from seqkeeper.settings import Settings

    def boom(self: Chaos) -> Outcome:
        raise RuntimeError("the broker went away")

    monkeypatch.setattr(Chaos, "scenario_kill", boom)
    monkeypatch.setattr(Chaos, "scenario_corpus", lambda self: Outcome(TITLES["corpus"]))
    runner = Chaos(Settings.of(bootstrap="127.0.0.1:1"), tmp_path, SHORT)
    done: list[Outcome] = []
    kill, corpus = runner.run(["kill", "corpus"], done.append)  # the run goes on
    assert done == [kill, corpus]
    assert not kill.ok and kill.other_failures == 1
    assert (kill.key, kill.scenario) == ("kill", TITLES["kill"])
    assert kill.notes == ["raised RuntimeError: the broker went away"]
    assert corpus.ok and corpus.key == "corpus"


def test_titles_are_the_scenarios_own() -> None:
    """The report's rows are keyed by scenario; a scenario that raised is
    titled from TITLES, so TITLES must be what each scenario calls itself."""
    assert list(TITLES) == list(SCENARIOS)
    for name, title in TITLES.items():
        source = inspect.getsource(getattr(Chaos, "scenario_" + name.replace("-", "_")))
        assert f'Outcome("{title}"' in source, name


#: ``--short``, with input flowing 10 s per fault cycle rather than 20: the
#: same faults, the same checks, in about half of the time per scenario.
QUICK = dataclasses.replace(SHORT, cycle=10.0)


@pytest.mark.integration
@pytest.mark.timeout(1200)  # (thirteen scenario runs on Apache Kafka, under a minute each)
def test_every_scenario_passes_short(broker, tmp_path, make_settings) -> None:
    runner = Chaos(make_settings(session_timeout=6.0), tmp_path, QUICK, local=broker.local, seed=3)
    ran = runner.run(list(SCENARIOS))
    outcomes = {o.scenario: o for o in ran}  # (under exactly_once where it ran under both)
    for o in outcomes.values():
        assert o.ok, (o.scenario, o.notes)
    for title in (TITLES["kill"], TITLES["kill-static"]):
        kill = outcomes[title]
        assert kill.faults == SHORT.kills and kill.lost == 0 and kill.recovery
    corpus = outcomes["bad-input corpus"]
    assert corpus.faults >= 50 and corpus.dead_lettered >= 40
    freeze = outcomes["broker frozen (SIGSTOP)"]
    if broker.local is None:
        assert freeze.skipped
    else:
        assert freeze.faults == 1 and freeze.recovery
    assert outcomes["two workers, one killed"].recovery
    assert outcomes["local state deleted, then corrupted"].faults == 2
    assert outcomes["kill -9 the command worker"].faults == SHORT.command_kills
    zombie = outcomes["zombie worker fenced"]
    assert zombie.key == "zombie" and zombie.guarantee == "exactly_once"
    if broker.is_tansu:
        assert runner.transactions is False and zombie.skipped, zombie
        return
    assert runner.transactions is True and not zombie.skipped
    # the command worker under exactly_once: no event or reply seen twice
    commands = [(o.guarantee, o.reemitted) for o in ran if o.key == "commands"]
    assert commands[0][0] == "at_least_once" and commands[1] == ("exactly_once", 0), commands
    assert zombie.faults == 1 and zombie.lost == 0 and zombie.reemitted == 0 and zombie.recovery
    (scenario,) = tmp_path.glob("zombie-eos-*")
    logs = {p.name: p.read_text() for p in scenario.rglob("worker-*.log")}
    assert set(logs) == {"worker-a.log", "worker-b.log"}
    assert "fenced:" in logs["worker-a.log"] and "fenced:" not in logs["worker-b.log"]


def test_chaos_command_writes_its_column_and_exits_on_its_own_failures(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The plumbing of ``seqkeeper chaos --report`` without a broker
    (``Chaos.run`` replaced): its column, the JSON, the exit code."""
    from typer.testing import CliRunner

    from seqkeeper.cli import app

    report = tmp_path / "reliability.md"
    write_report(report, run_of("embedded", [Outcome(TITLES["kill"], lost=4, key="kill")]))
    results = {"kill": Outcome(TITLES["kill"], key="kill", lost=1)}
    monkeypatch.setattr(Chaos, "run", lambda self, names, on_done: [results[n] for n in names])
    args = ["chaos", "--broker", "127.0.0.1:1", "--short", "--scenario", "kill"]
    failed = CliRunner().invoke(app, [*args, "--report", str(report)])
    assert failed.exit_code == 1, failed.output
    doc = json.loads(report.with_suffix(".json").read_text())
    assert set(doc) == {"embedded", "external cluster 127.0.0.1:1"}
    mine = doc["external cluster 127.0.0.1:1"]
    assert mine["command"] == "seqkeeper chaos --short --scenario kill"
    assert mine["scale"] == dataclasses.asdict(SHORT) and mine["outcomes"][0]["lost"] == 1
    assert "| kill -9 the worker | FAIL: 4 lost" in report.read_text()
    results["kill"] = Outcome(TITLES["kill"], key="kill")
    passed_run = CliRunner().invoke(app, [*args, "--report", str(report)])
    assert passed_run.exit_code == 0, passed_run.output  # the other broker's FAIL is not this run's
    doc = json.loads(report.with_suffix(".json").read_text())
    assert doc["external cluster 127.0.0.1:1"]["outcomes"][0]["ok"] is True
