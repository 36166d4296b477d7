"""The message-db read API over the audit log, against a plain-Python
reference: streams from a position, categories from a global position with
correlation and consumer-group filters, last message, version; encrypted
fields opened with the key and refused without it; the CLI."""

from __future__ import annotations

import asyncio
import hashlib

import orjson
import pytest
from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.spark_sink.audit import compact_audit, read_audit
from seqkeeper.spark_sink.crypto import KEY_ENV, AuditKeyError, Sealer
from seqkeeper.spark_sink.replay import Selection, replay
from seqkeeper.spark_sink.store import MessageStore, cardinal_id, hash_64, member_of
from seqkeeper.topics import create_topics, read_topic
from tests.spark_sink.test_audit import send

pytestmark = pytest.mark.integration
KEY = b"q" * 32


def test_message_db_hash_and_cardinal_id() -> None:
    # message-db: left('x' || md5(v), 17)::bit(64)::bigint, then @ (abs) and MOD
    hexed = hashlib.md5(b"abc").hexdigest()[:16]
    expected = int(hexed, 16) - (1 << 64 if int(hexed[0], 16) >= 8 else 0)
    assert hash_64("abc") == expected
    assert cardinal_id("account-123+2") == "123" and cardinal_id("account-7") == "7"
    assert member_of("account-123+1", 3) == member_of("account-123+2", 3)


def test_read_api_mirrors_message_db(spark, broker, names, tmp_path, monkeypatch) -> None:
    topic, other = f"acct-{names['app_id']}", f"misc-{names['app_id']}"
    asyncio.run(create_topics(broker.bootstrap, [topic, other], 3))
    docs = []
    for i in range(90):
        key = f"{i % 9}+{i % 2}" if i % 9 == 0 else str(i % 9)
        meta = {"correlationStreamName": f"{'orders' if i % 3 else 'billing'}-{i}"}
        if i % 5 == 0:
            meta["correlationId"] = "c5"
        doc = {
            "messageId": f"m{i}",
            "seq": i,
            "type": "Opened" if i % 4 else "Closed",
            "data": {"i": i, "email": f"user{i}@example.com"},
            "metadata": meta,
        }
        docs.append((topic, key.encode(), orjson.dumps(doc), None))
    asyncio.run(send(broker.bootstrap, [*docs, (other, b"x", b'{"messageId":"o"}', None)]))
    warehouse = tmp_path / "w"
    sealer = Sealer(KEY, ("email",))
    compact_audit(spark, broker.bootstrap, [topic, other], warehouse, sealer)
    category = topic.replace("-", "_")
    rows = sorted(
        (r.asDict() for r in read_audit(spark, warehouse).collect()),
        key=lambda r: r["global_position"],
    )
    rows = [r for r in rows if r["stream_name"].startswith(category + "-")]
    assert len(rows) == 90
    assert all("example.com" not in (r["data"] + bytes(r["value"]).decode()) for r in rows)
    store = MessageStore(warehouse, sealer)

    stream = f"{category}-3"
    mine = [r for r in rows if r["stream_name"] == stream]
    got = store.stream(stream, position=2, batch_size=4)
    assert [m.id for m in got] == [r["id"] for r in mine[2:6]]
    assert [m.position for m in got] == [2, 3, 4, 5]
    original = {orjson.loads(d[2])["messageId"]: orjson.loads(d[2]) for d in docs}
    assert all(m.data == original[m.id]["data"] for m in got)  # emails opened
    assert all(m.metadata == original[m.id]["metadata"] for m in got)
    first = store.stream(stream)[0]
    assert first.data["email"].endswith("@example.com") and first.type in ("Opened", "Closed")

    start = rows[10]["global_position"]
    got = store.category(category, position=start, batch_size=7)
    assert [m.global_position for m in got] == [r["global_position"] for r in rows[10:17]]
    got = store.category(category, correlation="billing", batch_size=None)
    assert [m.id for m in got] == [r["id"] for r in rows if int(r["id"][1:]) % 3 == 0]
    got = store.category(category, correlation_id="c5", batch_size=None)
    assert [m.id for m in got] == [r["id"] for r in rows if int(r["id"][1:]) % 5 == 0]
    # consumer groups: each stream read by exactly one member, as message-db does
    members = [
        store.category(category, batch_size=None, consumer_group_member=n, consumer_group_size=3)
        for n in range(3)
    ]
    assert sum(len(m) for m in members) == 90
    for n, part in enumerate(members):
        assert {member_of(m.stream_name, 3) for m in part} <= {n}
    compound = [m for part in members for m in part if m.stream_name.startswith(f"{category}-0+")]
    assert len({member_of(m.stream_name, 3) for m in compound}) == 1  # same cardinal id
    with pytest.raises(ValueError, match="go together"):
        store.category(category, consumer_group_member=1)

    last = store.last(stream)
    assert last is not None and last.id == mine[-1]["id"]
    closed = store.last(stream, "Closed")
    assert closed is not None and closed.id == [r for r in mine if r["type"] == "Closed"][-1]["id"]
    assert store.version(stream) == len(mine) - 1
    assert store.version(f"{category}-nope") is None and store.last(f"{category}-nope") is None

    # without the key: a clear error, never ciphertext handed out as data
    with pytest.raises(AuditKeyError, match="SEQKEEPER_AUDIT_KEY"):
        MessageStore(warehouse).stream(stream)

    # the CLI
    monkeypatch.setenv(KEY_ENV, __import__("base64").urlsafe_b64encode(KEY).decode())
    runner = CliRunner()
    out = runner.invoke(app, ["store", "stream", stream, "--warehouse", str(warehouse)])
    assert out.exit_code == 0, out.output
    lines = [orjson.loads(x) for x in out.output.splitlines()]
    assert [x["position"] for x in lines] == list(range(len(mine)))
    out = runner.invoke(app, ["store", "version", stream, "--warehouse", str(warehouse)])
    assert out.exit_code == 0 and out.output.strip() == str(len(mine) - 1)
    out = runner.invoke(
        app,
        [
            "store",
            "category",
            category,
            "--member",
            "5",
            "--size",
            "3",
            "--warehouse",
            str(warehouse),
        ],
    )
    assert out.exit_code == 2 and "member 5" in out.output

    # replay opens the sealed values: the original bytes again
    target = f"again-{names['app_id']}"
    asyncio.run(create_topics(broker.bootstrap, [target], 1))
    assert (
        replay(
            spark, warehouse, Selection(category=category), broker.bootstrap, target, sealer=sealer
        )
        == 90
    )
    replayed = sorted(bytes(r.value) for r in asyncio.run(read_topic(broker.bootstrap, target)))
    assert replayed == sorted(d[2] for d in docs)
    with pytest.raises(AuditKeyError):
        replay(spark, warehouse, Selection(stream=stream), broker.bootstrap, target)

    # time travel: a later run moves the store on, --as-of reads run 1
    more = [
        (topic, b"3", orjson.dumps({"messageId": f"n{i}", "type": "T"}), None) for i in range(2)
    ]
    asyncio.run(send(broker.bootstrap, more))
    assert compact_audit(spark, broker.bootstrap, [topic, other], warehouse, sealer) == 2
    assert MessageStore(warehouse, sealer).version(stream) == len(mine) + 1
    assert MessageStore(warehouse, sealer, as_of="1").version(stream) == len(mine) - 1
    args = ["store", "version", stream, "--warehouse", str(warehouse)]
    out = runner.invoke(app, [*args, "--as-of", "1"])
    assert out.exit_code == 0 and out.output.strip() == str(len(mine) - 1)
    out = runner.invoke(app, [*args, "--as-of", "2000-01-01T00:00"])
    assert out.exit_code == 2 and "no snapshot that early" in out.output
