"""Transactional partitions through the fetcher that
:func:`seqkeeper.adapter.records.install` puts in place (TolerantRecords,
RawPartitionRecords): read_committed delivers exactly the records of
committed transactions and plain writes, skipping the aborted ranges the
fetch response lists and every commit or abort marker; read_uncommitted
(the raw path of batch sources) every data record, never a marker; both
move the position past the markers at the end."""

from __future__ import annotations

import struct

from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy
from aiokafka.structs import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.adapter.records import RawPartitionRecords, RawTopics, TolerantRecords

TP = TopicPartition("in", 0)
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


class _ControlBuilder(_DefaultRecordBatchBuilderPy):  # type: ignore[misc]
    """A control batch, as only a broker writes them."""

    def _get_attributes(self, include_compression_type: bool = True) -> int:
        return int(super()._get_attributes(include_compression_type)) | self.CONTROL_MASK


def _batch(base: int, pid: int, records: list[tuple[bytes, bytes]], control: bool) -> bytes:
    kind = _ControlBuilder if control else _DefaultRecordBatchBuilderPy
    builder = kind(2, 0, int(pid >= 0), pid, 0 if pid >= 0 else -1, -1, 1 << 20)
    for i, (key, value) in enumerate(records):
        builder.append(i, 1_700_000_000_000 + base + i, key, value, [])
    raw = builder.build()
    struct.pack_into(">q", raw, 0, base)  # the base offset (outside the CRC)
    return bytes(raw)


#: a step: (producer, None: a data batch of n records | True: commit | False: abort, n);
#: producer 0 writes without transactions
step = st.tuples(st.integers(0, 3), st.sampled_from([None, None, True, False]), st.integers(1, 3))


@given(st.lists(step, max_size=30))
def test_read_committed_skips_aborted_records_and_markers(steps) -> None:  # type: ignore[no-untyped-def]
    data = b""
    offset = 0
    open_: dict[int, tuple[int, list[int]]] = {}  # producer -> (first offset, offsets)
    committed: list[int] = []  # what read_committed must deliver
    written: list[int] = []  # every data record: what read_uncommitted delivers
    aborted: list[tuple[int, int]] = []  # (producer, first offset): the fetch's list

    def end(pid: int, commit: bool) -> None:
        nonlocal data, offset
        first, offsets = open_.pop(pid)
        marker = struct.pack(">hh", 0, int(commit)), struct.pack(">hi", 0, 0)
        data += _batch(offset, pid, [marker], control=True)
        offset += 1
        if commit:
            committed.extend(offsets)
        else:
            aborted.append((pid, first))

    for pid, action, n in steps:
        if action is None or pid == 0:
            records = [(b"k", f"{pid}:{offset + i}".encode()) for i in range(n)]
            data += _batch(offset, pid if pid else -1, records, control=False)
            mine = list(range(offset, offset + n))
            written.extend(mine)
            if pid == 0:
                committed.extend(mine)
            else:
                first, offsets = open_.get(pid, (offset, []))
                open_[pid] = (first, offsets + mine)
            offset += n
        elif pid in open_:
            end(pid, action)
    for pid in list(open_):  # (a fetch stops at the last stable offset)
        end(pid, True)

    def read(isolation: int) -> tuple[list[int], int]:
        parts = RawPartitionRecords(
            TP, TolerantRecords(data), aborted, 0, RawTopics({"in"}), None, True, isolation
        )
        return [r.offset for r in parts], parts.next_fetch_offset

    assert read(READ_COMMITTED) == (sorted(committed), offset)
    assert read(READ_UNCOMMITTED) == (written, offset)
