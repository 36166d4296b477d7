"""A command worker with SEQKEEPER_COMMAND_AUTH=jwt on a real broker:
commands the client signs for tenant A are applied and answered;
an unsigned one, one signed for tenant B with tenantId A, one lacking the
scope and an expired one are each dead-lettered ``unauthorized`` and
change nothing (the entity, the Message Store and the reply topic show
it), and so is a new command under a token read off the topic (the
client binds each token to its command's bytes); ``seqkeeper send
--signing-key`` works end to end. A worker whose key
file is missing or holds a private key stops at start, in one line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from seqkeeper.client import CommandClient
from seqkeeper.inspect import load, lookup
from seqkeeper.security import kafka_options
from seqkeeper.state.tokens import TokenSigner
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess


def key_files(directory: Path) -> tuple[Path, Path]:
    """A signing key (PEM, private) and the directory of trusted public keys."""
    key = ec.generate_private_key(ec.SECP256R1())
    private = directory / "signer.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    trusted = directory / "trusted"
    trusted.mkdir()
    (trusted / "k1.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, trusted


def command(mid: str, tenant: str, ctype: str, reply_to: str) -> dict[str, Any]:
    return {
        "messageId": mid,
        "commandType": ctype,
        "schemaVersion": 1,
        "correlationId": mid,
        "partitionKey": "sku-1",
        "tenantId": tenant,
        "replyTo": reply_to,
        "payload": {"quantity": 100} if ctype == "AddStock" else {"orderId": mid, "quantity": 1},
    }


@pytest.mark.integration
def test_only_commands_signed_for_their_tenant_and_type_are_applied(
    make_settings: Any, names: dict[str, str], tmp_path: Path
) -> None:
    tag = names["app_id"]
    private, trusted = key_files(tmp_path)
    settings = make_settings(topology="commands", command_auth="jwt", jwt_keys=str(trusted))
    bootstrap, topic = settings.broker.bootstrap, settings.commands.command_topic
    refused_replies = f"refused-{tag}.replies"
    asyncio.run(create_topics(bootstrap, [*settings.topics(), refused_replies], 2))
    worker = WorkerProcess(settings, tmp_path / "worker.log").start().wait_ready()
    signer = TokenSigner.from_file(private, "k1")
    try:

        async def signed_and_spoofed() -> None:
            async with CommandClient(
                bootstrap, command_topic=topic, client_id=tag, tenant="A", signer=signer
            ) as client:
                reply = await client.request("AddStock", "sku-1", {"quantity": 5}, timeout=60)
                assert reply.success and reply.version == 1, reply
            (signed,) = await read_topic(bootstrap, topic)  # as any reader of the topic can
            stolen = signed.header("authorization")
            assert stolen is not None and stolen.startswith(b"Bearer ")
            spoofed = {
                "unsigned": (command("unsigned", "A", "AddStock", refused_replies), []),
                "tenant-b": (
                    command("tenant-b", "A", "AddStock", refused_replies),
                    [signer.header(command("x", "B", "AddStock", ""), time.time())],
                ),
                "no-scope": (
                    command("no-scope", "A", "AddStock", refused_replies),
                    [signer.header(command("x", "A", "ReserveInventory", ""), time.time())],
                ),
                "expired": (
                    command("expired", "A", "AddStock", refused_replies),
                    [signer.header(command("expired", "A", "AddStock", ""), time.time() - 3600)],
                ),
                "replayed": (
                    command("replayed", "A", "AddStock", refused_replies),
                    [("authorization", stolen)],
                ),
            }
            async with AIOKafkaProducer(
                bootstrap_servers=bootstrap, **kafka_options(), acks="all"
            ) as producer:
                for doc, headers in spoofed.values():
                    await producer.send_and_wait(
                        topic, orjson.dumps(doc), key=b"sku-1", headers=headers or None
                    )

        asyncio.run(signed_and_spoofed())
        deadline = time.monotonic() + 60
        while True:
            dead = asyncio.run(read_topic(bootstrap, settings.commands.command_dlq_topic))
            if len(dead) >= 5 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        reasons = {
            orjson.loads(r.value or b"")["messageId"]: (
                (r.header("seqkeeper.reason") or b"").decode(),
                (r.header("seqkeeper.detail") or b"").decode(),
            )
            for r in dead
        }
        assert {m: reason for m, (reason, _) in reasons.items()} == {
            m: "unauthorized" for m in ("unsigned", "tenant-b", "no-scope", "expired", "replayed")
        }, worker.log()[-3000:]
        assert "no authorization header" in reasons["unsigned"][1]
        assert "tenant 'B'" in reasons["tenant-b"][1]
        assert "scope does not allow commandType 'AddStock'" in reasons["no-scope"][1]
        assert "expired" in reasons["expired"][1]
        assert "signed for another command" in reasons["replayed"][1]
        assert all(r.header("authorization") is None for r in dead)

        # seqkeeper send, as a user runs it, signs with the key
        sent = subprocess.run(
            [sys.executable, "-m", "seqkeeper", "send", "-b", bootstrap, "--command-topic", topic,
             "--tenant", "A", "--type", "AddStock", "--key", "sku-1", "--payload",
             '{"quantity": 7}', "--reply-topic", f"send-{tag}.replies", "--wait", "60",
             "--signing-key", str(private), "--key-id", "k1"],
            capture_output=True, text=True, timeout=120, env=os.environ.copy(),
        )  # fmt: skip
        assert sent.returncode == 0, sent.stdout + sent.stderr
        answer = json.loads(sent.stdout)
        assert answer["success"] and answer["version"] == 2
        assert answer["data"]["available"] == 12  # 5 + 7: none of the refused 100s

        table = asyncio.run(load(settings))
        for refused in ("unsigned", "tenant-b", "no-scope", "expired", "replayed"):
            assert lookup(table, message_id=refused) == []  # no receipt
        assert asyncio.run(read_topic(bootstrap, refused_replies)) == []  # no reply
        events = asyncio.run(read_topic(bootstrap, settings.commands.events_topic))
        assert len(events) == 2  # StockAdded twice: the client's and send's
    finally:
        assert worker.stop() == 0


@pytest.mark.parametrize("problem", ["missing", "private"])
def test_a_worker_with_a_bad_key_file_stops_at_start_in_one_line(
    tmp_path: Path, problem: str
) -> None:
    """Before any broker: the key file is read first."""
    private, trusted = key_files(tmp_path)
    keys = tmp_path / "missing.json"
    if problem == "private":
        keys = trusted
        (trusted / "k2.pem").write_bytes(private.read_bytes())
    env = {
        **os.environ,
        "SEQKEEPER_TOPOLOGY": "commands",
        "SEQKEEPER_HANDLERS": "seqkeeper.processors.inventory:registry",
        "SEQKEEPER_COMMAND_AUTH": "jwt",
        "SEQKEEPER_JWT_KEYS": str(keys),
        "SEQKEEPER_DATA_DIR": str(tmp_path / "data"),
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    }
    run = subprocess.run(
        [sys.executable, "-m", "seqkeeper", "worker"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: SEQKEEPER_JWT_KEYS="), run.stderr
    assert ("cannot read it" if problem == "missing" else "k2.pem holds a private key") in lines[0]
    assert "BEGIN" not in run.stderr


def test_send_with_a_key_it_cannot_use_stops_in_one_line(tmp_path: Path) -> None:
    """Before any broker is asked."""
    private, trusted = key_files(tmp_path)
    base = [
        sys.executable,
        "-m",
        "seqkeeper",
        "send",
        "-b",
        "127.0.0.1:1",
        "--type",
        "T",
        "--key",
        "k",
    ]
    for key, why in (
        (tmp_path / "nope.pem", "cannot read it (No such file or directory)"),
        (trusted / "k1.pem", "not an unencrypted PEM private key"),
    ):
        run = subprocess.run(
            [*base, "--signing-key", str(key), "--key-id", "k1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 2, run.stdout + run.stderr
        assert run.stderr.count("\n") == 1 and why in run.stderr and "BEGIN" not in run.stderr
