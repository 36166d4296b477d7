"""Verify output topics against the input topic: nothing lost, per-key order
kept, every rejected record dead-lettered with a reason.

A record emitted again (after a crash or a partition move) is a re-emission:
counted, and allowed only when it is byte-identical to its first emission
(same messageId, so a downstream idempotent receiver drops it). Order is
checked on the first emissions.

The expectation is derived from the input records alone (in partition order,
which is the order the worker sees them), never from the workload generator,
so the check stands on its own.

Records are read in the worker's message shape (``SEQKEEPER_KEY_FIELD``,
``SEQKEEPER_SEQ_FIELD``/``_HEADER``, ``SEQKEEPER_MESSAGE_ID_FIELD``/``_HEADER``,
``SEQKEEPER_CODEC``: :class:`~seqkeeper.processors.envelope.Shape`). With a key
field the worker's outputs and dead letters are keyed by the key the value
names (its repartition stage), and one key's messages may sit on several
input partitions: the worker then sees them in an interleaving the input
does not record. Only a choice between two records that differ depends on
it (a sequence conflict, or one messageId sent with different bytes, on
different partitions): which one is accepted is then the replay's guess.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from seqkeeper.processors.dead_letter import REASON
from seqkeeper.processors.envelope import (
    DEFAULT_SHAPE,
    InvalidMessage,
    Message,
    Shape,
    key_field,
    parse,
)
from seqkeeper.processors.resequencer import FIRST_SEQ, GAP_SKIPPED
from seqkeeper.topics import Record


@dataclass
class Check:
    name: str
    count: int
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.count == 0


class Checked:
    """A report made of checks: ok when every check is."""

    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


@dataclass
class Report(Checked):
    input_records: int = 0
    valid_messages: int = 0
    redeliveries: int = 0
    ordered_records: int = 0
    deduped_records: int = 0
    dead_lettered: int = 0
    gaps_skipped: int = 0
    late_arrivals: int = 0
    #: byte-identical repeats per output (``ordered``, ``deduped``, ``dlq``)
    reemitted: dict[str, int] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)


def _examples(items: Iterable[object], n: int = 3) -> str:
    shown = [repr(x) for x in itertools.islice(items, n)]
    return ", ".join(shown)


def _ident(record: Record, shape: Shape = DEFAULT_SHAPE) -> tuple[str, int] | None:
    """``(messageId, seq)`` of an output record (read in ``shape``), else ``None``."""
    if shape.is_default:  # (leniently: the bytes are compared with the input's)
        try:
            doc = orjson.loads(record.value or b"")
            return str(doc["messageId"]), int(doc["seq"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None
    try:
        msg = parse(record.key, record.value, shape=shape, headers=record.headers)
    except InvalidMessage:
        return None
    return msg.message_id, msg.seq


def _marker(record: Record, shape: Shape = DEFAULT_SHAPE) -> tuple[str, int, int] | None:
    """``(messageId, from, to)`` of a GapSkipped marker (written in the
    shape's codec, as the worker writes them), else ``None``."""
    try:
        codec = shape.codec
        doc = orjson.loads(record.value or b"") if codec is None else codec.decode(record.value or b"")
        if doc.get("type") != GAP_SKIPPED:
            return None
        return str(doc["messageId"]), int(doc["data"]["from"]), int(doc["data"]["to"])
    except Exception:  # noqa: BLE001 - not a marker (a user's codec may raise anything)
        return None


def _worker_key(record: Record, shape: Shape) -> bytes | None:
    """The key the worker gives an input record's outputs and dead letters:
    its Kafka key, or with a key field the key its value names (a value
    naming none is dead-lettered by the repartition stage with its own key)."""
    if not shape.key_path:
        return record.key
    try:
        return key_field(record.value, shape).encode("utf-8")
    except InvalidMessage:
        return record.key


def verify(
    inputs: list[Record],
    ordered: list[Record],
    deduped: list[Record],
    dlq: list[Record],
    drained: bool = False,
    shape: Shape = DEFAULT_SHAPE,
) -> Report:
    """Check the output topics against the input topic.

    ``drained``: every gap should have been given up by now (the gap timeout
    has passed since the last input), so no accepted message may still wait.
    ``shape``: where the messages keep their key, sequence and messageId
    (the worker's :meth:`~seqkeeper.settings.OrderedSettings.shape`).
    """
    report = Report(
        input_records=len(inputs),
        ordered_records=len(ordered),
        deduped_records=len(deduped),
        dead_lettered=len(dlq),
    )
    # -- What the worker should have done, replayed in partition order.
    accepted: dict[str, Message] = {}  # messageId -> first accepted message
    copies: Counter[str] = Counter()  # messageId -> deliveries
    owner: dict[tuple[str, int], str] = {}  # (key, seq) -> messageId
    expected_dlq: Counter[tuple[bytes | None, bytes | None]] = Counter()
    for rec in sorted(inputs, key=lambda r: (r.partition, r.offset)):
        try:
            msg = parse(rec.key, rec.value, shape=shape, headers=rec.headers)
        except InvalidMessage:
            expected_dlq[(_worker_key(rec, shape), rec.value)] += 1
            continue
        copies[msg.message_id] += 1
        if msg.message_id in accepted:
            report.redeliveries += 1
            continue
        if owner.get((msg.key, msg.seq), msg.message_id) != msg.message_id:
            expected_dlq[(msg.key.encode("utf-8"), rec.value)] += 1
            continue
        owner[(msg.key, msg.seq)] = msg.message_id
        accepted[msg.message_id] = msg
    # -- Ordered output: messages, and GapSkipped markers covering given-up ranges.
    checks = report.checks
    first_bytes: dict[str, bytes | None] = {}
    changed: list[str] = []
    unexpected: list[int] = []
    violations: list[tuple[str, int, str]] = []  # went backwards
    gaps: list[tuple[str, int, str]] = []  # skipped ahead without a GapSkipped marker
    repeats = 0
    last_seq: dict[str, int] = {}
    covered: dict[str, list[tuple[int, int]]] = defaultdict(list)

    def repeated(mid: str, value: bytes | None) -> bool:
        """Record the first emission of ``mid``; count a repeat (and a changed one)."""
        nonlocal repeats
        if mid not in first_bytes:
            first_bytes[mid] = value
            return False
        repeats += 1
        if first_bytes[mid] != value:
            changed.append(mid)
        return True

    for rec in sorted(ordered, key=lambda r: (r.partition, r.offset)):
        key = (rec.key or b"").decode("utf-8", "replace")
        expected_next = last_seq.get(key, FIRST_SEQ - 1) + 1
        marker = _marker(rec, shape)
        if marker is not None:
            mid, first, last = marker
            if repeated(mid, rec.value):
                continue
            if first != expected_next:
                (gaps if first > expected_next else violations).append(
                    (key, expected_next, f"GapSkipped {first}..{last}")
                )
            covered[key].append((first, last))
            last_seq[key] = max(last, last_seq.get(key, 0))
            continue
        ident = _ident(rec, shape)
        if ident is None or ident[0] not in accepted:
            unexpected.append(rec.offset)
            continue
        mid, seq = ident
        if repeated(mid, rec.value):
            continue
        came = accepted[mid]  # re-emitted as it came, keyed by its sequence key
        if rec.value != came.value or rec.key != came.key.encode("utf-8"):
            changed.append(mid)
        if seq != expected_next:
            (gaps if seq > expected_next else violations).append((key, expected_next, str(seq)))
        last_seq[key] = max(seq, last_seq.get(key, 0))
    # Messages whose sequence was given up arrived late: not emitted, and
    # dead-lettered (or sent to the late topic, or dropped) by policy.
    late_ok: Counter[tuple[bytes | None, bytes | None]] = Counter()
    for mid, msg in list(accepted.items()):
        key, seq = msg.key, msg.seq
        if any(a <= seq <= b for a, b in covered.get(key, ())):
            late_ok[(key.encode("utf-8"), msg.value)] += copies[mid]  # every copy arrives late
            del accepted[mid]
            del owner[(key, seq)]
    report.valid_messages = len(accepted)
    report.gaps_skipped = sum(len(v) for v in covered.values())
    report.late_arrivals = sum(late_ok.values())
    releasable: set[str] = set()
    for key in {k for k, _ in owner} | set(covered):
        starts = {a: b for a, b in covered.get(key, ())}
        nxt = FIRST_SEQ
        while True:
            if (key, nxt) in owner:
                releasable.add(owner[(key, nxt)])
                nxt += 1
            elif nxt in starts:
                nxt = starts[nxt] + 1
            else:
                break  # the rest waits behind a gap
    lost = releasable - first_bytes.keys()
    checks.append(Check("ordered: lost", len(lost), _examples(sorted(lost))))
    if drained:
        waiting = sorted(accepted.keys() - releasable)
        checks.append(
            Check("ordered: still waiting behind a gap", len(waiting), _examples(waiting))
        )
    checks.append(
        Check(
            "ordered: out of order",
            len(violations),
            _examples(f"{k} expected {e} got {s}" for k, e, s in violations),
        )
    )
    checks.append(
        Check(
            "ordered: gap without GapSkipped",
            len(gaps),
            _examples(f"{k} expected {e} got {s}" for k, e, s in gaps),
        )
    )
    report.reemitted["ordered"] = repeats
    checks.append(Check("ordered: bytes changed", len(changed), _examples(changed)))
    checks.append(Check("ordered: not a valid input", len(unexpected), _examples(unexpected)))

    # -- Deduplicated output.
    seen = Counter(ident[0] for r in deduped if (ident := _ident(r, shape)) is not None)
    d_lost = accepted.keys() - seen.keys()
    checks.append(Check("deduped: lost", len(d_lost), _examples(sorted(d_lost))))
    report.reemitted["deduped"] = sum(n - 1 for n in seen.values() if n > 1)
    d_first: dict[str, tuple[bytes | None, bytes | None]] = {}
    d_changed = [
        mid
        for r in deduped
        if (ident := _ident(r, shape)) is not None
        and d_first.setdefault((mid := ident[0]), (r.key, r.value)) != (r.key, r.value)
    ]
    checks.append(Check("deduped: bytes changed", len(d_changed), _examples(d_changed)))
    checks.append(
        Check(
            "deduped: not a valid input",
            len(seen.keys() - accepted.keys())
            + sum(1 for r in deduped if _ident(r, shape) is None),
        )
    )

    # -- Dead letters.
    distinct = {(r.key, r.value, r.headers): r for r in dlq}  # a repeat is identical
    report.reemitted["dlq"] = len(dlq) - len(distinct)
    got_dlq = Counter((r.key, r.value) for r in distinct.values())
    missing = expected_dlq - got_dlq
    extra = got_dlq - expected_dlq - late_ok
    checks.append(Check("dlq: rejected record missing", sum(missing.values()), _examples(missing)))
    checks.append(
        Check("dlq: record that should not be there", sum(extra.values()), _examples(extra))
    )
    checks.append(
        Check("dlq: without a reason header", sum(1 for r in dlq if not r.header(REASON)))
    )
    return report
