"""Byte layout of the one state table of the ordered/deduplicated topology.

All per-key families live in one changelogged table, so one key's writes go
to one changelog partition in the order they were made, and a crash leaves a
prefix of them (never, say, a buffer entry without the key state that came
before it). Each store key is a family byte, then the length-prefixed
sequence key (so any key, even one with NUL bytes, maps to distinct store
keys and a key's entries of one family share a prefix), then the family's
suffix. Sequences and FIFO positions are 8-byte big-endian, so a key's
entries sort numerically (RocksDB range scans and seeks).

Families:

* ``s`` + key -> the key state (:func:`encode_key_state`, packed)
* ``b`` + key + seq -> the original message bytes (the reorder buffer); a
  message with headers, or read with a configured shape, is packed with
  its fields (:func:`encode_message`)
* ``i`` + key + messageId -> FIFO position, time, input offset (seen ids)
* ``g`` + key + page -> the messageIds at FIFO positions ``page * PAGE_IDS``
  to ``page * PAGE_IDS + PAGE_IDS - 1`` (:func:`encode_seen_page`: the first
  position it holds, then the ids; those before it are ``p`` records, or
  were forgotten). The ids of the page not yet full ride in the key state
  (:class:`SeenPage`), which each step writes anyway: a page is one
  changelog record per ``PAGE_IDS`` accepted ids, written when it fills.
* ``p`` + key + position -> time and messageId (the seen ids' FIFO before
  state format 4: one record per id; still read below a key's
  :attr:`SeenPage.legacy_below`, never written)

With an ordered processor (:mod:`processors.processor`), three more:

* ``P`` + key -> the processor's cursor (the last sequence processed) and
  its state, the JSON ``fn`` returned (:func:`encode_processed`)
* ``Q`` + key + seq -> a released message waiting for the processor (an
  async one, or one being retried): the message bytes, or a given-up range
* ``O`` + key + seq -> what processing that sequence produced, not yet
  confirmed durable downstream (the processor's outbox, :func:`encode_outs`)

With key retention (:mod:`processors.key_retention`), one more:

* ``F`` + key -> the marker of a forgotten key (:func:`encode_forgotten`):
  a layout byte (1), its next expected sequence (8 bytes, big-endian) and
  when it was forgotten (a big-endian double, stream-time seconds). Only
  read for a key without ``s``; a reader that does not know the family
  never reads it (every read names its family), and :func:`describe` of an
  older version calls it undecodable.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import orjson

from seqkeeper.processors.deduplicator import ALL_IDS, UNKNOWN, Seen, SeenWindow
from seqkeeper.processors.envelope import Message, parse
from seqkeeper.processors.key_retention import Forgotten
from seqkeeper.processors.resequencer import Emission, GapSkipped, KeyState
from seqkeeper.state.base import FORMAT_MARKER

KEY_STATE = b"s"
BUFFER = b"b"
SEEN_ID = b"i"
SEEN_POSITION = b"p"
SEEN_PAGE = b"g"
PROCESSED = b"P"
QUEUED = b"Q"
OUTPUTS = b"O"
FORGOTTEN = b"F"

_SEQ = struct.Struct(">Q")
_SEEN = struct.Struct(">Qdq")
_TIME = struct.Struct(">d")


#: Sequence keys whose store-key prefix is remembered (then it starts over).
PREFIXES_REMEMBERED = 100_000
_prefixes: dict[str, bytes] = {}


def key_prefix(key: str) -> bytes:
    """The store-key prefix of ``key`` (the key functions below inline the
    lookup of a remembered one: they run several times per message)."""
    found = _prefixes.get(key)
    if found is None:
        if len(_prefixes) >= PREFIXES_REMEMBERED:
            _prefixes.clear()
        raw = key.encode("utf-8")
        found = _prefixes[key] = len(raw).to_bytes(4, "big") + raw
    return found


def key_of(store_key: bytes) -> str:
    """The sequence key a store key belongs to."""
    n = int.from_bytes(store_key[1:5], "big")
    return store_key[5 : 5 + n].decode("utf-8")


def key_state_key(key: str) -> bytes:
    return KEY_STATE + (_prefixes.get(key) or key_prefix(key))


def buffer_prefix(key: str) -> bytes:
    return BUFFER + (_prefixes.get(key) or key_prefix(key))


def buffer_key(key: str, seq: int) -> bytes:
    return BUFFER + (_prefixes.get(key) or key_prefix(key)) + _SEQ.pack(seq)


def buffer_seq(store_key: bytes) -> int:
    return int(_SEQ.unpack(store_key[-8:])[0])


def seen_id_key(key: str, message_id: str) -> bytes:
    return SEEN_ID + (_prefixes.get(key) or key_prefix(key)) + message_id.encode("utf-8")


def seen_position_key(key: str, position: int) -> bytes:
    return SEEN_POSITION + (_prefixes.get(key) or key_prefix(key)) + _SEQ.pack(position)


def encode_seen_id(seen: Seen) -> bytes:
    return _SEEN.pack(seen.position, seen.accepted_at, seen.source)


def decode_seen_id(raw: bytes) -> Seen:
    position, at, source = _SEEN.unpack(raw)
    return Seen(int(position), float(at), int(source))


#: Seen ids per page record (family ``g``). Larger pages mean fewer
#: records and a longer key state: the open page's ids, half a page on
#: average, ride in every key-state write.
PAGE_IDS = 8  # (at most 127: the key state counts the open page's ids in 7 bits)


class SeenPage(NamedTuple):
    """Where a key's seen ids' FIFO entries are, beside its window: positions
    below ``legacy_below`` in ``p`` records (state written before format 4:
    a key state of an older layout reads as all of its positions there);
    from ``first`` to the window's tail, ``size`` ids, kept in the key
    state (the open page, ``raw``: as the key state keeps them, so a step
    appends one id's bytes and nothing is decoded but to look one up);
    those between in ``g`` page records."""

    legacy_below: int = 0
    first: int = 0
    size: int = 0
    raw: bytes = b""

    @property
    def ids(self) -> tuple[str, ...]:
        return _read_ids(self.raw, 0, self.size)


def seen_page(legacy_below: int, first: int, ids: Sequence[str]) -> SeenPage:
    return SeenPage(legacy_below, first, len(ids), _ids(ids))


def seen_page_key(key: str, page: int) -> bytes:
    return SEEN_PAGE + (_prefixes.get(key) or key_prefix(key)) + _SEQ.pack(page)


def id_bytes(message_id: str) -> bytes:
    """A messageId after its length (one byte, or 255 and four)."""
    raw = message_id.encode("utf-8")
    n = len(raw)
    return (bytes((n,)) if n < 255 else b"\xff" + _LEN.pack(n)) + raw


def _ids(ids: Iterable[str]) -> bytes:
    return b"".join([id_bytes(mid) for mid in ids])


def _read_ids(raw: bytes, at: int, count: int) -> tuple[str, ...]:
    """``count`` ids from ``raw[at:]`` (:func:`_ids`)."""
    ids = []
    for _ in range(count):
        n = raw[at]
        at += 1
        if n == 255:
            (n,) = _LEN.unpack_from(raw, at)
            at += 4
        ids.append(raw[at : at + n].decode("utf-8"))
        at += n
    return tuple(ids)


_PAGE = struct.Struct(">QH")


def encode_seen_page(page: SeenPage) -> bytes:
    """The record of a page that filled: the first position it holds and
    its ids (``legacy_below`` stays with the key state)."""
    return _PAGE.pack(page.first, page.size) + page.raw


def decode_seen_page(raw: bytes) -> tuple[int, tuple[str, ...]]:
    first, count = _PAGE.unpack_from(raw)
    return int(first), _read_ids(raw, _PAGE.size, count)


def encode_seen_position(message_id: str, seen_at: float) -> bytes:
    return _TIME.pack(seen_at) + message_id.encode("utf-8")


def decode_seen_position(raw: bytes) -> tuple[str, float]:
    return raw[8:].decode("utf-8"), float(_TIME.unpack(raw[:8])[0])


#: The first byte of a packed message (never the first of a JSON text).
_PACKED = b"\x01"
_PACKED_HEAD = struct.Struct(">QBd")


def encode_message(message: Message, packed: bool = False) -> bytes:
    """A message as the buffer (and the processor's queue) keep it: its
    original bytes when they say all (no headers, the default shape),
    else packed: sequence, event time, messageId, type, headers, bytes."""
    if not packed and not message.headers:
        return message.value
    when = message.event_time
    parts = [
        _PACKED,
        _PACKED_HEAD.pack(message.seq, when is not None, 0.0 if when is None else when),
        _bytes(message.message_id.encode("utf-8")),
        _bytes(message.type.encode("utf-8")),
        _headers(message.headers),
        message.value,
    ]
    return b"".join(parts)


def decode_message(key: str, raw: bytes) -> Message:
    """What :func:`encode_message` wrote (its original bytes: parsed)."""
    if raw[:1] != _PACKED:
        return parse(key.encode("utf-8"), raw)
    seq, has_time, when = _PACKED_HEAD.unpack_from(raw, 1)
    read = _Reader(raw, 1 + _PACKED_HEAD.size)
    message_id, mtype = read.take().decode("utf-8"), read.take().decode("utf-8")
    headers = tuple(read.headers())
    return Message(
        key, message_id, int(seq), mtype, read.rest(), when if has_time else None, headers
    )


def forgotten_key(key: str) -> bytes:
    return FORGOTTEN + (_prefixes.get(key) or key_prefix(key))


#: The forgotten marker's layout (the family's whole encoding is here).
_FORGOTTEN = struct.Struct(">BQd")
_FORGOTTEN_VERSION = 1


def encode_forgotten(marker: Forgotten) -> bytes:
    return _FORGOTTEN.pack(_FORGOTTEN_VERSION, marker.next_expected, marker.forgotten_at)


def decode_forgotten(raw: bytes) -> Forgotten:
    version, nxt, at = _FORGOTTEN.unpack_from(raw)
    if version != _FORGOTTEN_VERSION:
        raise ValueError(f"unknown forgotten-key marker layout {version}")
    return Forgotten(int(nxt), float(at))


def processed_key(key: str) -> bytes:
    return PROCESSED + (_prefixes.get(key) or key_prefix(key))


def queued_key(key: str, seq: int) -> bytes:
    return QUEUED + (_prefixes.get(key) or key_prefix(key)) + _SEQ.pack(seq)


def outputs_prefix(key: str) -> bytes:
    return OUTPUTS + (_prefixes.get(key) or key_prefix(key))


def outputs_key(key: str, seq: int) -> bytes:
    return OUTPUTS + (_prefixes.get(key) or key_prefix(key)) + _SEQ.pack(seq)


def encode_processed(cursor: int, state: bytes) -> bytes:
    """The processor's record of a key: cursor, then the state's JSON."""
    return _SEQ.pack(cursor) + state


def decode_processed(raw: bytes | None) -> tuple[int, bytes | None]:
    """(cursor, state JSON); ``(0, None)`` for a key never processed."""
    if raw is None:
        return 0, None
    return int(_SEQ.unpack(raw[:8])[0]), raw[8:]


_GAP = struct.Struct(">QQ")


def encode_queued(item: Emission, packed: bool = False) -> bytes:
    """A released item waiting for the processor: ``m`` + the message as
    the buffer keeps it, or ``g`` + the range given up."""
    if isinstance(item, GapSkipped):
        return b"g" + _GAP.pack(item.first, item.last)
    return b"m" + encode_message(item, packed)


def decode_queued(key: str, raw: bytes) -> Emission:
    if raw[:1] == b"g":
        first, last = _GAP.unpack(raw[1:])
        return GapSkipped(key, int(first), int(last))
    return decode_message(key, raw[1:])


_LEN = struct.Struct(">I")
_COUNT = struct.Struct(">H")


def encode_outs(
    records: Sequence[tuple[str, bytes, bytes, Sequence[tuple[str, bytes | None]] | None]],
) -> bytes:
    """Output records (role, key, value, headers), length-prefixed."""
    parts = [_COUNT.pack(len(records))]
    for role, key, value, headers in records:
        parts += [_bytes(role.encode()), _bytes(key), _bytes(value), _headers(headers or ())]
    return b"".join(parts)


def decode_outs(
    raw: bytes,
) -> list[tuple[str, bytes, bytes, list[tuple[str, bytes | None]] | None]]:
    read = _Reader(raw, 0)
    out: list[tuple[str, bytes, bytes, list[tuple[str, bytes | None]] | None]] = []
    for _ in range(read.count()):
        role, key, value = read.take().decode(), read.take(), read.take()
        out.append((role, key, value, read.headers() or None))
    if read.rest():
        raise ValueError("trailing bytes after the output records")
    return out


def _bytes(b: bytes) -> bytes:
    return _LEN.pack(len(b)) + b


#: The length a null header value is written with (as Kafka writes -1).
_NULL = 0xFFFFFFFF


def _headers(headers: Iterable[tuple[str, bytes | None]]) -> bytes:
    """Headers, counted, each name and value length-prefixed (a null
    value: :data:`_NULL`, no bytes)."""
    pairs = list(headers)
    parts = [_COUNT.pack(len(pairs))]
    for name, h in pairs:
        value = _LEN.pack(_NULL) if h is None else _bytes(bytes(h))
        parts += [_bytes(name.encode("utf-8")), value]
    return b"".join(parts)


class _Reader:
    """Reads what :func:`_bytes`, :func:`_headers` and ``_COUNT`` wrote."""

    def __init__(self, raw: bytes, at: int) -> None:
        self.view = memoryview(raw)
        self.at = at

    def count(self) -> int:
        (n,) = _COUNT.unpack_from(self.view, self.at)
        self.at += 2
        return int(n)

    def take(self) -> bytes:
        (n,) = _LEN.unpack_from(self.view, self.at)
        self.at += 4 + n
        return bytes(self.view[self.at - n : self.at])

    def value(self) -> bytes | None:
        """What :func:`_headers` wrote for a header value."""
        (n,) = _LEN.unpack_from(self.view, self.at)
        if n == _NULL:
            self.at += 4
            return None
        return self.take()

    def headers(self) -> list[tuple[str, bytes | None]]:
        return [(self.take().decode("utf-8"), self.value()) for _ in range(self.count())]

    def rest(self) -> bytes:
        return bytes(self.view[self.at :])


def compact_json(doc: Any) -> bytes:
    """``orjson.dumps(doc)`` in a bytes object of its own size (the command
    worker's entities and receipts): orjson's result keeps a 4 KiB
    allocation however short it is, and the changelog queue holds every
    state written in an outbox cycle, so short values would each hold a
    mostly empty allocation until the cycle takes them."""
    return bytes(memoryview(orjson.dumps(doc)))


#: Key state layout: a version byte (JSON, the first layout, starts with
#: ``[``), which of the optional fields are absent, the fields, then the
#: skipped ranges. Written for every step, so it is packed, not JSON.
#: Version 3 added the seen window's ``oldest``, version 4 its ``ids``
#: filter (two 64-bit halves), version 5 (state format 4) the open page
#: after the skipped ranges (:class:`SeenPage`): the number of its ids (it
#: ends at the window's tail), with :data:`_LEGACY` set when
#: ``legacy_below`` (8 bytes) follows, then the ids. States written before
#: read with them unknown, and with every seen id in ``p`` records.
_STATE = struct.Struct(">BBQQdQQdQQQH")
_STATE_VERSION = 5
_STATE_LAYOUT_4 = 4
_LEGACY = 0x80
_STATE_LAYOUT_3 = struct.Struct(">BBQQdQQdQH")
_STATE_LAYOUT_2 = struct.Struct(">BBQQdQQQH")
_LOW = (1 << 64) - 1
_RANGE = struct.Struct(">QQ")
_NO_NEXT, _NO_GAP, _NO_CONFIRMED = 1, 2, 4


def encode_key_state(state: KeyState, window: SeenWindow, page: SeenPage | None = None) -> bytes:
    """A key's state and seen window, with its open page (``None``: every
    position of the window in ``p`` records, as an older layout reads)."""
    nxt, gap_since, confirmed = state.next_expected, state.gap_since, state.confirmed
    flags = (
        (_NO_NEXT if nxt is None else 0)
        | (_NO_GAP if gap_since is None else 0)
        | (_NO_CONFIRMED if confirmed is None else 0)
    )
    skipped, ids = state.skipped, window.ids
    raw = _STATE.pack(
        _STATE_VERSION,
        flags,
        nxt or 0,
        state.buffered,
        gap_since or 0.0,
        window.head,
        window.tail,
        window.oldest,
        ids >> 64,
        ids & _LOW,
        confirmed or 0,
        len(skipped),
    )
    if skipped:
        raw += b"".join([_RANGE.pack(a, b) for a, b in skipped])
    if page is None:
        page = SeenPage(window.tail, window.tail)
    count = page.size
    if page.first + count != window.tail:  # (not this window's: its ids are not believed)
        page, count = SeenPage(page.legacy_below, window.tail), 0
    if page.legacy_below:
        raw += bytes((count | _LEGACY,)) + _SEQ.pack(page.legacy_below)
    else:
        raw += bytes((count,))
    if count:
        raw += page.raw
    return raw


def decode_key_state(raw: bytes | None) -> tuple[KeyState, SeenWindow]:
    state, window, _ = decode_key_record(raw)
    return state, window


def decode_key_record(raw: bytes | None) -> tuple[KeyState, SeenWindow, SeenPage]:
    """A key state, its seen window and its open page (:class:`SeenPage`)."""
    if raw is None:
        return KeyState(), SeenWindow(), SeenPage()
    oldest, ids = UNKNOWN, ALL_IDS
    page: SeenPage | None = None
    if raw[0] == _STATE_VERSION or raw[0] == _STATE_LAYOUT_4:
        fields = _STATE.unpack_from(raw)
        _, flags, nxt, buffered, gap_since, head, tail, oldest, high, low, confirmed, n = fields
        ids = high << 64 | low
        start = _STATE.size
    elif raw[0] == 3:
        fields = _STATE_LAYOUT_3.unpack_from(raw)
        _, flags, nxt, buffered, gap_since, head, tail, oldest, confirmed, n = fields
        start = _STATE_LAYOUT_3.size
    elif raw[:1] == b"[":  # the first layout
        nxt, buffered, gap_since, skipped, head, tail, confirmed = orjson.loads(raw)
        ranges = tuple((a, b) for a, b in skipped)
        return (
            KeyState(nxt, buffered, gap_since, ranges, confirmed),
            SeenWindow(head, tail),
            SeenPage(tail, tail),
        )
    else:  # version 2
        fields = _STATE_LAYOUT_2.unpack_from(raw)
        _, flags, nxt, buffered, gap_since, head, tail, confirmed, n = fields
        start = _STATE_LAYOUT_2.size
    end = start + n * _RANGE.size
    ranges = tuple(_RANGE.iter_unpack(raw[start:end]))
    if raw[0] == _STATE_VERSION:
        count, legacy, at = raw[end], 0, end + 1
        if count & _LEGACY:
            count &= ~_LEGACY
            legacy = int(_SEQ.unpack_from(raw, at)[0])
            at += 8
        page = SeenPage(legacy, tail - count, count, raw[at:])  # (the page ends the state)
    nxt = None if flags & _NO_NEXT else nxt
    gap_since = None if flags & _NO_GAP else gap_since
    confirmed = None if flags & _NO_CONFIRMED else confirmed
    return (
        KeyState(nxt, buffered, gap_since, ranges, confirmed),
        SeenWindow(head, tail, oldest, ids),
        SeenPage(tail, tail) if page is None else page,
    )


def describe(store_key: bytes, value: bytes) -> tuple[str, str, str | None, str]:
    """A state table entry in words: (family, sequence key, item, value as
    JSON text), for audit snapshots and ``inspect``. The buffer's value is
    the original message's JSON text. The state format marker
    (:data:`state.base.FORMAT_MARKER`) is family ``state_format``, no key."""
    if store_key == FORMAT_MARKER:
        return "state_format", "", None, orjson.dumps(value.decode("ascii", "replace")).decode()
    family, key = store_key[:1], key_of(store_key)
    if family == KEY_STATE:
        state, window, page = decode_key_record(value)
        doc = {
            "next_expected": state.next_expected,
            "buffered": state.buffered,
            "gap_since": state.gap_since,
            "skipped": [list(r) for r in state.skipped],
            "confirmed": state.confirmed,
            "seen_head": window.head,
            "seen_tail": window.tail,
            "seen_oldest": window.oldest if window.oldest != UNKNOWN else None,
            "seen_legacy_below": page.legacy_below,
            "seen_page_first": page.first,
            "seen_page": list(page.ids),
        }
        return "key_state", key, None, orjson.dumps(doc).decode()
    if family == BUFFER:
        text = decode_message(key, value).value.decode("utf-8", "replace")
        return "buffer", key, str(buffer_seq(store_key)), text
    n = 5 + int.from_bytes(store_key[1:5], "big")
    if family == SEEN_ID:
        seen = decode_seen_id(value)
        doc = {"position": seen.position, "accepted_at": seen.accepted_at, "source": seen.source}
        return "seen_id", key, store_key[n:].decode("utf-8"), orjson.dumps(doc).decode()
    if family == SEEN_POSITION:
        mid, at = decode_seen_position(value)
        item = str(int(_SEQ.unpack(store_key[n:])[0]))
        return "seen_fifo", key, item, orjson.dumps({"message_id": mid, "seen_at": at}).decode()
    if family == SEEN_PAGE:
        first, ids = decode_seen_page(value)
        item = str(int(_SEQ.unpack(store_key[n:])[0]))
        return "seen_page", key, item, orjson.dumps({"first": first, "message_ids": ids}).decode()
    if family == PROCESSED:
        cursor, user_state = decode_processed(value)
        text = (user_state or b"null").decode("utf-8", "replace")
        return "processed", key, None, f'{{"cursor":{cursor},"state":{text}}}'
    if family == QUEUED:
        queued = decode_queued(key, value)
        return "queued", key, str(int(_SEQ.unpack(store_key[n:])[0])), queued.value.decode()
    if family == OUTPUTS:
        outs = [
            {
                "topic": role,
                "key": k.decode("utf-8", "replace"),
                "value": v.decode("utf-8", "replace"),
            }
            for role, k, v, _ in decode_outs(value)
        ]
        return "outputs", key, str(int(_SEQ.unpack(store_key[n:])[0])), orjson.dumps(outs).decode()
    if family == FORGOTTEN:
        marker = decode_forgotten(value)
        doc = {"next_expected": marker.next_expected, "forgotten_at": marker.forgotten_at}
        return "forgotten", key, None, orjson.dumps(doc).decode()
    raise ValueError(f"unknown state family {family!r}")
