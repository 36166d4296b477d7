"""Byte layouts of the state tables' keys and values.

Keys start with the length-prefixed sequence key, so any key (even one with
NUL bytes) maps to distinct store keys and all entries of one key share a
prefix. Sequences and FIFO positions are 8-byte big-endian, so a key's
entries sort numerically (RocksDB range scans and seeks).

Tables: ``key-state`` (prefix -> :func:`encode_key_state`), ``reorder-buffer``
(prefix + seq -> original message bytes), ``seen-ids`` (prefix + ``i`` + id
-> position and time; prefix + ``p`` + position -> time and id).
"""

from __future__ import annotations

import struct

import orjson

from processors.deduplicator import SeenWindow
from processors.resequencer import KeyState

_SEQ = struct.Struct(">Q")
_POS_TIME = struct.Struct(">Qd")
_TIME = struct.Struct(">d")


def key_prefix(key: str) -> bytes:
    raw = key.encode("utf-8")
    return len(raw).to_bytes(4, "big") + raw


def key_of(store_key: bytes) -> str:
    """The sequence key a store key belongs to."""
    n = int.from_bytes(store_key[:4], "big")
    return store_key[4 : 4 + n].decode("utf-8")


def buffer_key(key: str, seq: int) -> bytes:
    return key_prefix(key) + _SEQ.pack(seq)


def buffer_seq(store_key: bytes) -> int:
    return int(_SEQ.unpack(store_key[-8:])[0])


def seen_id_key(key: str, message_id: str) -> bytes:
    return key_prefix(key) + b"i" + message_id.encode("utf-8")


def seen_position_key(key: str, position: int) -> bytes:
    return key_prefix(key) + b"p" + _SEQ.pack(position)


def encode_seen_id(position: int, seen_at: float) -> bytes:
    return _POS_TIME.pack(position, seen_at)


def encode_seen_position(message_id: str, seen_at: float) -> bytes:
    return _TIME.pack(seen_at) + message_id.encode("utf-8")


def decode_seen_position(raw: bytes) -> tuple[str, float]:
    return raw[8:].decode("utf-8"), float(_TIME.unpack(raw[:8])[0])


def encode_key_state(state: KeyState, window: SeenWindow) -> bytes:
    return orjson.dumps(
        [
            state.next_expected,
            state.buffered,
            state.gap_since,
            state.skipped,
            window.head,
            window.tail,
        ]
    )


def decode_key_state(raw: bytes | None) -> tuple[KeyState, SeenWindow]:
    if raw is None:
        return KeyState(), SeenWindow()
    nxt, buffered, gap_since, skipped, head, tail = orjson.loads(raw)
    return (
        KeyState(nxt, buffered, gap_since, tuple((a, b) for a, b in skipped)),
        SeenWindow(head, tail),
    )
