"""The command-line tools on the secured broker, as ``admin`` over SASL_SSL
with the settings from the environment only: ``demo`` (its worker too) and
``inspect``; ``compact`` (its Spark source too), a key rotation with
``compact --reseal``, and ``replay`` of what was stored. ``verify`` is
test_secured_kafka's and test_mtls's."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from seqkeeper.security import ClientSecurity
from seqkeeper.spark_sink.audit import coordinates
from seqkeeper.spark_sink.crypto import (
    DECRYPT_ENV,
    DECRYPT_FILE_ENV,
    FIELDS_ENV,
    KEY_ENV,
    KEY_FILE_ENV,
    AuditKeyError,
    Sealer,
    StreamKeys,
)
from seqkeeper.spark_sink.replay import _publish
from seqkeeper.spark_sink.reseal import sealed_files
from seqkeeper.spark_sink.store import MessageStore
from seqkeeper.topics import end_offsets_of, read_topic
from tests.secured_broker import SecuredKafkaBroker
from tests.security.conftest import security_env
from tests.security.test_secured_kafka import run_cli

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def commands_demo(
    secured_broker: SecuredKafkaBroker, secured_logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], Any]]:
    """``demo --topology commands`` as admin, settings from the environment
    only: that environment (the topic names of the demo's app) and the run.
    Its topics are the data of the later tests."""
    tag = uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        **security_env(secured_broker.client_security()),
        "KAFKA_BOOTSTRAP_SERVERS": secured_broker.bootstrap,
        "SEQKEEPER_APP_ID": f"cli-{tag}",
        "SEQKEEPER_COMMAND_TOPIC": f"cli-commands-{tag}",
        "SEQKEEPER_EVENTS_TOPIC": f"cli-events-{tag}",
        "SEQKEEPER_COMMAND_DLQ_TOPIC": f"cli-dlq-{tag}",
        "SEQKEEPER_DATA_DIR": str(tmp_path_factory.mktemp("demo") / "data"),
        "SEQKEEPER_PARTITIONS": "2",
    }
    for name in (KEY_ENV, KEY_FILE_ENV, DECRYPT_ENV, DECRYPT_FILE_ENV, FIELDS_ENV):
        env.pop(name, None)
    demo = [
        "demo",
        "-b",
        secured_broker.bootstrap,
        "--topology",
        "commands",
        "--commands",
        "30",
        "--seed",
        "3",
    ]
    yield env, run_cli(demo, env, secured_logs / "demo-commands.log")


def test_demo_and_inspect_as_admin(
    commands_demo: tuple[dict[str, str], Any], secured_logs: Path
) -> None:
    env, done = commands_demo
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "PASSED" in done.stdout, done.stdout[-3000:]

    # (the broker from KAFKA_BOOTSTRAP_SERVERS, as the docs export it: no -b)
    inspect = ["inspect", "--message-id", "cmd-3-0", "--web-port", "0"]
    done = run_cli(inspect, env, secured_logs / "inspect.log")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "cmd-3-0" in done.stdout


def test_replay_publishes_as_admin(as_admin: ClientSecurity) -> None:
    """What ``replay`` sends, once Spark has selected it (its client takes
    the environment's settings)."""
    bootstrap = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    topic = f"replayed-{uuid.uuid4().hex[:8]}"
    rows = [
        SimpleNamespace(
            key=b"k",
            value=orjson.dumps({"n": n}),
            headers=[{"key": b"x-n", "value": str(n).encode()}],  # (as the audit keeps them)
        )
        for n in range(5)
    ]
    assert asyncio.run(_publish(bootstrap, topic, rows, lambda n: None, None)) == 5
    replayed = sorted(asyncio.run(read_topic(bootstrap, topic)), key=lambda r: r.offset)
    assert [(r.value, r.headers) for r in replayed] == [
        (r.value, (("x-n", r.headers[0]["value"]),)) for r in rows
    ]


def sealed_key_ids(warehouse: Path, form: str = "12") -> list[str]:
    """The key id (8 hex digits) each sealed token of the files readers
    read names, raw values and fields inside ``data`` alike (``v1``: a
    token without one); ``form``: the token versions counted (default those
    under the audit key; ``3``: under a stream's own key)."""
    import pyarrow.parquet as pq

    ids = []
    for path in sealed_files(warehouse):
        for column in pq.read_table(path).columns:
            for cell in column.to_pylist():
                text = cell.decode(errors="replace") if isinstance(cell, bytes) else str(cell)
                ids += [
                    m.group(1) or "v1"
                    for m in re.finditer(rf"enc:v[{form}]:(?:([0-9a-f]{{8}}):)?", text)
                ]
    return ids


def stored_records(warehouse: Path, sealer: Sealer) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every audited record (global position, key, value), its value opened
    with ``sealer``; and each message's sealed fields opened too."""
    import pyarrow.dataset as ds

    table = ds.dataset(
        [str(p) for p in sealed_files(warehouse) if "audit" in p.parts], format="parquet"
    ).to_table(
        columns=["global_position", "stream_name", "key", "value", "topic", "partition", "offset"]
    )
    rows = table.sort_by("global_position").to_pylist()
    store = MessageStore(warehouse, sealer)
    categories = {
        p.name.removeprefix("part_category=")
        for p in warehouse.glob("seqkeeper/audit/data/run-*/part_category=*")
    }
    assert categories
    for category in categories:  # raises if a field does not open
        assert store.category(category, batch_size=None)
    keys = StreamKeys(warehouse, sealer)  # (each stream's values: its own key)
    return [
        (
            r["global_position"],
            r["key"],
            sealer.open_bytes(
                r["value"],
                coordinates(r["topic"], r["partition"], r["offset"]),
                keys.load(r["stream_name"]),
            ),
        )
        for r in rows
    ]


def per_key(
    records: list[tuple[bytes | None, bytes | None]],
) -> dict[bytes | None, list[bytes | None]]:
    out: dict[bytes | None, list[bytes | None]] = defaultdict(list)
    for key, value in records:
        out[key].append(value)
    return out


def test_compact_reseal_and_replay_as_admin(
    as_admin: ClientSecurity,
    commands_demo: tuple[dict[str, str], Any],
    audit_keys: tuple[str, str],
    secured_logs: Path,
    tmp_path: Path,
) -> None:
    """The audit log under key A; the rotation to key B (A decrypt-only),
    ``compact --reseal`` moving every sealed value to B; then, with B alone,
    the store opens and ``replay`` republishes what was stored, per key in
    order and byte for byte."""
    env, demo = commands_demo
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
    old, new = audit_keys
    old_file, new_file = tmp_path / "key-a", tmp_path / "key-b"
    old_file.write_text(old + "\n")
    new_file.write_text(new + "\n")
    for path in (old_file, new_file):
        path.chmod(0o600)
    a, b = (Sealer(base64.urlsafe_b64decode(k), ("orderId",)) for k in (old, new))
    warehouse = tmp_path / "warehouse"
    # (the broker from KAFKA_BOOTSTRAP_SERVERS, as the docs export it: no -b)
    compact = ["compact", "--warehouse", str(warehouse), "--master", "local[1]"]
    under_a = {**env, KEY_FILE_ENV: str(old_file), FIELDS_ENV: "orderId"}
    done = run_cli(compact, under_a, secured_logs / "compact-key-a.log")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    committed = f"committed under {warehouse}: snapshots run 1, audit run 1"
    assert committed in done.stdout.splitlines(), done.stdout
    # the audit run's summary: its rows, the copies it skipped
    assert any(line.startswith("audit run 1: ") for line in done.stdout.splitlines())
    ids = sealed_key_ids(warehouse)  # (the snapshots: under the audit key)
    assert ids and set(ids) == {a.key_id[:8]}, set(ids)
    # the audit's values: under their streams' own keys, which the pass
    # rewraps without rewriting them
    by_stream = sealed_key_ids(warehouse, "3")
    assert len(set(by_stream)) > 1 and a.key_id[:8] not in by_stream
    stored = stored_records(warehouse, a)
    assert len(stored) > 30  # the commands, their events and dead letters

    # the rotation: B seals, A only opens; the pass moves everything to B
    rotated = {**under_a, KEY_FILE_ENV: str(new_file), DECRYPT_FILE_ENV: str(old_file)}
    done = run_cli([*compact, "--reseal"], rotated, secured_logs / "compact-reseal.log")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [report] = [line for line in done.stdout.splitlines() if line.startswith("reseal: ")]
    assert f"values moved to key {b.key_id} " in report, report
    assert report.endswith(
        "; 0 values left under other keys: the decrypt-only keys can be dropped"
    ), report
    ids = sealed_key_ids(warehouse)
    assert ids and set(ids) == {b.key_id[:8]}, set(ids)
    assert sorted(sealed_key_ids(warehouse, "3")) == sorted(by_stream)
    with pytest.raises(AuditKeyError):  # key A no longer opens anything
        stored_records(warehouse, a)
    assert stored_records(warehouse, b) == stored

    # with key B alone: replay what was stored to a new topic, through the CLI
    only_b = {k: v for k, v in rotated.items() if k != DECRYPT_FILE_ENV}
    target = f"replayed-{uuid.uuid4().hex[:8]}"
    replay = ["replay", "--topic", target, "--warehouse", str(warehouse)]
    # (the target does not exist: replay creates it, as the worker would its topics)
    only_b["SEQKEEPER_PARTITIONS"] = "3"
    done = run_cli([*replay, "--master", "local[1]"], only_b, secured_logs / "replay.log")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{len(stored)} messages published to {target}" in done.stdout, done.stdout
    assert "Topic not found" not in done.stdout + done.stderr, done.stderr[-3000:]
    ends = asyncio.run(end_offsets_of(bootstrap, [target]))
    assert sorted(tp.partition for tp in ends) == [0, 1, 2], ends
    replayed = asyncio.run(read_topic(bootstrap, target))
    replayed.sort(key=lambda r: (r.partition, r.offset))
    assert per_key([(r.key, r.value) for r in replayed]) == per_key(
        [(key, value) for _, key, value in stored]
    )
