"""The audit's append against a model of message-db's ``write_message``:
a unique index on (stream, id), positions 0..n-1 per stream from the
stream's version, global positions from a sequence."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.message_log import EMPTY, Copy, Log, Record, Row, append


class DuplicateId(Exception):
    pass


class MessageDb:
    """message-db's ``write_message`` and ``stream_version``, in memory."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str, bytes | None, int, int]] = []
        self.sequence = 0

    def stream_version(self, stream: str) -> int | None:
        positions = [m[3] for m in self.messages if m[1] == stream]
        return max(positions) if positions else None

    def get(self, stream: str, mid: str) -> bytes | None:
        return next(m[2] for m in self.messages if m[0] == mid and m[1] == stream)

    def write_message(self, mid: str, stream: str, data: bytes | None) -> int:
        if any(m[0] == mid and m[1] == stream for m in self.messages):
            raise DuplicateId(mid)
        version = self.stream_version(stream)
        position = 0 if version is None else version + 1
        self.sequence += 1
        self.messages.append((mid, stream, data, position, self.sequence))
        return position


# Few streams, ids and values, so that copies and conflicts are common.
records_of_partition = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),  # the key
        st.sampled_from(["m1", "m2", "m3", "m4"]),
        st.sampled_from([b"x", b"y", None]),
    ),
    max_size=12,
)


def partitioned(parts: list[list[tuple[str, str, bytes | None]]]) -> list[list[Record]]:
    """Records of two topics; a key's records all in one partition of its
    topic (as Kafka's partitioner puts them), so a stream lives in one."""
    out = []
    for p, items in enumerate(parts):
        topic = "t0" if p % 2 == 0 else "t1"
        out.append(
            [
                Record(f"{topic}-{key}{p}", mid, data, topic, p, offset)
                for offset, (key, mid, data) in enumerate(items)
            ]
        )
    return out


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[list[Record]], list[list[Record]]]:
    """(the partitions' records, the runs that read them: each run the next
    offsets of every partition, up to a cut)."""
    parts = partitioned(draw(st.lists(records_of_partition, min_size=1, max_size=4)))
    n = draw(st.integers(1, 4))
    cuts = [
        sorted(draw(st.lists(st.integers(0, len(p)), min_size=n - 1, max_size=n - 1))) + [len(p)]
        for p in parts
    ]
    out = []
    for i in range(n):
        chunk = []
        for p, c in zip(parts, cuts, strict=True):
            chunk += p[c[i - 1] if i else 0 : c[i]]
        out.append(chunk)
    return parts, out


def through_model(db: MessageDb, run: list[Record]) -> tuple[list[tuple], list[tuple]]:
    """What message-db makes of one run's records, in arrival order."""
    rows, copies = [], []
    for r in sorted(run, key=lambda r: r.coordinates):
        try:
            position = db.write_message(r.id, r.stream, r.value)
            rows.append((r, position, db.sequence))
        except DuplicateId:
            copies.append((r, db.get(r.stream, r.id) == r.value))
    return rows, copies


@given(runs(), st.randoms(use_true_random=False))
def test_append_writes_what_message_db_would(given_runs, rnd) -> None:
    parts, chunks = given_runs
    db, log = MessageDb(), EMPTY
    all_rows: list[Row] = []
    all_copies: list[Copy] = []
    for chunk in chunks:
        shuffled = list(chunk)
        rnd.shuffle(shuffled)  # the order a run reads in does not matter
        before = log
        log, rows, copies = append(log, shuffled)
        assert append(before, chunk) == (log, rows, copies)  # a rerun: the same rows
        want_rows, want_copies = through_model(db, chunk)
        assert [(r.record, r.position, r.global_position) for r in rows] == want_rows
        assert [(c.record, c.identical) for c in copies] == want_copies
        all_rows += rows
        all_copies += copies
    # message-db's guarantees, stated directly
    ids = [(r.record.stream, r.record.id) for r in all_rows]
    assert len(ids) == len(set(ids))
    globals_ = [r.global_position for r in all_rows]
    assert globals_ == sorted(set(globals_)) and (not globals_ or globals_[0] == 1)
    for stream in {r.record.stream for r in all_rows}:
        positions = [r.position for r in all_rows if r.record.stream == stream]
        assert positions == list(range(len(positions)))
    # every record is a row or a copy, and a copy names its row
    every = sum(len(p) for p in parts)
    assert len(all_rows) + len(all_copies) == every
    first = {(r.record.stream, r.record.id): r.record for r in all_rows}
    for c in all_copies:
        row = first[(c.record.stream, c.record.id)]
        assert c.first == row.coordinates and c.identical == (row.value == c.record.value)
    # a stream's positions do not depend on the runs: one run gives the same
    _, once, _ = append(EMPTY, [r for p in parts for r in p])
    by_record = {r.record: r.position for r in once}
    assert {r.record: r.position for r in all_rows} == by_record


def test_a_copy_with_other_bytes_is_reported_not_a_row() -> None:
    a = Record("s-k", "m1", b"x", "s", 0, 0)
    same = Record("s-k", "m1", b"x", "s", 0, 1)
    other = Record("s-k", "m1", b"y", "s", 0, 2)
    log, rows, copies = append(EMPTY, [other, a, same])
    assert [r.record for r in rows] == [a]
    assert copies == [Copy(same, ("s", 0, 0), True), Copy(other, ("s", 0, 0), False)]
    assert log == Log({"s-k": 1}, {("s-k", "m1"): (b"x", ("s", 0, 0))}, 1)
