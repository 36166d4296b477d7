"""Per-key state stores for the processors, over changelogged Faust tables.

Each store reads and writes single entries by exact key: a message costs a
few point reads and writes whatever the size of the state, and nothing
serializes a whole buffer. Reads and writes must happen inside the agent
that consumes the input partition (Faust routes them to that partition's
RocksDB and changelog partition).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from processors.deduplicator import DedupDecision
from processors.envelope import Message, parse
from processors.resequencer import FIRST_SEQ, Step
from state import codecs

Table = MutableMapping[bytes, bytes]


class SeenIds:
    """The seen messageIds of one sequence key (a ``Container[str]``)."""

    __slots__ = ("_table", "_key")

    def __init__(self, table: Any, key: str) -> None:
        self._table = table
        self._key = key

    def __contains__(self, message_id: object) -> bool:
        return self._table.get(codecs.seen_key(self._key, str(message_id))) is not None


class SeenIdStore:
    def __init__(self, table: Any) -> None:
        self.table = table

    def view(self, key: str) -> SeenIds:
        return SeenIds(self.table, key)

    def remember(self, key: str, decision: DedupDecision) -> None:
        self.table[codecs.seen_key(key, decision.message_id)] = codecs.encode_time(decision.seen_at)


class ReorderBuffer:
    """The reorder buffer of one sequence key, read by sequence."""

    __slots__ = ("_table", "_key", "_kbytes")

    def __init__(self, table: Any, key: str) -> None:
        self._table = table
        self._key = key
        self._kbytes = key.encode("utf-8")

    def get(self, seq: int) -> Message | None:
        raw = self._table.get(codecs.buffer_key(self._key, seq))
        return None if raw is None else parse(self._kbytes, raw)


class ResequencerStore:
    """``next_expected`` and the reorder buffer of every sequence key."""

    def __init__(self, next_table: Any, buffer_table: Any) -> None:
        self.next_table = next_table
        self.buffer_table = buffer_table

    def next_expected(self, key: str) -> int:
        raw = self.next_table.get(codecs.key_prefix(key))
        return FIRST_SEQ if raw is None else codecs.decode_seq(raw)

    def buffer(self, key: str) -> ReorderBuffer:
        return ReorderBuffer(self.buffer_table, key)

    def apply(self, key: str, before: int, step: Step) -> None:
        """Persist the delta of ``step`` (only what changed)."""
        if step.buffer_put is not None:
            self.buffer_table[codecs.buffer_key(key, step.buffer_put.seq)] = step.buffer_put.value
        for seq in step.buffer_deletes:
            del self.buffer_table[codecs.buffer_key(key, seq)]
        if step.next_expected != before:
            self.next_table[codecs.key_prefix(key)] = codecs.encode_seq(step.next_expected)
