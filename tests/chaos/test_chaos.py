"""The short version of every chaos scenario against the test broker, and
the checks that make a scenario fail (a chaos run that cannot fail is a
defect)."""

from __future__ import annotations

import orjson
import pytest

from processors.dead_letter import REASON
from seqkeeper.chaos import (
    SCENARIOS,
    SHORT,
    Chaos,
    Outcome,
    _check_command_cases,
    _check_ordered_cases,
    markdown,
)
from seqkeeper.corpus import DROPPED, EMITTED, command_cases, ordered_cases
from seqkeeper.topics import Record
from seqkeeper.verify import Check, Report


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
    assert list(_check_ordered_cases(cases, good_dlq, good_out)) == []
    wrong = [rec(c.key, c.value, "invalid-json") for c in dead[1:]]  # one missing, reasons off
    problems = dict((c.name, p) for c, p in _check_ordered_cases(cases, wrong, good_out))
    assert dead[0].name in problems and "none" in problems[dead[0].name]
    assert any("invalid-json" in p for p in problems.values())
    doubled = good_out + [rec(c.key, c.value) for c in dup if (c.key, c.value) != c.before[0]]
    assert any("dropped" in p for _, p in _check_ordered_cases(cases, good_dlq, doubled))
    missing = [r for r in good_out if r.value != kept[0].value]
    assert [c.name for c, _ in _check_ordered_cases(cases, good_dlq, missing)] == [kept[0].name]


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
    assert list(_check_command_cases(cases, dlq, replies)) == []
    assert len(list(_check_command_cases(cases, dlq[1:], replies))) == 1
    assert len(list(_check_command_cases(cases, dlq, replies[1:]))) == 1
    flipped = [rec(r.key, r.value.replace(b'"success":false', b'"success":true')) for r in replies]
    assert len(list(_check_command_cases(cases, dlq, flipped))) >= 2


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
    assert "FAIL" in markdown([out], "b", SHORT, "seqkeeper chaos --short")


@pytest.mark.integration
def test_every_scenario_passes_short(broker, tmp_path, make_settings) -> None:
    runner = Chaos(
        make_settings(session_timeout=6.0), tmp_path, SHORT, local=broker.local, seed=3
    )
    outcomes = {o.scenario: o for o in runner.run(list(SCENARIOS))}
    for o in outcomes.values():
        assert o.ok, (o.scenario, o.notes)
    kill = outcomes["kill -9 the worker"]
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
