"""The verifier reads messages in the worker's shape (``SEQKEEPER_KEY_FIELD``,
``SEQKEEPER_SEQ_HEADER``, ``SEQKEEPER_MESSAGE_ID_FIELD``/``_HEADER``,
``SEQKEEPER_CODEC``): a workload moved into a shape, through a correct
worker of that shape (the pure cores, and its repartition stage with a key
field, :func:`tests.cli.test_verify.expected_outputs`), verifies as the
same workload does in the default shape, and wrong output still fails."""

from __future__ import annotations

import base64
import random
import zlib
from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqkeeper.processors.envelope import Shape
from seqkeeper.topics import Record
from seqkeeper.verification.verify import Report, verify
from seqkeeper.verification.workload import generate
from tests.cli.test_verify import expected_outputs


class Base64Json:
    """A user's codec: JSON, base64-encoded (not JSON on the wire)."""

    def decode(self, value: bytes) -> Any:
        return orjson.loads(base64.b64decode(value, validate=True))

    def encode(self, document: Any) -> bytes:
        return base64.b64encode(orjson.dumps(document))


CODEC = Base64Json()

SHAPES = {
    "key field": Shape(key_path=("account",)),
    "seq header, nested messageId": Shape(seq_header="x-seq", id_path=("meta", "id")),
    "messageId header, seq field": Shape(id_header="x-id", seq_path=("n",)),
    "codec": Shape(codec=CODEC),
    "everything": Shape(
        key_path=("account", "id"), seq_header="x-seq", id_header="x-id", codec=CODEC
    ),
}


def _put(doc: dict[str, Any], path: tuple[str, ...], item: Any) -> None:
    for name in path[:-1]:
        doc = doc.setdefault(name, {})
    doc[path[-1]] = item


def reshape(
    records: list[tuple[bytes | None, bytes | None]], shape: Shape, rng: random.Random
) -> list[Record]:
    """The workload's records as a producer of ``shape`` sends them, valid
    and invalid alike: the key, sequence and messageId moved where the
    shape reads them (an invalid one stays invalid). With a key field the
    records are keyed by something else and spread over two partitions;
    otherwise a key's records share a partition."""
    offsets = [0, 0]
    out = []
    for i, (key, value) in enumerate(records):
        headers: list[tuple[str, bytes]] = []
        try:
            doc = orjson.loads(value) if value is not None else None
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict):
            if shape.key_path and key is not None:
                _put(doc, shape.key_path, key.decode())
                key = f"other-{i % 5}".encode()
            if shape.seq_header:
                if "seq" in doc:  # as JSON: an integer stays one, "7" or 1.5 are none
                    headers.append((shape.seq_header, orjson.dumps(doc.pop("seq"))))
            elif "seq" in doc:
                _put(doc, shape.seq_path, doc.pop("seq"))
            if shape.id_header:
                if "messageId" in doc:
                    mid = doc.pop("messageId")
                    headers.append((shape.id_header, mid.encode() if isinstance(mid, str) else b""))
            elif "messageId" in doc:
                _put(doc, shape.id_path, doc.pop("messageId"))
            value = orjson.dumps(doc)
        if shape.codec is not None and value is not None:
            value = base64.b64encode(value)
        partition = rng.randrange(2) if shape.key_path else zlib.crc32(key or b"") % 2
        out.append(Record("in", partition, offsets[partition], key, value, tuple(headers), 0))
        offsets[partition] += 1
    return out


def plain(records: list[tuple[bytes | None, bytes | None]]) -> list[Record]:
    return [Record("in", 0, i, k, v, (), 0) for i, (k, v) in enumerate(records)]


def counts(report: Report) -> dict[str, Any]:
    return {
        name: getattr(report, name)
        for name in (
            "input_records",
            "valid_messages",
            "redeliveries",
            "ordered_records",
            "deduped_records",
            "dead_lettered",
            "gaps_skipped",
            "late_arrivals",
            "reemitted",
        )
    }


def failing(report: Report) -> set[str]:
    return {c.name for c in report.failures()}


@given(
    seed=st.integers(0, 2**16),
    name=st.sampled_from(sorted(SHAPES)),
    lost=st.integers(0, 4),
    give_up=st.sampled_from(["never", "halfway", "at the end"]),
)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_workload_in_a_shape_verifies_as_in_the_default_shape(
    seed: int, name: str, lost: int, give_up: str
) -> None:
    shape = SHAPES[name]
    w = generate(messages=120, keys=5, malformed=12, seed=seed, lost=lost)
    gap_after = {"never": None, "halfway": len(w.records) // 2, "at the end": len(w.records)}[
        give_up
    ]
    drained = give_up == "at the end"
    inputs = plain(w.records)
    base = verify(inputs, *expected_outputs(inputs, gap_after), drained=drained)
    assert base.ok, base.failures()
    shaped = reshape(w.records, shape, random.Random(seed))
    report = verify(shaped, *expected_outputs(shaped, gap_after, shape), drained, shape)
    assert report.ok, report.failures()
    assert counts(report) == counts(base)


@pytest.fixture(scope="module", params=sorted(SHAPES))
def case(request: pytest.FixtureRequest) -> tuple[Shape, list[Record], list, list, list]:
    shape = SHAPES[request.param]
    w = generate(messages=300, keys=8, malformed=12, seed=3)
    inputs = reshape(w.records, shape, random.Random(3))
    return (shape, inputs, *expected_outputs(inputs, shape=shape))


def test_the_default_shape_cannot_read_them(case) -> None:
    """What ``verify`` reported for such a worker before it took a shape."""
    shape, inputs, ordered, deduped, dlq = case
    assert verify(inputs, ordered, deduped, dlq, shape=shape).ok
    assert not verify(inputs, ordered, deduped, dlq).ok


def test_lost_and_reordered_output_fails_in_a_shape(case) -> None:
    shape, inputs, ordered, deduped, dlq = case
    assert verify(inputs, ordered, deduped, dlq, shape=shape).ok  # (the failure is this one)
    read = orjson.loads if shape.codec is None else shape.codec.decode
    messages = [r for r in ordered if read(r.value)["type"] != "seqkeeper.GapSkipped"]
    assert "ordered: lost" in failing(
        verify(inputs, [r for r in ordered if r is not messages[-1]], deduped, dlq, shape=shape)
    )
    assert "deduped: lost" in failing(verify(inputs, ordered, deduped[1:], dlq, shape=shape))
    key = messages[0].key
    i, j = [n for n, r in enumerate(ordered) if r.key == key][:2]
    swapped = list(ordered)
    swapped[i], swapped[j] = replace(ordered[j], offset=i), replace(ordered[i], offset=j)
    assert "ordered: out of order" in failing(verify(inputs, swapped, deduped, dlq, shape=shape))


def test_output_keyed_otherwise_fails_in_a_shape(case) -> None:
    """An ordered output must be keyed by its sequence key (with a key field,
    the field's value, not the Kafka key the producer gave it)."""
    shape, inputs, ordered, deduped, dlq = case
    assert verify(inputs, ordered, deduped, dlq, shape=shape).ok
    bad = [replace(r, key=b"elsewhere") if n == 3 else r for n, r in enumerate(ordered)]
    assert "ordered: bytes changed" in failing(verify(inputs, bad, deduped, dlq, shape=shape))


def test_dead_letters_are_checked_in_a_shape(case) -> None:
    shape, inputs, ordered, deduped, dlq = case
    assert verify(inputs, ordered, deduped, dlq, shape=shape).ok
    assert "dlq: rejected record missing" in failing(
        verify(inputs, ordered, deduped, dlq[1:], shape=shape)
    )
    wrongly = replace(ordered[0], topic="dlq", headers=(("seqkeeper.reason", b"x"),))
    assert "dlq: record that should not be there" in failing(
        verify(inputs, ordered, deduped, [*dlq, wrongly], shape=shape)
    )


def test_a_key_fields_dead_letters_are_keyed_by_the_field() -> None:
    """With a key field, a record the ordered stage rejects is dead-lettered
    under the key its value names (the repartition stage re-keyed it); one
    that names no key under its own Kafka key (the repartition stage
    dead-letters it)."""
    shape = SHAPES["key field"]
    w = generate(messages=200, keys=8, malformed=24, seed=5)
    inputs = reshape(w.records, shape, random.Random(5))
    ordered, deduped, dlq = expected_outputs(inputs, shape=shape)
    field_keyed = [r for r in dlq if r.key is not None and not r.key.startswith(b"other-")]
    own_keyed = [r for r in dlq if r not in field_keyed]
    assert field_keyed and own_keyed  # (both kinds are checked)
    assert verify(inputs, ordered, deduped, dlq, shape=shape).ok
    by_kafka_key = {r.value: r.key for r in inputs}
    rekeyed = [replace(r, key=by_kafka_key[r.value]) for r in dlq]
    assert rekeyed != dlq
    assert "dlq: rejected record missing" in failing(
        verify(inputs, ordered, deduped, rekeyed, shape=shape)
    )
