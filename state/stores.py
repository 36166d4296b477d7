"""Per-key views and writers for the processors, over one
:class:`PartitionStore` (layout: :mod:`state.codecs`).

Every read is a point lookup or one seek; every write touches only what
changed. Nothing here decides anything: the processors do.

Write order makes a crash harmless wherever it cuts a step: the key state is
the commit record of a step. Seen ids written before it are only believed
when their FIFO position lies inside the key state's window and the FIFO
entry names the same id; a buffer entry written before it is taken again by
the Resequencer when its message is replayed; deletions of forgotten ids
come first (forgetting early is harmless) and deletions of confirmed buffer
entries come last (left-overs are deleted by the next confirmation).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from processors.deduplicator import DedupDecision, Seen, SeenWindow
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
        self._prefix = codecs.buffer_prefix(key)

    def get(self, seq: int) -> Message | None:
        raw = self._store.get(self._partition, codecs.buffer_key(self._key, seq))
        return None if raw is None else parse(self._kbytes, raw)

    def below(self, upto: int) -> list[int]:
        """One pass of one iterator over the key's buffer (not a seek per
        entry: an iterator costs more than the entries it reads here)."""
        seqs = []
        for store_key, _ in self._store.items(self._partition, self._prefix):
            seq = codecs.buffer_seq(store_key)
            if seq >= upto:
                break
            seqs.append(seq)
        return seqs

    def first_after(self, seq: int) -> int | None:
        found = self._store.seek(
            self._partition, codecs.buffer_key(self._key, seq + 1), self._prefix
        )
        return None if found is None else codecs.buffer_seq(found[0])


class SeenIds:
    """One key's remembered messageIds (a ``SeenLog``), as far as the key
    state's window vouches for them."""

    __slots__ = ("_store", "_partition", "_key", "_window")

    def __init__(self, store: PartitionStore, partition: int, key: str, window: SeenWindow) -> None:
        self._store = store
        self._partition = partition
        self._key = key
        self._window = window

    def get(self, message_id: str) -> Seen | None:
        raw = self._store.get(self._partition, codecs.seen_id_key(self._key, message_id))
        if raw is None:
            return None
        seen = codecs.decode_seen_id(raw)
        if not self._window.head <= seen.position < self._window.tail:
            return None  # written by a step a crash cut short, or forgotten
        entry = self.at(seen.position)
        return seen if entry is not None and entry[0] == message_id else None

    def at(self, position: int) -> tuple[str, float] | None:
        raw = self._store.get(self._partition, codecs.seen_position_key(self._key, position))
        return None if raw is None else codecs.decode_seen_position(raw)


@dataclass
class Stores:
    """The state table of the ordered/deduplicated topology."""

    state: PartitionStore

    def load(self, partition: int, key: str) -> tuple[KeyState, SeenWindow]:
        return codecs.decode_key_state(self.state.get(partition, codecs.key_state_key(key)))

    def buffer(self, partition: int, key: str) -> ReorderBuffer:
        return ReorderBuffer(self.state, partition, key)

    def seen(self, partition: int, key: str, window: SeenWindow) -> SeenIds:
        return SeenIds(self.state, partition, key, window)

    def save(
        self,
        partition: int,
        key: str,
        step: Step,
        window: SeenWindow,
        decision: DedupDecision | None = None,
    ) -> None:
        """Persist a step (and the dedup decision that admitted its message)."""
        store = self.state
        if decision is not None:
            self._forget_ids(partition, key, decision.forget)
            if decision.remember is not None:
                mid, seen = decision.remember
                store.put(
                    partition,
                    codecs.seen_position_key(key, seen.position),
                    codecs.encode_seen_position(mid, seen.accepted_at),
                )
                store.put(partition, codecs.seen_id_key(key, mid), codecs.encode_seen_id(seen))
        if step.buffer_put is not None:
            store.put(partition, codecs.buffer_key(key, step.buffer_put.seq), step.buffer_put.value)
        store.put(partition, codecs.key_state_key(key), codecs.encode_key_state(step.state, window))
        for seq in step.buffer_deletes:
            store.delete(partition, codecs.buffer_key(key, seq))

    def forget(
        self,
        partition: int,
        key: str,
        state: KeyState,
        window: SeenWindow,
        forget: tuple[tuple[int, str], ...],
    ) -> None:
        """Persist a sweep: ``forget`` (position, id) and the new window."""
        self._forget_ids(partition, key, forget)
        self.state.put(partition, codecs.key_state_key(key), codecs.encode_key_state(state, window))

    def _forget_ids(self, partition: int, key: str, forget: tuple[tuple[int, str], ...]) -> None:
        """Delete forgotten seen ids (before the key state: forgetting early
        is harmless)."""
        for position, forgotten in forget:
            self.state.delete(partition, codecs.seen_id_key(key, forgotten))
            self.state.delete(partition, codecs.seen_position_key(key, position))

    def save_index(self, partition: int, keys: list[str], buffered: int) -> None:
        """Remember, with the partition's local state, which keys the next
        start-up must look at and how many messages are buffered (a clean
        stop writes it; any later write voids it)."""
        self.state.mark(partition, orjson.dumps({"keys": keys, "buffered": buffered}))

    def take_index(self, partition: int) -> tuple[list[str], int] | None:
        """What :meth:`save_index` wrote, if the state is still as it was."""
        raw = self.state.take_mark(partition)
        if raw is None:
            return None
        index = orjson.loads(raw)
        return list(index["keys"]), int(index["buffered"])

    def key_states(
        self, partition: int, after: str | None = None
    ) -> Iterator[tuple[str, KeyState, SeenWindow]]:
        """Every key's state in a partition, in store order (startup and
        rebalance scans), or those after the key ``after`` (sweeps)."""
        start = b"" if after is None else codecs.key_state_key(after) + b"\x00"
        for store_key, raw in self.state.items(partition, codecs.KEY_STATE, start):
            state, window = codecs.decode_key_state(raw)
            yield codecs.key_of(store_key), state, window
