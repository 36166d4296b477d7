import struct
from collections.abc import Callable

import orjson
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.deduplicator import ALL_IDS, UNKNOWN, Seen, SeenWindow
from seqkeeper.processors.resequencer import KeyState
from seqkeeper.state import codecs
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import ReorderBuffer


@given(st.text(), st.text(), st.text(), st.text())
def test_seen_keys_are_distinct_per_key_and_id(k1: str, m1: str, k2: str, m2: str) -> None:
    assert (codecs.seen_id_key(k1, m1) == codecs.seen_id_key(k2, m2)) == ((k1, m1) == (k2, m2))


@given(st.text(), st.integers(0, 2**63), st.integers(0, 2**63))
def test_buffer_keys_sort_by_sequence_within_a_key(key: str, a: int, b: int) -> None:
    ka, kb = codecs.buffer_key(key, a), codecs.buffer_key(key, b)
    assert ka.startswith(codecs.buffer_prefix(key)) and codecs.key_of(ka) == key
    assert codecs.buffer_seq(ka) == a
    assert (ka < kb) == (a < b)


@given(
    st.builds(
        KeyState,
        st.none() | st.integers(1, 2**63),  # (one past the largest sequence)
        st.integers(0, 10**6),
        st.none() | st.floats(0, 1e10),
        st.lists(st.tuples(st.integers(1, 2**63 - 1), st.integers(1, 2**63 - 1)), max_size=4).map(
            tuple
        ),
        st.none() | st.integers(1, 2**63),
    ),
    st.builds(
        SeenWindow,
        st.integers(0, 2**62),
        st.integers(0, 2**62),
        st.floats(allow_nan=False) | st.just(UNKNOWN),
        st.integers(0, ALL_IDS),
    ),
)
def test_key_state_round_trips(state: KeyState, window: SeenWindow) -> None:
    assert codecs.decode_key_state(codecs.encode_key_state(state, window)) == (state, window)
    # states written in the earlier layouts still read, with what they lack unknown
    flags = (
        (1 if state.next_expected is None else 0)
        | (2 if state.gap_since is None else 0)
        | (4 if state.confirmed is None else 0)
    )
    head = (state.next_expected or 0, state.buffered, state.gap_since or 0.0)
    tail = (state.confirmed or 0, len(state.skipped))
    ranges = b"".join(struct.pack(">QQ", a, b) for a, b in state.skipped)
    window_3 = (window.head, window.tail, window.oldest)
    version_3 = struct.pack(">BBQQdQQdQH", 3, flags, *head, *window_3, *tail) + ranges
    assert codecs.decode_key_state(version_3) == (state, SeenWindow(*window_3, ALL_IDS))
    unknown = SeenWindow(window.head, window.tail)
    assert unknown.oldest == UNKNOWN and unknown.ids == ALL_IDS
    version_2 = struct.pack(">BBQQdQQQH", 2, flags, *head, window.head, window.tail, *tail) + ranges
    assert codecs.decode_key_state(version_2) == (state, unknown)
    legacy = orjson.dumps(
        [
            state.next_expected,
            state.buffered,
            state.gap_since,
            state.skipped,
            window.head,
            window.tail,
            state.confirmed,
        ]
    )
    assert codecs.decode_key_state(legacy) == (state, unknown)


ids = st.lists(st.text(max_size=3) | st.text(min_size=250, max_size=300), max_size=7)


@given(st.integers(0, 2**62), st.integers(0, 2**62), ids, st.booleans())
def test_the_open_page_rides_in_the_key_state(
    head: int, legacy: int, page_ids: list[str], fresh: bool
) -> None:
    tail = head + len(page_ids) + 3
    legacy = 0 if fresh else min(legacy, tail)
    page = codecs.seen_page(legacy, tail - len(page_ids), tuple(page_ids))
    window = SeenWindow(head, tail)
    raw = codecs.encode_key_state(KeyState(4), window, page)
    assert codecs.decode_key_record(raw) == (KeyState(4), window, page)
    assert orjson.loads(codecs.describe(codecs.key_state_key("k"), raw)[3])["seen_page"] == page_ids
    # the layout before pages: every position of its window in p records
    version_4 = bytes((4,)) + raw[1 : 1 + struct.calcsize(">BBQQdQQdQQQH") - 1]
    assert codecs.decode_key_record(version_4)[2] == codecs.SeenPage(tail, tail)
    # a page that does not end at the window's tail is not believed
    off = codecs.encode_key_state(KeyState(4), SeenWindow(head, tail + 1), page)
    assert codecs.decode_key_record(off)[2] == codecs.SeenPage(legacy, tail + 1)


@given(st.text(), st.integers(0, 2**40), st.integers(0, 2**62), ids)
def test_a_page_record_round_trips(key: str, index: int, first: int, page_ids: list[str]) -> None:
    raw = codecs.encode_seen_page(codecs.seen_page(0, first, page_ids))
    assert codecs.decode_seen_page(raw) == (first, tuple(page_ids))
    family, subject, item, text = codecs.describe(codecs.seen_page_key(key, index), raw)
    assert (family, subject, item) == ("seen_page", key, str(index))
    assert orjson.loads(text) == {"first": first, "message_ids": page_ids}


@given(st.text(), st.floats(allow_nan=False))
def test_seen_position_round_trips(mid: str, t: float) -> None:
    assert codecs.decode_seen_position(codecs.encode_seen_position(mid, t)) == (mid, t)


@given(st.integers(0, 2**63), st.floats(allow_nan=False), st.integers(-1, 2**62))
def test_seen_id_round_trips(position: int, t: float, source: int) -> None:
    seen = Seen(position, t, source)
    assert codecs.decode_seen_id(codecs.encode_seen_id(seen)) == seen


@given(st.text(), st.text())
def test_families_never_collide(k1: str, k2: str) -> None:
    keys = {
        codecs.key_state_key(k1),
        codecs.buffer_key(k1, 1),
        codecs.seen_id_key(k2, "x"),
        codecs.seen_position_key(k2, 1),
    }
    assert len(keys) == 4
    assert all(codecs.key_of(k) in (k1, k2) for k in keys)


def buffer_of_k(seqs: set[int]) -> ReorderBuffer:
    """Key ``k``'s buffer holding ``seqs``, beside other keys' entries."""
    store = MemoryStore()
    for s in seqs:
        store.put(0, codecs.buffer_key("k", s), b"{}")
        store.put(0, codecs.buffer_key("k2", s), b"{}")  # another key, same partition
    store.put(0, codecs.buffer_key("j", 1), b"{}")
    store.put(0, codecs.buffer_key("j", 500), b"{}")
    return ReorderBuffer(store, 0, "k")


@given(st.sets(st.integers(1, 200)), st.integers(0, 210))
def test_first_after_seeks_within_the_key(seqs: set[int], after: int) -> None:
    expected = min((s for s in seqs if s > after), default=None)
    assert buffer_of_k(seqs).first_after(after) == expected


def _held(encode: Callable[[], bytes]) -> tuple[bytes, int]:
    """One of 1,000 results of ``encode``, and the memory all of them hold."""
    import tracemalloc

    tracemalloc.start()
    try:
        held = [encode() for _ in range(1000)]
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held[0], size


def test_encoded_states_hold_no_more_memory_than_their_size() -> None:
    """orjson's own result keeps a 4 KiB allocation; the changelog queue
    holds thousands of encoded states per outbox cycle (the restart bench's
    worker peaked at 639 MB with them). Key states are packed; the command
    worker's entities and receipts go through ``compact_json``."""
    state, window = KeyState(7, 1, 2.5, ((3, 4),), 5), SeenWindow(1, 9, 2.0)
    first, size = _held(lambda: codecs.encode_key_state(state, window))
    assert codecs.decode_key_state(first) == (state, window)
    assert size < 1000 * 200  # ~100 bytes each, not 4 KiB
    doc = [7, 1, 2.5, [[3, 4]], 1, 9, 5]
    first, size = _held(lambda: codecs.compact_json(doc))
    assert first == orjson.dumps(doc)
    assert size < 1000 * 200


# -- the ordered processor's families -------------------------------------------

_records = st.lists(
    st.tuples(
        st.sampled_from(["processed", "dlq"]),
        st.binary(max_size=8),
        st.binary(max_size=16),
        st.none()
        | st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), min_size=1, max_size=3),
    ),
    max_size=4,
)


@given(_records)
def test_stored_outputs_round_trip(records: list) -> None:  # type: ignore[type-arg]
    assert codecs.decode_outs(codecs.encode_outs(records)) == records


@given(st.integers(0, 2**63 - 1), st.binary(max_size=20))
def test_the_processor_record_round_trips(cursor: int, state: bytes) -> None:
    assert codecs.decode_processed(codecs.encode_processed(cursor, state)) == (cursor, state)
    assert codecs.decode_processed(None) == (0, None)


def test_queued_items_round_trip_and_are_described() -> None:
    from seqkeeper.processors.envelope import parse
    from seqkeeper.processors.resequencer import GapSkipped

    message = parse(b"k", b'{"messageId":"m1","seq":1,"type":"t"}')
    for item in (message, GapSkipped("k", 2, 5)):
        raw = codecs.encode_queued(item)
        assert codecs.decode_queued("k", raw) == item
        family, key, _, _ = codecs.describe(codecs.queued_key("k", 1), raw)
        assert (family, key) == ("queued", "k")
    assert codecs.describe(codecs.processed_key("k"), codecs.encode_processed(3, b"[1]"))[3] == (
        '{"cursor":3,"state":[1]}'
    )


@given(
    st.integers(1, 2**63 - 1),
    st.text(max_size=6),
    st.text(max_size=6),
    st.binary(max_size=20),
    st.none() | st.floats(0, 1e10),
    st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=3),
    st.booleans(),
)
def test_a_buffered_message_round_trips_with_its_headers(
    seq: int,
    mid: str,
    mtype: str,
    value: bytes,
    when: float | None,
    headers: list,
    packed: bool,  # type: ignore[type-arg]
) -> None:
    from seqkeeper.processors.envelope import Message

    if not packed and not headers:  # kept as its bytes: parsed again when read
        value = orjson.dumps({"messageId": mid or "m", "seq": seq, "type": mtype})
        mid, when = mid or "m", None
    message = Message("k", mid, seq, mtype, value, when, tuple(headers))
    raw = codecs.encode_message(message, packed)
    assert codecs.decode_message("k", raw) == message
    assert (raw == value) == (not packed and not headers)


@given(st.text(), st.integers(0, 2**64 - 1), st.floats(allow_nan=False))
def test_a_forgotten_keys_marker_round_trips_and_is_described(
    key: str, nxt: int, at: float
) -> None:
    from seqkeeper.processors.key_retention import Forgotten

    marker = Forgotten(nxt, at)
    raw = codecs.encode_forgotten(marker)
    assert codecs.decode_forgotten(raw) == marker
    family, subject, item, text = codecs.describe(codecs.forgotten_key(key), raw)
    assert (family, subject, item) == ("forgotten", key, None)
    assert orjson.loads(text)["next_expected"] == nxt
    # its own family: no other family's prefix of the key reads it
    assert codecs.forgotten_key(key)[:1] not in {
        codecs.KEY_STATE,
        codecs.BUFFER,
        codecs.SEEN_ID,
        codecs.SEEN_POSITION,
        codecs.SEEN_PAGE,
        codecs.PROCESSED,
        codecs.QUEUED,
        codecs.OUTPUTS,
    }
