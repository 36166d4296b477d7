"""The command topology with SEQKEEPER_COMMAND_AUTH=jwt (in-memory store):
a command whose token does not allow it is dead-lettered ``unauthorized``
before anything else: no receipt, no entity change, no events, no reply;
the others are applied as before. With auth off (the default) a command for
any tenant is applied, whoever wrote it: the threat the setting answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from seqkeeper.processors.dead_letter import schema_document
from seqkeeper.processors.inventory import registry
from seqkeeper.settings import SettingError, Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.tokens import TokenSigner
from seqkeeper.topologies.command_worker import CommandTopology

KEY = ec.generate_private_key(ec.SECP256R1())
SIGNER = TokenSigner(KEY, "k1", lifetime=60)
ROGUE = TokenSigner(ec.generate_private_key(ec.SECP256R1()), "k1")  # not the trusted key
NOW = 1_800_000_000.0
SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "dead-letter-headers.schema.json"


def keys_file(directory: Path) -> Path:
    entry = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(KEY.public_key()))
    path = directory / "keys.json"
    path.write_text(json.dumps({"keys": [{**entry, "kid": "k1"}]}))
    return path


def topology_of(memory: MemoryStore, keys: Path | None) -> CommandTopology:
    if keys is None:
        s = Settings.of(bootstrap="unused", topology="commands")
    else:
        s = Settings.of(
            bootstrap="unused", topology="commands", command_auth="jwt", jwt_keys=str(keys)
        )
    topology = CommandTopology(s, CommandStore(memory), registry)
    topology.on_assigned({0})
    return topology


def command(mid: str, tenant: str = "A", ctype: str = "AddStock") -> dict[str, Any]:
    return {
        "messageId": mid,
        "commandType": ctype,
        "schemaVersion": 1,
        "correlationId": mid,
        "partitionKey": "sku-1",
        "tenantId": tenant,
        "replyTo": "replies",
        "payload": {"quantity": 2},
    }


def headers(kind: str, doc: dict[str, Any]) -> list[tuple[str, bytes]]:
    """The record headers of ``doc`` sent as ``kind``."""
    if kind == "signed":  # as the client signs: bound to the command's bytes
        return [SIGNER.header(doc, NOW, orjson.dumps(doc))]
    if kind == "unbound":  # as an issuer that does not bind tokens signs
        return [SIGNER.header(doc, NOW)]
    if kind == "other-command":  # a token read off the topic, on a command of one's own
        return [SIGNER.header(doc, NOW, orjson.dumps({**doc, "payload": {"quantity": 1}}))]
    if kind == "unsigned":
        return []
    if kind == "other-tenant":
        return [SIGNER.header({**doc, "tenantId": "B"}, NOW)]
    if kind == "no-scope":
        return [SIGNER.header({**doc, "commandType": "ReserveInventory"}, NOW)]
    if kind == "expired":
        return [SIGNER.header(doc, NOW - 3600)]
    if kind == "rogue-key":
        return [ROGUE.header(doc, NOW)]
    raise AssertionError(kind)


def feed(topology: CommandTopology, offset: int, kind: str, doc: dict[str, Any]) -> None:
    topology.on_record(0, offset, b"sku-1", orjson.dumps(doc), headers(kind, doc), 1.0, NOW)


REFUSED = ["unsigned", "other-tenant", "no-scope", "expired", "rogue-key", "other-command"]


@pytest.mark.parametrize("kind", REFUSED)
def test_a_refused_command_is_dead_lettered_and_changes_nothing(tmp_path: Path, kind: str) -> None:
    memory = MemoryStore()
    topology = topology_of(memory, keys_file(tmp_path))
    feed(topology, 0, "signed", command("m0"))
    first = topology.take()
    assert sorted(t for t, _, _, _ in first.records) == ["commands.events", "replies"]
    topology.confirm(first, now=NOW)
    before = {k: v for k, v in memory.items(0, b"")}
    doc = command("m1")
    feed(topology, 1, kind, doc)
    (letter,) = topology.take().records
    topic, key, value, hdrs = letter
    assert (topic, key, value) == ("commands.dlq", b"sku-1", orjson.dumps(doc))
    found = schema_document(hdrs or [])
    assert found["seqkeeper.reason"] == "unauthorized"
    assert "authorization" not in found  # the token is not copied
    sent = dict(headers(kind, doc))
    if sent:
        assert sent["authorization"][7:].decode() not in found["seqkeeper.detail"]
    assert Draft202012Validator(json.loads(SCHEMA.read_text())).is_valid(found)
    assert {k: v for k, v in memory.items(0, b"")} == before  # no receipt, no entity change
    assert CommandStore(memory).entity(0, "1:A/sku-1").version == 1


def test_with_auth_off_a_command_for_any_tenant_is_applied(tmp_path: Path) -> None:
    """The default: whoever may write to commands.in acts for any tenant."""
    memory = MemoryStore()
    topology = topology_of(memory, None)
    feed(topology, 0, "unsigned", command("m1", tenant="victim"))
    feed(topology, 1, "other-tenant", command("m2", tenant="victim"))
    sent = [t for t, _, _, _ in topology.take().records]
    assert sent == ["commands.events", "replies"] * 2
    assert CommandStore(memory).entity(0, "6:victim/sku-1").version == 2


def test_auth_on_without_usable_keys_fails_when_built(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match="needs SEQKEEPER_JWT_KEYS"):
        s = Settings.of(bootstrap="unused", topology="commands", command_auth="jwt")
        CommandTopology(s, CommandStore(MemoryStore()), registry)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.sampled_from(["signed", "unbound", *REFUSED]), min_size=1, max_size=12))
def test_only_allowed_commands_are_applied(tmp_path: Path, kinds: list[str]) -> None:
    """Whatever the mix: the entity's version counts the allowed commands,
    each refused one is one dead letter, and only the allowed are answered."""
    memory = MemoryStore()
    topology = topology_of(memory, keys_file(tmp_path))
    for offset, kind in enumerate(kinds):
        feed(topology, offset, kind, command(f"m{offset}"))
    sent = topology.take().records
    allowed = [n for n, kind in enumerate(kinds) if kind in ("signed", "unbound")]
    replies = [orjson.loads(v or b"")["causationId"] for t, _, v, _ in sent if t == "replies"]
    assert replies == [f"m{n}" for n in allowed]
    dead = [t for t, _, _, _ in sent if t == "commands.dlq"]
    assert len(dead) == len(kinds) - len(allowed)
    assert CommandStore(memory).entity(0, "1:A/sku-1").version == len(allowed)
    count = topology.metrics.registry.get_sample_value(
        "seqkeeper_command_dead_lettered_total", {"reason": "unauthorized"}
    )
    assert (count or 0) == len(dead)
