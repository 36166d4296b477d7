"""Byte layouts of the state tables' keys and values.

Keys are length-prefixed so that any sequence key (even one containing NUL)
maps to a distinct store key, and so that all entries of one sequence key
share a prefix. Sequences are 8-byte big-endian, so a key's reorder-buffer
entries sort in sequence order (range scans in RocksDB).
"""

from __future__ import annotations

import struct

_SEQ = struct.Struct(">Q")
_TIME = struct.Struct(">d")


def key_prefix(key: str) -> bytes:
    raw = key.encode("utf-8")
    return len(raw).to_bytes(4, "big") + raw


def seen_key(key: str, message_id: str) -> bytes:
    """Store key of a seen messageId of sequence key ``key``."""
    return key_prefix(key) + message_id.encode("utf-8")


def buffer_key(key: str, seq: int) -> bytes:
    """Store key of a buffered message of ``key`` at ``seq``."""
    return key_prefix(key) + _SEQ.pack(seq)


def encode_seq(seq: int) -> bytes:
    return _SEQ.pack(seq)


def decode_seq(raw: bytes) -> int:
    return int(_SEQ.unpack(raw)[0])


def encode_time(t: float) -> bytes:
    return _TIME.pack(t)


def decode_time(raw: bytes) -> float:
    return float(_TIME.unpack(raw)[0])
