"""``corpus``: bad and borderline input (:mod:`seqkeeper.verification.corpus`)
to the ordered worker and the command worker: each case dead-lettered with
its reason or handled by its documented policy; the workers stay up."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import orjson

from seqkeeper.fleet.poll import poll, records_in
from seqkeeper.fleet.publishing import publish, send
from seqkeeper.processors.dead_letter import REASON
from seqkeeper.settings import EXAMPLE_HANDLERS
from seqkeeper.topics import Record, create_topics, read_topic
from seqkeeper.verification.corpus import DROPPED, EMITTED, Case, command_cases, ordered_cases
from seqkeeper.verification.outcome import Outcome
from seqkeeper.verification.scenarios.stage import Stage
from seqkeeper.verification.workload import generate


def run(chaos: Stage) -> Outcome:
    out = Outcome("bad-input corpus")
    s = chaos.prepared("corpus")
    cases = ordered_cases(s.runtime.app_id)
    work = generate(messages=chaos.scale.others // 4, keys=20, malformed=0, seed=chaos.seed)
    w = chaos.worker(s, "worker")
    try:
        records = case_records(cases)
        asyncio.run(send(s.broker.bootstrap, s.ordered.input_topic, records))
        asyncio.run(publish(s.broker.bootstrap, s.ordered.input_topic, work.records))
        report = chaos.verified(s, chaos.drain_timeout(work.messages), work.messages, w)
        chaos.ordered_result(out, report)
        dlq = asyncio.run(read_topic(s.broker.bootstrap, s.ordered.dlq_topic))
        ordered = asyncio.run(read_topic(s.broker.bootstrap, s.ordered.ordered_topic))
        for case, problem in check_ordered_cases(cases, dlq, ordered):
            out.fail(f"{case.name}: {problem}")
        w.check_alive()
    finally:
        w.stop()
    out.faults += len(cases)
    out.messages = len(records) + len(work.records)
    cmd = chaos.settings("corpus-commands", topology="commands", handlers=EXAMPLE_HANDLERS)
    replies = f"{cmd.commands.command_topic}.replies"
    asyncio.run(
        create_topics(cmd.broker.bootstrap, [*cmd.topics(), replies], cmd.broker.partitions)
    )
    ccases = command_cases(cmd.runtime.app_id, replies)
    cw = chaos.worker(cmd, "command-worker")
    try:
        records = case_records(ccases)
        asyncio.run(send(cmd.broker.bootstrap, cmd.commands.command_topic, records))
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
        for case, problem in check_command_cases(ccases, dlq, answers):
            out.fail(f"{case.name}: {problem}")
        cw.check_alive()
    finally:
        cw.stop()
    out.faults += len(ccases)
    out.messages += len(records)
    return out


def case_records(
    cases: list[Case],
) -> list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]]:
    out: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]] = []
    for c in cases:
        out += [(k, v, ()) for k, v in c.before]
        out.append((c.key, c.value, c.headers))
    return out


def _dlq_reasons(dlq: list[Record]) -> dict[tuple[bytes | None, bytes | None], set[str]]:
    """The reason headers of the dead letters, per (key, value)."""
    reasons: dict[tuple[bytes | None, bytes | None], set[str]] = {}
    for r in dlq:
        reasons.setdefault((r.key, r.value), set()).add((r.header(REASON) or b"").decode())
    return reasons


def check_ordered_cases(
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


def check_command_cases(
    cases: list[Case], dlq: list[Record], replies: list[Record]
) -> Iterator[tuple[Case, str]]:
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
