"""Message Store append: which records of the audited topics become rows of
message-db's ``messages`` table, at which positions.

message-db's ``write_message`` keeps a message id unique (per stream here:
the audit's id is the record's messageId, which the workers make unique per
stream) and numbers each stream's messages 0, 1, 2, ... with no gap, and
all messages by a ``global_position`` that only grows. Kafka, though, may
hold one message several times: an at_least_once worker re-emits its
outputs after a crash, the outbox replays a reply. So, taking the records
in the order ``(topic, partition, offset)`` (the same order whatever run
reads them):

* the first record of a ``(stream, id)`` becomes a row, at the stream's
  next position and the next global position;
* a later record with that id and the same value bytes is an identical
  copy: counted, never a row;
* a later record with that id and other bytes is a conflict: reported with
  its coordinates and those of the row it collides with, never a row (the
  row that was there first stays; message-db would refuse the write).

Invariants (``tests/processors/test_message_log.py``, against a model of
``write_message``): one row per (stream, id); positions 0..n-1 per stream;
global positions strictly increasing, continuing the log's; a run over
the same records from the same log (a rerun after a crash) gives the same
rows whatever order it reads them in; a later run only adds rows after the
earlier ones. A stream's records all come from one partition (a stream is a
topic's key), so its positions do not depend on how the records were split
into runs either.

:func:`append` is the reference the Spark job (:mod:`spark_sink.audit`)
is tested against; Spark computes the same at scale.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from seqkeeper.processors.values import value


@value
class Record:
    """A record of an audited topic, as the audit names it."""

    stream: str
    id: str
    value: bytes | None
    topic: str
    partition: int
    offset: int

    @property
    def coordinates(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)


@value
class Row:
    """A record that became a row of the store."""

    record: Record
    position: int
    global_position: int


@value
class Copy:
    """A record whose (stream, id) already has a row: ``identical`` when its
    value bytes are the row's, else a conflict; ``first``: the row's
    coordinates."""

    record: Record
    first: tuple[str, int, int]
    identical: bool


@value
class Log:
    """What an append needs of the store so far: each stream's next
    position, each (stream, id)'s value and coordinates, the last global
    position (0: none)."""

    next_position: Mapping[str, int]
    known: Mapping[tuple[str, str], tuple[bytes | None, tuple[str, int, int]]]
    global_position: int = 0


EMPTY = Log({}, {}, 0)


def arrival(record: Record) -> tuple[str, int, int]:
    """The order records are appended in (the same in every run)."""
    return record.coordinates


def append(log: Log, records: Iterable[Record]) -> tuple[Log, list[Row], list[Copy]]:
    """The rows ``records`` add to ``log`` and the copies they hold."""
    next_position = dict(log.next_position)
    known = dict(log.known)
    top = log.global_position
    rows: list[Row] = []
    copies: list[Copy] = []
    for r in sorted(records, key=arrival):
        seen = known.get((r.stream, r.id))
        if seen is not None:
            copies.append(Copy(r, seen[1], seen[0] == r.value))
            continue
        position = next_position.get(r.stream, 0)
        top += 1
        rows.append(Row(r, position, top))
        next_position[r.stream] = position + 1
        known[(r.stream, r.id)] = (r.value, r.coordinates)
    return Log(next_position, known, top), rows, copies
