from hypothesis import given
from hypothesis import strategies as st

from state import codecs


@given(st.text(), st.text(), st.text(), st.text())
def test_seen_keys_are_distinct_per_key_and_id(k1: str, m1: str, k2: str, m2: str) -> None:
    assert (codecs.seen_key(k1, m1) == codecs.seen_key(k2, m2)) == ((k1, m1) == (k2, m2))


@given(st.text(), st.integers(0, 2**63), st.integers(0, 2**63))
def test_buffer_keys_sort_by_sequence_within_a_key(key: str, a: int, b: int) -> None:
    ka, kb = codecs.buffer_key(key, a), codecs.buffer_key(key, b)
    assert ka.startswith(codecs.key_prefix(key))
    assert (ka < kb) == (a < b)


@given(st.integers(0, 2**64 - 1), st.floats(allow_nan=False))
def test_round_trips(seq: int, t: float) -> None:
    assert codecs.decode_seq(codecs.encode_seq(seq)) == seq
    assert codecs.decode_time(codecs.encode_time(t)) == t
