"""The verifier must fail on wrong output (a verifier that cannot fail is a defect)."""

from dataclasses import replace

import pytest

from processors.dead_letter import dead_letter_headers
from processors.envelope import InvalidMessage, parse
from processors.resequencer import offer
from seqkeeper.topics import Record
from seqkeeper.verify import verify
from seqkeeper.workload import generate


def expected_outputs(inputs: list[Record]) -> tuple[list[Record], list[Record], list[Record]]:
    """What a correct worker emits, computed with the pure cores."""
    seen: set[str] = set()
    nxt: dict[str, int] = {}
    bufs: dict[str, dict] = {}
    ordered, deduped, dlq = [], [], []

    def out(topic: str, rec: Record, value: bytes | None, headers=()) -> Record:
        return Record(topic, 0, 0, rec.key, value, tuple(headers), 0)

    for rec in inputs:
        try:
            m = parse(rec.key, rec.value)
        except InvalidMessage as exc:
            dlq.append(
                out(
                    "dlq",
                    rec,
                    rec.value,
                    dead_letter_headers(exc.reason, exc.detail, "in", 0, rec.offset),
                )
            )
            continue
        if m.message_id in seen:
            continue
        buf = bufs.setdefault(m.key, {})
        step = offer(nxt.get(m.key, 1), buf, m)
        if step.rejected:
            dlq.append(
                out(
                    "dlq",
                    rec,
                    rec.value,
                    dead_letter_headers(step.rejected.reason, "", "in", 0, rec.offset),
                )
            )
            continue
        seen.add(m.message_id)
        if step.buffer_put:
            buf[step.buffer_put.seq] = step.buffer_put
        for s in step.buffer_deletes:
            del buf[s]
        nxt[m.key] = step.next_expected
        deduped.append(out("deduped", rec, rec.value))
        ordered += [out("ordered", rec, r.value) for r in step.released]
    renumber = lambda rs: [replace(r, offset=i) for i, r in enumerate(rs)]  # noqa: E731
    return renumber(ordered), renumber(deduped), renumber(dlq)


@pytest.fixture(scope="module")
def case() -> tuple[list[Record], list[Record], list[Record], list[Record]]:
    w = generate(messages=600, keys=12, malformed=12, seed=3)
    inputs = [Record("in", 0, i, k, v, (), 0) for i, (k, v) in enumerate(w.records)]
    return (inputs, *expected_outputs(inputs))


def failing(report) -> set[str]:
    return {c.name for c in report.failures()}


def test_correct_output_passes(case) -> None:
    report = verify(*case)
    assert report.ok, report.failures()
    assert report.valid_messages == 600 and report.redeliveries > 0


def test_lost_message_fails(case) -> None:
    inputs, ordered, deduped, dlq = case
    assert "ordered: lost" in failing(verify(inputs, ordered[:-1], deduped, dlq))
    assert "deduped: lost" in failing(verify(inputs, ordered, deduped[1:], dlq))


def test_swapped_order_fails(case) -> None:
    inputs, ordered, deduped, dlq = case
    key = ordered[0].key
    i, j = [n for n, r in enumerate(ordered) if r.key == key][:2]
    bad = list(ordered)
    bad[i], bad[j] = replace(bad[j], offset=i), replace(bad[i], offset=j)
    assert "ordered: out of order or gap" in failing(verify(inputs, bad, deduped, dlq))


def test_duplicate_emission_fails(case) -> None:
    inputs, ordered, deduped, dlq = case
    assert "ordered: emitted twice" in failing(
        verify(inputs, ordered + [replace(ordered[5], offset=len(ordered))], deduped, dlq)
    )
    assert "deduped: emitted twice" in failing(verify(inputs, ordered, deduped + [deduped[0]], dlq))


def test_changed_bytes_fail(case) -> None:
    inputs, ordered, deduped, dlq = case
    bad = list(ordered)
    bad[3] = replace(bad[3], value=bad[3].value.replace(b'"type"', b' "type"'))
    assert "ordered: bytes changed" in failing(verify(inputs, bad, deduped, dlq))


def test_dead_letter_checks(case) -> None:
    inputs, ordered, deduped, dlq = case
    assert "dlq: rejected record missing" in failing(verify(inputs, ordered, deduped, dlq[1:]))
    assert "dlq: without a reason header" in failing(
        verify(inputs, ordered, deduped, [replace(dlq[0], headers=())] + dlq[1:])
    )
    wrongly = Record(
        "dlq", 0, 99, ordered[0].key, ordered[0].value, (("seqkeeper.reason", b"x"),), 0
    )
    assert "dlq: record that should not be there" in failing(
        verify(inputs, ordered, deduped, dlq + [wrongly])
    )
