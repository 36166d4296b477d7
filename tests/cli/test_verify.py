"""The verifier must fail on wrong output (a verifier that cannot fail is a defect)."""

from dataclasses import replace

import pytest

from seqkeeper.processors.dead_letter import dead_letter_headers
from seqkeeper.processors.envelope import DEFAULT_SHAPE, InvalidMessage, Shape, parse
from seqkeeper.processors.resequencer import (
    DictBuffer,
    Emission,
    GapSkipped,
    KeyState,
    Policy,
    expire,
    offer,
)
from seqkeeper.runtime.repartition import route
from seqkeeper.topics import Record
from seqkeeper.verification.verify import verify
from seqkeeper.verification.workload import generate


def expected_outputs(
    inputs: list[Record], gap_after: int | None = None, shape: Shape = DEFAULT_SHAPE
) -> tuple[list[Record], list[Record], list[Record]]:
    """What a correct worker emits, computed with the pure cores, the
    records taken in list order. With ``gap_after``, every key's gaps are
    given up after that many records. ``shape``: the worker's message
    shape; with a key field, its repartition stage first re-keys each
    record (or dead-letters it)."""
    seen: set[str] = set()
    states: dict[str, KeyState] = {}
    bufs: dict[str, DictBuffer] = {}
    ordered: list[Record] = []
    deduped: list[Record] = []
    dlq: list[Record] = []
    policy = Policy(gap_timeout=0.0)

    def out(topic: str, key: bytes | None, value: bytes | None, headers: tuple = ()) -> Record:
        return Record(topic, 0, 0, key, value, tuple(headers), 0)

    def apply(key: str, step) -> None:  # type: ignore[no-untyped-def]
        buf = bufs.setdefault(key, DictBuffer())
        if step.buffer_put:
            buf[step.buffer_put.seq] = step.buffer_put
        for s in step.buffer_deletes:
            del buf[s]
        states[key] = step.state
        ordered.extend(
            out("ordered", key.encode(), _value(e, shape), getattr(e, "headers", ()))
            for e in step.emitted
        )

    def give_up_gaps() -> None:
        for key in list(states):
            while states[key].buffered:
                apply(key, expire(key, states[key], bufs[key], 1.0, policy))

    for i, rec in enumerate(inputs):
        if gap_after is not None and i == gap_after:
            give_up_gaps()
        key = rec.key
        if shape.key_path:
            key, headers = route(rec, shape, "in")
            if key is None:
                dlq.append(out("dlq", rec.key, rec.value, headers))
                continue
        try:
            m = parse(key, rec.value, shape=shape, headers=rec.headers)
        except InvalidMessage as exc:
            dlq.append(
                out(
                    "dlq",
                    key,
                    rec.value,
                    (
                        *rec.headers,
                        *dead_letter_headers(exc.reason, exc.detail, "in", 0, rec.offset),
                    ),
                )
            )
            continue
        if m.message_id in seen:
            continue
        step = offer(
            states.get(m.key, KeyState()), bufs.setdefault(m.key, DictBuffer()), m, 0.0, policy
        )
        if step.rejected:
            dlq.append(
                out(
                    "dlq",
                    key,
                    rec.value,
                    (
                        *rec.headers,
                        *dead_letter_headers(step.rejected.reason, "", "in", 0, rec.offset),
                    ),
                )
            )
            continue
        seen.add(m.message_id)
        deduped.append(out("deduped", key, rec.value, rec.headers))
        apply(m.key, step)

    if gap_after is not None and gap_after >= len(inputs):
        give_up_gaps()

    def renumber(rs: list[Record]) -> list[Record]:
        return [replace(r, offset=i) for i, r in enumerate(rs)]

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
    assert "ordered: out of order" in failing(verify(inputs, bad, deduped, dlq))


def test_identical_repeats_are_reemissions_changed_repeats_fail(case) -> None:
    inputs, ordered, deduped, dlq = case
    again = ordered + [replace(r, offset=len(ordered) + i) for i, r in enumerate(ordered[3:7])]
    report = verify(inputs, again, deduped + [deduped[0]], dlq + [dlq[0]])
    assert report.ok, report.failures()
    assert report.reemitted == {"ordered": 4, "deduped": 1, "dlq": 1}
    changed = replace(ordered[5], offset=len(ordered), value=ordered[5].value + b" ")
    assert "ordered: bytes changed" in failing(verify(inputs, ordered + [changed], deduped, dlq))
    changed = replace(deduped[0], value=deduped[0].value + b" ")
    assert "deduped: bytes changed" in failing(verify(inputs, ordered, deduped + [changed], dlq))


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


def test_gap_markers_and_late_arrivals_pass() -> None:
    w = generate(messages=400, keys=8, malformed=0, seed=5)
    # drop one message per key, so every key has a permanent gap ...
    dropped = {f"key-{i:05d}:3:".encode() for i in range(8)}
    records = [(k, v) for k, v in w.records if not any(d in (v or b"") for d in dropped)]
    inputs = [Record("in", 0, i, k, v, (), 0) for i, (k, v) in enumerate(records)]
    # ... and deliver them late, after the gaps were given up
    late = [(k, v) for k, v in w.records if any(d in (v or b"") for d in dropped)]
    late += late[:2]  # redeliveries of late messages are late too
    inputs += [Record("in", 0, len(inputs) + i, k, v, (), 0) for i, (k, v) in enumerate(late)]
    ordered, deduped, dlq = expected_outputs(inputs, gap_after=len(records))
    assert any(b"GapSkipped" in (r.value or b"") for r in ordered)
    report = verify(inputs, ordered, deduped, dlq)
    assert report.ok, report.failures()
    # a marker that covers the wrong range is an order violation
    bad = [
        replace(r, value=r.value.replace(b'"from":3', b'"from":4'))
        if b"GapSkipped" in r.value
        else r
        for r in ordered
    ]
    assert "ordered: gap without GapSkipped" in failing(verify(inputs, bad, deduped, dlq))


def test_drained_requires_every_gap_given_up(case) -> None:
    inputs, ordered, _, _ = case
    # hold back one message: what follows it in its key waits behind a gap
    held = [r for r in inputs if r.value != ordered[0].value]
    outputs = expected_outputs(held)
    assert verify(held, *outputs).ok
    assert "ordered: still waiting behind a gap" in failing(verify(held, *outputs, drained=True))
    # once the gap is given up (a marker), nothing waits any more
    given_up = expected_outputs(held, gap_after=len(held))
    assert verify(held, *given_up, drained=True).ok


def _value(e: Emission, shape: Shape) -> bytes:
    """An ordered output's value as the worker writes it: a marker in the codec."""
    if isinstance(e, GapSkipped):
        return e.encoded(None if shape.codec is None else shape.codec.encode)
    return e.value
