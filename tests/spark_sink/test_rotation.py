"""Key rotation: new data is sealed with the new key, old data opens with
the old key listed as decrypt-only, a reseal moves everything to the new
key (the bytes a fresh compaction would write), and without the key a
value needs the error says which; keys come from files; no key ever
reaches an error message or a repr."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.settings import SettingError
from seqkeeper.spark_sink.crypto import (
    DECRYPT_ENV,
    DECRYPT_FILE_ENV,
    FIELDS_ENV,
    KEY_ENV,
    KEY_FILE_ENV,
    PREFIX,
    PREFIX_V1,
    AuditKeyError,
    Sealer,
    fingerprint,
    is_sealed,
    new_key,
)
from seqkeeper.spark_sink.reseal import ResealReport, reseal_file, reseal_warehouse, sealed_files
from seqkeeper.spark_sink.store import MessageStore
from tests.spark_sink import small_store
from tests.spark_sink.test_crypto import docs, paths

OLD, NEW, OTHER = b"o" * 32, b"n" * 32, b"x" * 32
FIELDS = ("email", "card.number")
contexts = st.text(max_size=10)


def as_v1(token: str) -> str:
    """The same ciphertext in the form before key ids (``enc:v1:<base64>``)."""
    assert token.startswith(PREFIX)
    return PREFIX_V1 + token.split(":", 3)[3]


def to_v1(node: object) -> object:
    if isinstance(node, dict):
        return {k: to_v1(v) for k, v in node.items()}
    return as_v1(node) if isinstance(node, str) and is_sealed(node) else node


def tokens(node: object) -> list[str]:
    if isinstance(node, dict):
        return [t for v in node.values() for t in tokens(v)]
    return [node] if isinstance(node, str) and is_sealed(node) else []


# -- the sealer ----------------------------------------------------------------


@given(docs, paths, contexts, st.booleans())
def test_old_data_opens_with_the_old_key_listed_as_decrypt_only(doc, marked, ctx, v1) -> None:
    old = Sealer(OLD, tuple(marked))
    sealed = old.seal_fields(doc, ctx)
    if v1:  # written before tokens named their key
        sealed = to_v1(sealed)
    rotated = Sealer(NEW, tuple(marked), (OLD,))
    assert rotated.open_fields(sealed, ctx) == doc
    # new data: sealed with the new key only, deterministically
    fresh = rotated.seal_fields(doc, ctx)
    assert fresh == Sealer(NEW, tuple(marked)).seal_fields(doc, ctx)
    assert all(t.startswith(f"{PREFIX}{fingerprint(NEW)[:8]}:") for t in tokens(fresh))
    assert Sealer(NEW, tuple(marked)).open_fields(fresh, ctx) == doc


@given(st.binary(max_size=200), contexts, st.booleans())
def test_reseal_moves_a_value_to_the_new_key(value, ctx, v1) -> None:
    token = Sealer(OLD).seal(value, ctx.encode())
    token = as_v1(token) if v1 else token
    rotated = Sealer(NEW, (), (OLD,))
    moved = rotated.reseal(token, ctx.encode())
    assert moved == Sealer(NEW).seal(value, ctx.encode())  # as a fresh compaction writes it
    assert rotated.reseal(moved, ctx.encode()) == moved  # once moved, left alone
    assert Sealer(NEW).open(moved, ctx.encode()) == value  # the old key is no longer needed
    assert rotated.sealed_under(token, ctx.encode()) == fingerprint(OLD)
    assert rotated.sealed_under(moved, ctx.encode()) == fingerprint(NEW)


def test_without_the_needed_key_the_error_names_it() -> None:
    token = Sealer(OLD).seal(b"secret", b"c")
    with pytest.raises(AuditKeyError) as caught:
        Sealer(NEW).open(token, b"c")
    message = str(caught.value)
    assert fingerprint(OLD)[:8] in message and DECRYPT_ENV in message and "wrong key" in message
    with pytest.raises(AuditKeyError, match=f"wrong key.*{DECRYPT_ENV}"):
        Sealer(NEW, (), (OTHER,)).open(as_v1(token), b"c")
    with pytest.raises(AuditKeyError, match="wrong record"):  # the right key, another record
        Sealer(NEW, (), (OLD,)).open(token, b"d")
    assert Sealer(NEW).sealed_under(token, b"c") is None


def test_the_current_key_is_never_decrypt_only_and_keys_are_kept_once() -> None:
    sealer = Sealer(NEW, (), (OLD, NEW, OLD))
    assert sealer.decrypt_keys == (OLD,)
    assert sealer.decrypt_key_ids == (fingerprint(OLD),)


# -- the environment -----------------------------------------------------------


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (KEY_ENV, KEY_FILE_ENV, DECRYPT_ENV, DECRYPT_FILE_ENV, FIELDS_ENV):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def b64(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def test_keys_come_from_files(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key_file, olds_file = tmp_path / "key", tmp_path / "olds"
    key_file.write_text(f"  {b64(NEW)}\n\n")  # a mounted secret's trailing newline
    olds_file.write_text(f"{b64(OLD)}\n{b64(OTHER)}\n")
    env.setenv(KEY_FILE_ENV, str(key_file))
    env.setenv(DECRYPT_FILE_ENV, str(olds_file))
    sealer = Sealer.from_env()
    assert sealer is not None
    assert sealer.key == NEW and sealer.decrypt_keys == (OLD, OTHER)
    env.delenv(DECRYPT_FILE_ENV)
    env.setenv(DECRYPT_ENV, f"{b64(OLD)}, {b64(OTHER)}")
    sealer = Sealer.from_env()
    assert sealer is not None and sealer.decrypt_keys == (OLD, OTHER)


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ({KEY_ENV: b64(NEW), KEY_FILE_ENV: "{dir}/key"}, f"both {KEY_ENV} and {KEY_FILE_ENV}"),
        ({KEY_FILE_ENV: "{dir}/missing"}, f"{KEY_FILE_ENV}='{{dir}}/missing': cannot read it"),
        ({KEY_FILE_ENV: "{dir}/empty"}, "the file is empty"),
        ({KEY_FILE_ENV: "{dir}/bad"}, f"{KEY_FILE_ENV} must decode to 32 bytes"),
        (
            {KEY_ENV: b64(NEW), DECRYPT_ENV: b64(OLD), DECRYPT_FILE_ENV: "{dir}/key"},
            f"both {DECRYPT_ENV} and {DECRYPT_FILE_ENV}",
        ),
        ({KEY_ENV: b64(NEW), DECRYPT_ENV: f"{b64(OLD)},{b64(OLD)[:-4]}é"}, f"{DECRYPT_ENV}, key 2"),
        ({DECRYPT_ENV: b64(OLD)}, f"{DECRYPT_ENV} lists old keys but {KEY_ENV} is unset"),
    ],
)
def test_key_errors_name_the_variable_and_never_a_key(
    env: pytest.MonkeyPatch, tmp_path: Path, setup: dict[str, str], expected: str
) -> None:
    (tmp_path / "key").write_text(b64(NEW))
    (tmp_path / "empty").write_text(" \n")
    (tmp_path / "bad").write_text(b64(OLD)[:-4] + "\n")
    for name, text in setup.items():
        env.setenv(name, text.format(dir=tmp_path))
    with pytest.raises(AuditKeyError) as caught:
        Sealer.from_env()
    message = str(caught.value)
    assert expected.format(dir=tmp_path) in message
    assert "\n" not in message
    for key in (NEW, OLD):  # neither a key nor a part of one
        assert b64(key)[:12] not in message and b64(key)[-12:] not in message


def test_a_secret_setting_is_never_echoed() -> None:
    from dataclasses import replace

    from seqkeeper.settings import VARS

    key = new_key()

    def refuse(text: str) -> str:
        raise ValueError("expected something else")

    # a secret's parser that refuses: the error names the variable, not the value
    strict = replace(VARS["audit_decrypt_keys"], parse=refuse)
    with pytest.raises(SettingError) as caught:
        strict.read({DECRYPT_ENV: key})
    assert str(caught.value) == f"{DECRYPT_ENV}=***: expected something else"
    assert VARS["audit_key_file"].shown("/run/k") == f"{KEY_FILE_ENV}='/run/k'"
    # nor does a sealer's repr (in a traceback, a log line, a Spark error)
    sealer = Sealer(base64.urlsafe_b64decode(key), FIELDS, (OLD,))
    for text in (repr(sealer), str(sealer)):
        assert key not in text and repr(OLD) not in text and repr(sealer.key) not in text


# -- a store ---------------------------------------------------------------------


def read_all(warehouse: Path, sealer: Sealer) -> list[tuple[object, bytes | None]]:
    """Every audit message's data and opened value, in global order."""
    store = MessageStore(warehouse, sealer)
    messages = store.category(small_store.CATEGORY, batch_size=None)
    return [
        (
            m.data,
            sealer.open_bytes(value, small_store.coordinates(m.topic, m.partition, m.offset)),
        )
        for m, value in zip(messages, raw_values(warehouse), strict=True)
    ]


def raw_values(warehouse: Path) -> list[bytes | None]:
    import pyarrow.dataset as ds

    table = ds.dataset(
        [str(p) for p in sealed_files(warehouse) if "audit" in p.parts], format="parquet"
    ).to_table(columns=["global_position", "value"])
    return table.sort_by("global_position")["value"].to_pylist()


def expected(runs: int, per_run: int = 6) -> list[tuple[object, bytes]]:
    return [(small_store.doc(i), small_store.value(i)) for i in range(runs * per_run)]


def test_reseal_moves_a_store_to_the_new_key(tmp_path: Path) -> None:
    """Run 1 under the old key as v1 tokens' key, run 2 under the old key,
    run 3 under the new one: after the pass, the new key alone opens all."""
    warehouse = tmp_path / "w"
    old, new = Sealer(OLD, FIELDS), Sealer(NEW, FIELDS)
    small_store.build(warehouse, [old, old, new], snapshot_sealer=old)
    rotated = Sealer(NEW, FIELDS, (OLD,))
    assert read_all(warehouse, rotated) == expected(3)
    with pytest.raises(AuditKeyError, match=fingerprint(OLD)[:8]):
        read_all(warehouse, new)

    # without the old key listed, nothing can move: reported by key id
    report = reseal_warehouse(warehouse, new)
    assert report.resealed == 0 and report.rewritten == 0
    assert set(report.left) == {fingerprint(OLD)[:8]} and report.left_total > 0
    assert DECRYPT_ENV in report.first_error

    steps: list[tuple[int, int]] = []
    report = reseal_warehouse(warehouse, rotated, lambda d, t: steps.append((d, t)))
    assert report.left_total == 0 and report.resealed > 0
    files = len(sealed_files(warehouse))
    assert steps[0] == (0, files) and steps[-1] == (files, files)
    assert report.rewritten == files - 1  # run 3 was under the new key already
    assert read_all(warehouse, new) == expected(3)
    # the bytes a fresh compaction under the new key writes
    fresh = tmp_path / "fresh"
    small_store.build(fresh, [new, new, new], snapshot_sealer=new)
    assert raw_values(warehouse) == raw_values(fresh)
    assert snapshot(warehouse) == snapshot(fresh)
    # done: a second pass rewrites nothing
    again = reseal_warehouse(warehouse, rotated)
    assert (again.rewritten, again.resealed, again.left_total) == (0, 0, 0)
    assert not list(warehouse.rglob(".*.reseal"))


def snapshot(warehouse: Path) -> list[dict[str, object]]:
    import pyarrow.parquet as pq

    (path,) = [p for p in sealed_files(warehouse) if "snapshots" in p.parts]
    return pq.read_table(path).to_pylist()


def test_a_v1_store_opens_and_moves(tmp_path: Path) -> None:
    """Data written before tokens named their key opens by trying each key."""
    import pyarrow.parquet as pq

    warehouse = tmp_path / "w"
    small_store.build(warehouse, [Sealer(OLD, FIELDS)])
    (path,) = sealed_files(warehouse)
    table = pq.read_table(path).to_pylist()
    for row in table:
        row["value"] = as_v1(row["value"].decode()).encode()
        row["data"] = orjson.dumps(to_v1(orjson.loads(row["data"]))).decode()
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(table, schema=pq.read_schema(path)), path)
    assert read_all(warehouse, Sealer(NEW, FIELDS, (OTHER, OLD))) == expected(1)
    report = ResealReport()
    reseal_file(path, Sealer(NEW, FIELDS, (OTHER,)), report)  # the old key not given
    assert report.left == {"enc:v1 (key not given)": 6 * 3} and report.rewritten == 0
    report = reseal_warehouse(warehouse, Sealer(NEW, FIELDS, (OTHER, OLD)))
    assert report.left_total == 0 and report.rewritten == 1
    assert read_all(warehouse, Sealer(NEW, FIELDS)) == expected(1)


def test_spark_reads_a_resealed_store(spark, tmp_path: Path) -> None:
    """Files Spark wrote (INT96 timestamps, its schema metadata) read the
    same through Spark after the pass."""
    from seqkeeper.spark_sink.audit import read_audit
    from seqkeeper.spark_sink.snapshots import read_snapshot

    warehouse = tmp_path / "w"
    old, new = Sealer(OLD, FIELDS), Sealer(NEW, FIELDS)
    small_store.build(
        warehouse,
        [old, new],
        snapshot_sealer=old,
        per_run=4,
        write=small_store.spark_writer(spark),
    )
    schema = read_audit(spark, warehouse).schema
    before = read_audit(spark, warehouse).orderBy("global_position").collect()
    report = reseal_warehouse(warehouse, Sealer(NEW, FIELDS, (OLD,)))
    assert report.left_total == 0 and report.rewritten == 2  # run 1 and the snapshot
    assert read_audit(spark, warehouse).schema == schema
    after = read_audit(spark, warehouse).orderBy("global_position").collect()
    keep = ("id", "time", "position", "global_position", "category", "day", "offset")
    assert [[r[c] for c in keep] for r in after] == [[r[c] for c in keep] for r in before]
    assert read_all(warehouse, new) == expected(2, per_run=4)
    snap = read_snapshot(spark, warehouse, small_store.SNAPSHOT_TOPIC)
    assert snap.count() == 6


def test_reseal_moves_the_header_values(tmp_path: Path) -> None:
    """An audit row's header values are sealed under the row's coordinates
    and their index; the pass moves them as a fresh compaction would seal them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from seqkeeper.spark_sink.audit import header_context

    headers = [("trace", b"t1"), ("x-id", b"\xff\x00"), ("none", None)]

    def rows(sealer: Sealer) -> list[dict[str, object]]:
        return [
            {
                "topic": "t",
                "partition": 0,
                "offset": o,
                "headers": [
                    {"key": k.encode(), "value": sealer.seal_bytes(v, header_context("t", 0, o, i))}
                    for i, (k, v) in enumerate(headers)
                ],
            }
            for o in range(2)
        ]

    schema = pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("headers", pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())]))),
        ]
    )
    path = tmp_path / "part-0.parquet"
    pq.write_table(pa.Table.from_pylist(rows(Sealer(OLD)), schema=schema), path)
    report = ResealReport()
    reseal_file(path, Sealer(NEW, (), (OLD,)), report)
    assert (report.resealed, report.rewritten, report.left_total) == (4, 1, 0)
    assert pq.read_table(path).to_pylist() == rows(Sealer(NEW))
