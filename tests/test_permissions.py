"""The worker's ACLs (:mod:`seqkeeper.permissions`) as ``seqkeeper acls``
prints them; tests/security/test_acls.py runs them on Apache Kafka."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.permissions import (
    SEND_REPLY_TOPIC,
    denied,
    internal_topics,
    pattern_grants,
    role_grants,
    worker_grants,
)
from seqkeeper.settings import Settings
from tests.secured_broker import make_tls_files

PREFIX = "kafka-acls.sh --bootstrap-server kafka:9093 --command-config admin.properties --add "


def test_the_ordered_worker_grants() -> None:
    s = Settings.of(app_id="app", input_topic="events.in", bootstrap="kafka:9093")
    commands = [g.command("seqkeeper", "kafka:9093") for g in worker_grants(s)]
    user = "--allow-principal User:seqkeeper"
    assert commands[:5] == [
        f"{PREFIX}{user} --operation Read --topic events.in",
        f"{PREFIX}{user} --operation Write --topic events.ordered --topic events.deduped "
        "--topic events.dlq --topic events.late",
        f"{PREFIX}{user} --operation Read --operation Write --resource-pattern-type prefixed "
        "--topic app-",
        f"{PREFIX}{user} --operation Read --group app",
        f"{PREFIX}{user} --operation Write --resource-pattern-type prefixed --transactional-id app-",
    ]
    assert all("Create" in c for c in commands[5:]) and len(commands) == 7
    assert not any("Create" in c for c in (g.command("u") for g in worker_grants(s, create=False)))
    assert internal_topics(s) == ["app-state-changelog", "app-__assignor-__leader"]


def test_a_processors_topics_are_written_by_name_or_prefix() -> None:
    s = Settings.of(
        app_id="app", processor="m:fn", processor_topics="commands.in,saga.*", bootstrap="k:1"
    )
    grants = worker_grants(s, create=False)
    [written] = [g for g in grants if g.operations == ("Write",) and g.names[0] == "events.ordered"]
    assert written.names[-2:] == ("events.processed", "commands.in")  # (created, checked at start)
    assert [g for g in grants if g.names == ("saga.",)][0].prefixed
    assert pattern_grants(["a*b", "x.*", "name", "*"]) == (("x.",), ("a*b", "*"))


def test_the_command_worker_grants_name_its_group_and_reply_topics() -> None:
    s = Settings.of(app_id="app", topology="commands")
    grants = worker_grants(s, create=False, reply_topics=["shop.replies"])
    assert [(g.operations, g.kind, g.names) for g in grants] == [
        (("Read",), "topic", ("commands.in",)),
        (("Write",), "topic", ("commands.events", "commands.dlq")),
        (("Read", "Write"), "topic", ("app-commands-",)),
        (("Read",), "group", ("app-commands",)),
        (("Write",), "transactional-id", ("app-commands-",)),
        (("Write",), "topic", ("shop.replies",)),
    ]
    assert internal_topics(s)[0] == "app-commands-commands-changelog"


def test_a_denial_names_the_user_the_resource_and_the_grant() -> None:
    s = Settings.of(
        app_id="app",
        bootstrap="kafka:9093",
        security_protocol="SASL_SSL",
        sasl_username="seqkeeper",
        sasl_password="x" * 12,
    )
    line = str(denied(s, "Write", "topic", "app-state-changelog", "TOPIC_AUTHORIZATION_FAILED"))
    assert line == (
        "user 'seqkeeper' may not Write topic prefix 'app-' ('app-state-changelog') "
        f"(TOPIC_AUTHORIZATION_FAILED): grant it with {PREFIX}--allow-principal User:seqkeeper "
        "--operation Write --resource-pattern-type prefixed --topic app-"
    )


def test_seqkeeper_acls_prints_the_commands(monkeypatch) -> None:
    for name in ("SEQKEEPER_APP_ID", "SEQKEEPER_TOPOLOGY", "SEQKEEPER_SASL_USERNAME"):
        monkeypatch.delenv(name, raising=False)
    done = CliRunner().invoke(
        app, ["acls", "-b", "kafka:9093", "--principal", "seqkeeper", "--app-id", "app"]
    )
    assert done.exit_code == 0, done.output
    s = Settings.of(app_id="app", bootstrap="kafka:9093")
    assert done.output.splitlines() == [
        g.command("seqkeeper", "kafka:9093") for g in worker_grants(s)
    ]


def test_the_docs_list_each_workers_acls(monkeypatch) -> None:
    """docs/security.md's ``kafka-acls.sh`` lines (the README points there)
    are what ``seqkeeper acls`` prints for each worker with the default
    names, the Create ones last."""
    for name in ("SEQKEEPER_APP_ID", "SEQKEEPER_TOPOLOGY", "SEQKEEPER_INPUT_TOPIC"):
        monkeypatch.delenv(name, raising=False)
    docs = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
    section = docs.split("\n## ACLs\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(
        r"```console\n(# the ordered worker.*?)\n\n(# the command worker.*?)```", section, re.S
    )
    assert found, "no kafka-acls.sh block in docs/security.md's ACLs"
    ordered = Settings.of(app_id="seqkeeper", topology="ordered")
    commands = Settings.of(app_id="seqkeeper", topology="commands")
    for block, grants in [
        (found.group(1), worker_grants(ordered)),
        (found.group(2), worker_grants(commands, reply_topics=["shop.replies"])),
    ]:
        lines = [line for line in block.splitlines() if not line.startswith("#")]
        assert lines == [g.command("seqkeeper", "$B") for g in grants]


def cli_env(monkeypatch, **env: str) -> None:
    """The environment of one ``seqkeeper acls`` run: no security variable but ``env``."""
    for name in (
        "SEQKEEPER_APP_ID",
        "SEQKEEPER_TOPOLOGY",
        "SEQKEEPER_SECURITY_PROTOCOL",
        "SEQKEEPER_SASL_USERNAME",
        "SEQKEEPER_SASL_PASSWORD",
        "SEQKEEPER_SASL_PASSWORD_FILE",
        "SEQKEEPER_SSL_CERTFILE",
        "SEQKEEPER_SSL_KEYFILE",
        "SEQKEEPER_SSL_PRINCIPAL_MAPPING_RULES",
        "SEQKEEPER_COMMAND_TOPIC",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A client certificate whose subject needs RFC 2253's escapes."""
    return make_tls_files(
        tmp_path_factory.mktemp("tls"),
        clients=("w",),
        subjects={"w": 'CN=Worker\\, A+UID=7,OU=str\\"eams,O=Example'},
    )


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        # (the attributes of an RDN in their encoded order, as Java writes them)
        ("", 'UID=7+CN=Worker\\, A,OU=str\\"eams,O=Example'),
        ("RULE:^.*CN=([^\\\\,+]+).*$/$1/L,DEFAULT", "worker"),
    ],
)
def test_acls_names_the_certificates_principal(monkeypatch, certificates, rules, expected) -> None:  # type: ignore[no-untyped-def]
    """With SSL and a client certificate, no SASL: the principal is the
    subject (RFC 2253, as Kafka's DefaultKafkaPrincipalBuilder takes it),
    mapped by the broker's rules when given; quoted for the shell."""
    client = certificates.clients["w"]
    cli_env(
        monkeypatch,
        SEQKEEPER_SECURITY_PROTOCOL="SSL",
        SEQKEEPER_SSL_CAFILE=str(certificates.ca),
        SEQKEEPER_SSL_CERTFILE=str(client.cert),
        SEQKEEPER_SSL_KEYFILE=str(client.key),
        **({"SEQKEEPER_SSL_PRINCIPAL_MAPPING_RULES": rules} if rules else {}),
    )
    done = CliRunner().invoke(app, ["acls", "-b", "kafka:9093", "--app-id", "app"])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert lines and all(shlex.split(line)[7] == f"User:{expected}" for line in lines), lines
    assert "ANONYMOUS" not in done.output


def test_acls_refuses_to_grant_anonymous(monkeypatch) -> None:
    for protocol in ("PLAINTEXT", "SSL"):
        cli_env(monkeypatch, SEQKEEPER_SECURITY_PROTOCOL=protocol)
        done = CliRunner().invoke(app, ["acls", "-b", "kafka:9093"])
        assert done.exit_code == 2, done.output
        [line] = done.output.splitlines()
        assert line.startswith(f"error: no user to grant: the clients connect with {protocol}, ")
        assert "User:ANONYMOUS" in line and "SEQKEEPER_SSL_CERTFILE" in line, line
        assert "kafka-acls.sh" not in done.output
    s = Settings.of(app_id="app")
    line = str(denied(s, "Read", "topic", "events.in", "TOPIC_AUTHORIZATION_FAILED"))
    assert "User:ANONYMOUS, as every other unauthenticated client" in line, line
    assert "kafka-acls.sh" not in line


def test_bad_mapping_rules_are_one_line_naming_the_variable(monkeypatch, certificates) -> None:  # type: ignore[no-untyped-def]
    client = certificates.clients["w"]
    cli_env(
        monkeypatch,
        SEQKEEPER_SECURITY_PROTOCOL="SSL",
        SEQKEEPER_SSL_CERTFILE=str(client.cert),
        SEQKEEPER_SSL_KEYFILE=str(client.key),
        SEQKEEPER_SSL_PRINCIPAL_MAPPING_RULES="RULE:^CN=x$/y/",
    )
    done = CliRunner().invoke(app, ["acls"])
    assert done.exit_code == 2, done.output
    [line] = done.output.splitlines()
    assert line.startswith("error: SEQKEEPER_SSL_PRINCIPAL_MAPPING_RULES=RULE:^CN=x$/y/: "), line
    assert "no rule applies to" in line and "DEFAULT" in line, line


def test_the_roles_grants(monkeypatch) -> None:
    """Each role's ACLs, as each command uses the broker: no consumer group,
    no transactional id; Create only on what the command creates."""
    s = Settings.of(app_id="app", command_topic="shop.commands")
    shape = {
        role: [(g.operations, g.names) for g in role_grants(s, role, topic="again")]
        for role in ("reader", "compactor", "replayer", "client")
    }
    late = s.ordered.late_topic
    assert shape["reader"] == [
        (
            ("Read",),
            (
                "events.in",
                "events.ordered",
                "events.deduped",
                "events.dlq",
                late,
                "app-commands-commands-changelog",
            ),
        )
    ]
    assert shape["compactor"] == [
        (
            ("Read",),
            (
                "app-state-changelog",
                "app-commands-commands-changelog",
                "events.in",
                "events.ordered",
                "events.deduped",
                "events.dlq",
                late,
                "events.processed",
                "shop.commands",
                "commands.events",
                "commands.dlq",
            ),
        )
    ]
    replies = role_grants(s, "compactor", reply_topics=["shop.replies", "other"])
    assert replies[0].names[-1:] == ("shop.replies",)  # (only those the worker may write)
    assert shape["replayer"] == [(("Write",), ("again",)), (("Create",), ("again",))]
    assert shape["client"] == [
        (("Write",), ("shop.commands",)),
        (("Read",), (SEND_REPLY_TOPIC,)),
        (("Create",), (SEND_REPLY_TOPIC,)),
    ]
    assert all(g.kind == "topic" for role in shape for g in role_grants(s, role, topic="again"))
    cli_env(monkeypatch)
    done = CliRunner().invoke(
        app, ["acls", "--role", "client", "--principal", "u", "--reply-topic", "r", "--no-create"]
    )
    assert done.exit_code == 0, done.output
    assert [line.split("User:u ")[1] for line in done.output.splitlines()] == [
        "--operation Write --topic commands.in",
        "--operation Read --topic r",
    ]
