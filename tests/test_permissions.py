"""The worker's ACLs (:mod:`seqkeeper.permissions`) as ``seqkeeper acls``
prints them; tests/security/test_acls.py runs them on Apache Kafka."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.permissions import denied, internal_topics, worker_grants
from seqkeeper.settings import Settings

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


def test_the_readme_lists_the_ordered_workers_acls(monkeypatch) -> None:
    """The README's ``$acl`` lines, expanded, are what ``seqkeeper acls``
    prints for the ordered worker with the default names."""
    for name in ("SEQKEEPER_APP_ID", "SEQKEEPER_TOPOLOGY", "SEQKEEPER_INPUT_TOPIC"):
        monkeypatch.delenv(name, raising=False)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    found = re.search(r'```console\nacl="([^"]+)"\n(.*?)```', readme, re.S)
    assert found, "no $acl block in the README"
    prefix, lines = found.group(1), found.group(2).splitlines()
    s = Settings.of(app_id="seqkeeper", topology="ordered")
    assert [line.replace("$acl", prefix, 1) for line in lines] == [
        g.command("seqkeeper", "$B") for g in worker_grants(s)
    ]
