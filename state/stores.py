"""Per-key views and writers for the processors, over :class:`PartitionStore`.

Every read is a point lookup or one seek; every write touches only what
changed. Nothing here decides anything: the processors do.
"""

from __future__ import annotations

from dataclasses import dataclass

from processors.deduplicator import DedupDecision, SeenWindow
from processors.envelope import Message, parse
from processors.resequencer import KeyState, Step
from state import codecs
from state.base import PartitionStore


class ReorderBuffer:
    """One key's reorder buffer (a ``BufferLookup``)."""

    __slots__ = ("_store", "_partition", "_key", "_kbytes", "_prefix")

    def __init__(self, store: PartitionStore, partition: int, key: str) -> None:
        self._store = store
        self._partition = partition
        self._key = key
        self._kbytes = key.encode("utf-8")
        self._prefix = codecs.key_prefix(key)

    def get(self, seq: int) -> Message | None:
        raw = self._store.get(self._partition, codecs.buffer_key(self._key, seq))
        return None if raw is None else parse(self._kbytes, raw)

    def first_after(self, seq: int) -> int | None:
        found = self._store.seek(
            self._partition, codecs.buffer_key(self._key, seq + 1), self._prefix
        )
        return None if found is None else codecs.buffer_seq(found[0])


class SeenIds:
    """One key's remembered messageIds (a ``SeenLog``)."""

    __slots__ = ("_store", "_partition", "_key")

    def __init__(self, store: PartitionStore, partition: int, key: str) -> None:
        self._store = store
        self._partition = partition
        self._key = key

    def __contains__(self, message_id: object) -> bool:
        key = codecs.seen_id_key(self._key, str(message_id))
        return self._store.get(self._partition, key) is not None

    def at(self, position: int) -> tuple[str, float] | None:
        raw = self._store.get(self._partition, codecs.seen_position_key(self._key, position))
        return None if raw is None else codecs.decode_seen_position(raw)


@dataclass
class Stores:
    """The three tables of the ordered/deduplicated topology."""

    key_state: PartitionStore
    reorder_buffer: PartitionStore
    seen_ids: PartitionStore

    def load(self, partition: int, key: str) -> tuple[KeyState, SeenWindow]:
        return codecs.decode_key_state(self.key_state.get(partition, codecs.key_prefix(key)))

    def buffer(self, partition: int, key: str) -> ReorderBuffer:
        return ReorderBuffer(self.reorder_buffer, partition, key)

    def seen(self, partition: int, key: str) -> SeenIds:
        return SeenIds(self.seen_ids, partition, key)

    def save(
        self,
        partition: int,
        key: str,
        step: Step,
        window: SeenWindow,
        decision: DedupDecision | None = None,
    ) -> None:
        """Persist a step (and the dedup decision that admitted its message)."""
        if decision is not None:
            for position, forgotten in decision.forget:
                self.seen_ids.delete(partition, codecs.seen_position_key(key, position))
                self.seen_ids.delete(partition, codecs.seen_id_key(key, forgotten))
            if decision.remember is not None:
                position, mid, at = decision.remember
                self.seen_ids.put(
                    partition, codecs.seen_id_key(key, mid), codecs.encode_seen_id(position, at)
                )
                self.seen_ids.put(
                    partition,
                    codecs.seen_position_key(key, position),
                    codecs.encode_seen_position(mid, at),
                )
        if step.buffer_put is not None:
            self.reorder_buffer.put(
                partition, codecs.buffer_key(key, step.buffer_put.seq), step.buffer_put.value
            )
        for seq in step.buffer_deletes:
            self.reorder_buffer.delete(partition, codecs.buffer_key(key, seq))
        self.key_state.put(
            partition, codecs.key_prefix(key), codecs.encode_key_state(step.state, window)
        )

    def key_states(self, partition: int) -> list[tuple[str, KeyState, SeenWindow]]:
        """Every key's state in a partition (startup and rebalance scans)."""
        out = []
        for store_key, raw in self.key_state.items(partition):
            state, window = codecs.decode_key_state(raw)
            out.append((codecs.key_of(store_key), state, window))
        return out
