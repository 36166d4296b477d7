"""Per-stream keys and retention, without Kafka or Spark: a stream's values
round-trip through its own key, a forgotten key never opens anything again
(not even after the stream gets a new key) and leaves no trace of itself
under the warehouse, a rotation rewraps the keys without the data, and the
retention horizon of each category is what the policy says."""

from __future__ import annotations

import tempfile
from datetime import date, timedelta
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.processors.audit_retention import OTHERS, AuditRetention
from seqkeeper.settings import SettingError, SparkSettings
from seqkeeper.spark_sink.crypto import (
    ERASED,
    PREFIX_STREAM,
    AuditKeyError,
    Sealer,
    StreamKeys,
    fingerprint,
    is_sealed,
)
from tests.spark_sink.test_crypto import docs, paths

KEK, NEW_KEK = b"k" * 32, b"n" * 32
streams = st.text(min_size=1, max_size=12)
contexts = st.text(max_size=10)


def tokens(node: object) -> list[str]:
    if isinstance(node, dict):
        return [t for v in node.values() for t in tokens(v)]
    return [node] if isinstance(node, str) and is_sealed(node) else []


def erased_at(sealed: object, doc: object) -> object:
    """``doc`` with each value that is a token in ``sealed`` as ERASED."""
    if isinstance(sealed, dict) and isinstance(doc, dict):
        return {k: erased_at(sealed[k], doc[k]) for k in doc}
    return ERASED if isinstance(sealed, str) and is_sealed(sealed) else doc


def every_file_bytes(root: Path) -> bytes:
    return b"\0".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


@settings(max_examples=60, deadline=None)
@given(docs, paths, contexts, streams, st.binary(max_size=100))
def test_a_streams_values_open_with_its_key_only(doc, marked, ctx, stream, raw) -> None:
    with tempfile.TemporaryDirectory() as d:
        kek = Sealer(KEK, tuple(marked))
        keys = StreamKeys(Path(d), kek)
        own = keys.ensure(stream)
        sealed = own.seal_fields(doc, ctx)
        value = own.seal_bytes(raw, ctx)
        assert value is not None and value.startswith(PREFIX_STREAM.encode())
        # every token names the stream's key, never the audit key
        for t in tokens(sealed):
            assert t.startswith(f"{PREFIX_STREAM}{fingerprint(own.key)[:8]}:")
        # a reader with the audit key unwraps the stream's key and opens all
        reader = StreamKeys(Path(d), Sealer(KEK))
        assert kek.open_fields(sealed, ctx, reader.load(stream)) == doc
        assert kek.open_bytes(value, ctx, reader.load(stream)) == raw
        # the same stream asked again: the same key (reruns seal alike)
        assert keys.ensure(stream).key == own.key
        # another stream's key opens none of it
        other = keys.ensure(stream + "x")
        assert other.key != own.key
        assert kek.open_fields(sealed, ctx, other) == erased_at(sealed, doc)


@settings(max_examples=60, deadline=None)
@given(docs, paths, contexts, streams)
def test_a_forgotten_key_never_opens_again(doc, marked, ctx, stream) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        kek = Sealer(KEK, tuple(marked))
        keys = StreamKeys(root, kek)
        old = keys.ensure(stream)
        keys.ensure(stream + "-other")
        sealed = old.seal_fields(doc, ctx)
        wrapped = orjson.loads(keys.path(stream).read_bytes())["wrapped"].encode()
        assert wrapped in every_file_bytes(root)
        assert StreamKeys(root).forget(stream)  # (no audit key needed)
        assert not StreamKeys(root).forget(stream)  # once
        # nothing under the warehouse holds the key any more, wrapped or not
        left = every_file_bytes(root)
        assert wrapped not in left and old.key not in left
        reader = StreamKeys(root, Sealer(KEK))
        assert reader.load(stream) is None
        assert kek.open_fields(sealed, ctx, reader.load(stream)) == erased_at(sealed, doc)
        # a later message of the stream gets a new key, which opens only it
        new = keys.ensure(stream)
        assert new.key != old.key
        reader = StreamKeys(root, Sealer(KEK))
        assert reader.load(stream) is not None
        assert kek.open_fields(sealed, ctx, reader.load(stream)) == erased_at(sealed, doc)
        assert kek.open_fields(new.seal_fields(doc, ctx), ctx, reader.load(stream)) == doc
        assert reader.load(stream + "-other") is not None  # the others stay


def test_rotation_rewraps_the_keys_and_skips_the_forgotten(tmp_path: Path) -> None:
    old = Sealer(KEK, ("email",))
    keys = StreamKeys(tmp_path, old)
    sealed = {s: keys.ensure(s).seal_fields({"email": s}, "c") for s in ("a-1", "a-2", "a-3")}
    keys.forget("a-2")
    rotated = Sealer(NEW_KEK, ("email",), (KEK,))
    assert StreamKeys(tmp_path, rotated).rewrap() == (2, {}, "")
    assert StreamKeys(tmp_path, rotated).rewrap() == (0, {}, "")  # done
    # the old audit key is no longer needed; no data was touched
    new_only = Sealer(NEW_KEK, ("email",))
    reader = StreamKeys(tmp_path, new_only)
    assert new_only.open_fields(sealed["a-1"], "c", reader.load("a-1")) == {"email": "a-1"}
    assert new_only.open_fields(sealed["a-2"], "c", reader.load("a-2")) == {"email": ERASED}
    with pytest.raises(AuditKeyError):  # the old key alone no longer unwraps them
        StreamKeys(tmp_path, Sealer(KEK)).load("a-3")
    # a key without the audit key that wrapped it: left, counted by key id
    assert StreamKeys(tmp_path, Sealer(b"z" * 32)).rewrap()[1] == {fingerprint(NEW_KEK)[:8]: 2}


def test_a_key_file_moved_to_another_stream_does_not_open(tmp_path: Path) -> None:
    keys = StreamKeys(tmp_path, Sealer(KEK))
    keys.ensure("a-1")
    target = keys.path("a-2")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(keys.path("a-1").read_bytes())
    with pytest.raises(AuditKeyError):
        StreamKeys(tmp_path, Sealer(KEK)).load("a-2")


def test_a_warehouse_copied_without_its_keys_is_an_error_not_an_erasure(tmp_path: Path) -> None:
    with pytest.raises(AuditKeyError, match="keys"):
        StreamKeys(tmp_path / "copy", Sealer(KEK)).load("a-1")


# -- retention ------------------------------------------------------------------

categories = st.sampled_from(["orders", "payments", "audit_x", "c1"])
retentions = st.one_of(st.none(), st.integers(1, 4000))
days = st.dates(date(2000, 1, 1), date(2040, 1, 1))


def policy_text(named: dict[str, int | None]) -> str:
    return ",".join(f"{c}={'inf' if n is None else f'{n}d'}" for c, n in named.items())


@given(st.dictionaries(st.sampled_from(["orders", "payments", OTHERS]), retentions), categories)
def test_each_category_takes_its_own_or_the_default(named, category) -> None:
    policy = AuditRetention.parse(policy_text(named))
    expected = named.get(category, named.get(OTHERS))
    assert policy.of(category) == expected
    assert AuditRetention.parse(str(policy)) == policy  # (as a worker's environment)


@given(categories, retentions, days, st.integers(-3, 3) | st.integers(-5000, 5000))
def test_a_row_goes_only_once_its_day_is_past_the_horizon(category, n, today, off) -> None:
    # days around the horizon most of all (off: how far past it, in days)
    day = today - timedelta(days=(n or 0) + off)
    policy = AuditRetention.parse(policy_text({category: n}))
    age = (today - day).days
    assert policy.expired(category, day, today) == (n is not None and age > n)
    assert not AuditRetention.parse("").expired(category, day, today)  # default: kept
    assert not policy.expired(category + "2", day, today)  # another category: no '*'


@given(st.integers(1, 50), st.sampled_from(["d", "w", "y"]))
def test_units(n, unit) -> None:
    days_of = {"d": 1, "w": 7, "y": 365}[unit]
    assert AuditRetention.parse(f"orders={n}{unit}").of("orders") == n * days_of
    # a topic's name is read as its category ('-' becomes '_')
    assert AuditRetention.parse(f"my-orders={n}{unit}").of("my_orders") == n * days_of


@pytest.mark.parametrize(
    "text",
    ["orders", "orders=", "orders=90", "orders=90x", "orders=-1d", "orders=0d", "=9d",
     "orders=9d,orders=10d", "orders=1.5y", "orders=infinite", "orders=9d,,", "a b=9d"],
)  # fmt: skip
def test_a_bad_policy_is_refused_in_one_line(text, monkeypatch) -> None:
    with pytest.raises(ValueError):
        AuditRetention.parse(text)
    monkeypatch.setenv("SEQKEEPER_AUDIT_RETENTION", text)
    with pytest.raises(SettingError) as e:
        SparkSettings()
    assert "SEQKEEPER_AUDIT_RETENTION" in str(e.value) and "\n" not in str(e.value)


def test_the_horizon_is_a_whole_day() -> None:
    policy = AuditRetention.parse("orders=90d,*=7y")
    today = date(2026, 11, 29)
    assert policy.horizon("orders", today) == today - timedelta(days=90)
    assert policy.horizon("other", today) == today - timedelta(days=7 * 365)
    assert not policy.expired("orders", today - timedelta(days=90), today)
    assert policy.expired("orders", today - timedelta(days=91), today)
