"""Encryption at rest: marked fields round-trip, never stay in clear, are
deterministic per record (reruns identical) and refuse a wrong key."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.spark_sink.crypto import (
    FIELDS_ENV,
    KEY_ENV,
    AuditKeyError,
    Sealer,
    is_sealed,
    new_key,
)

KEY = b"k" * 32
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
names = st.sampled_from(["email", "name", "card", "number", "x"])
docs = st.dictionaries(
    names, json_values | st.dictionaries(names, json_values, max_size=3), max_size=5
)
paths = st.lists(st.sampled_from(["email", "name", "card.number", "card.x", "x.email"]), max_size=4)


def leaf(doc: object, path: str) -> object:
    node = doc
    for p in path.split("."):
        if not isinstance(node, dict) or p not in node:
            return KeyError
        node = node[p]
    return node


@given(docs, paths, st.text(max_size=10))
def test_marked_fields_round_trip_and_are_not_in_clear(doc, marked, context) -> None:
    sealer = Sealer(KEY, tuple(marked))
    sealed = sealer.seal_fields(doc, context)
    assert sealer.seal_fields(doc, context) == sealed  # deterministic
    assert sealer.open_fields(sealed, context) == doc
    for path in marked:
        original = leaf(doc, path)
        if original is not KeyError:
            assert is_sealed(leaf(sealed, path)), path
    unmarked = [k for k in doc if k not in {p.split(".")[0] for p in marked}]
    assert all(sealed[k] == doc[k] for k in unmarked)


@given(st.binary(max_size=200), st.text(max_size=10))
def test_values_round_trip(value, context) -> None:
    sealer = Sealer(KEY)
    token = sealer.seal_bytes(value, context)
    assert token is not None and is_sealed(token)
    assert sealer.open_bytes(token, context) == value


def test_context_binds_the_ciphertext_to_its_record() -> None:
    sealer = Sealer(KEY, ("email",))
    a = sealer.seal_fields({"email": "a@b"}, "t:0:1")["email"]
    b = sealer.seal_fields({"email": "a@b"}, "t:0:2")["email"]
    assert a != b  # no equality leak across records
    with pytest.raises(AuditKeyError, match="wrong"):
        sealer.open_fields({"email": a}, "t:0:2")  # moved to another record
    with pytest.raises(AuditKeyError, match="wrong"):
        Sealer(b"o" * 32).open_fields({"email": a}, "t:0:1")


def test_message_text_seals_data_and_payload_only() -> None:
    sealer = Sealer(KEY, ("email",))
    text = orjson.dumps({"messageId": "m", "data": {"email": "a@b", "n": 1}}).decode()
    sealed = orjson.loads(sealer.seal_message(text, "c") or "")
    assert sealed["messageId"] == "m" and sealed["data"]["n"] == 1
    assert "a@b" not in orjson.dumps(sealed).decode()
    assert sealer.open_fields(sealed["data"], "c:data") == {"email": "a@b", "n": 1}


def test_environment(monkeypatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(FIELDS_ENV, raising=False)
    assert Sealer.from_env() is None
    monkeypatch.setenv(FIELDS_ENV, "email")
    with pytest.raises(AuditKeyError, match="SEQKEEPER_AUDIT_KEY is unset"):
        Sealer.from_env()
    monkeypatch.setenv(KEY_ENV, "c2hvcnQ=")
    with pytest.raises(AuditKeyError, match="32 bytes"):
        Sealer.from_env()
    monkeypatch.setenv(KEY_ENV, new_key())
    sealer = Sealer.from_env()
    assert sealer is not None and sealer.fields == ("email",) and len(sealer.key_id) == 16
