"""``seqkeeper acls --role``, as a user would use it on Apache Kafka with the
StandardAuthorizer (tests/security/conftest.py): the SCRAM user ``seqkeeper``
granted only what ``seqkeeper acls --role R`` prints (the commands run as
printed) runs R's commands, each as a CLI subprocess with the settings in
its environment; with one printed ACL removed (``kafka-acls.sh --remove``),
the command fails. Each test names its topics for itself (the user's ACLs
of the other tests are on other names)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import uuid
from pathlib import Path

import pytest

from seqkeeper.demo import publish
from seqkeeper.inspect import changelog_topic
from seqkeeper.security import Secret
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.verification.workload import generate
from tests.secured_broker import SecuredKafkaBroker
from tests.security.test_acls import USER, admin_config, user_password
from tests.security.test_principal_mtls import run_as_printed
from tests.security.test_secured_kafka import run_cli, verify_args

pytestmark = pytest.mark.integration
__all__ = ["admin_config", "user_password"]  # (fixtures, used by name)


def user_env(settings: Settings, password: Secret) -> dict[str, str]:
    """The environment of a command run as ``seqkeeper``, with ``settings``."""
    mine = settings.with_overrides(sasl_username=USER, sasl_password=password.reveal())
    return {**os.environ, **mine.to_env()}


def role_acls(env: dict[str, str], role: str, log: Path, *args: str) -> list[str]:
    done = run_cli(["acls", "--role", role, *args], env, log)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines and all(f"--allow-principal User:{USER} " in line for line in lines), lines
    return lines


def remove(broker: SecuredKafkaBroker, admin_config: Path, line: str) -> None:
    """Undo one printed ``kafka-acls.sh --add`` command."""
    run_as_printed(broker, admin_config, [line.replace(" --add ", " --remove --force ")])


def test_the_reader_role_runs_verify_and_inspect(
    secured_broker: SecuredKafkaBroker,
    admin_config: Path,
    user_password: Secret,
    secured_settings: Settings,
    secured_logs: Path,
) -> None:
    s = secured_settings
    bootstrap = s.broker.bootstrap
    changelog = changelog_topic(s)
    asyncio.run(create_topics(bootstrap, [*s.topics(), changelog], 2))  # (as admin)
    w = generate(messages=40, keys=4, seed=3)
    asyncio.run(publish(bootstrap, s.ordered.input_topic, w.records))
    env = user_env(s, user_password)
    lines = role_acls(env, "reader", secured_logs / "role-reader.log")
    run_as_printed(secured_broker, admin_config, lines)

    # verify reads every topic to its end: it finds the input not processed
    # (1: lost messages), which it can only tell having read them all
    done = run_cli(verify_args(s), env, secured_logs / "role-reader-verify.log")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "lost" in done.stdout, done.stdout[-3000:]
    inspect = [
        "inspect",
        "-b",
        bootstrap,
        "--correlation-id",
        "nothing-such",
        "--app-id",
        s.runtime.app_id,
    ]
    done = run_cli(inspect, env, secured_logs / "role-reader-inspect.log")
    assert (done.returncode, done.stderr.strip()) == (1, "no such command in the Message Store")

    [read] = lines
    # with one topic less, as a second grant, removed: each command fails otherwise
    for topic in (s.ordered.deduped_topic, changelog):
        one = read.split(" --topic ")[0] + f" --topic {topic}"
        remove(secured_broker, admin_config, one)
    done = run_cli(verify_args(s), env, secured_logs / "role-reader-verify-denied.log")
    assert done.returncode != 0 and "lost" not in done.stdout, done.stdout[-2000:]
    done = run_cli(inspect, env, secured_logs / "role-reader-inspect-denied.log")
    assert done.returncode != 0 and "no such command" not in done.stderr, done.stderr[-2000:]


def test_the_client_role_sends_a_command(
    secured_broker: SecuredKafkaBroker,
    admin_config: Path,
    user_password: Secret,
    secured_settings: Settings,
    secured_logs: Path,
) -> None:
    """``seqkeeper send`` (a CommandClient): it creates its reply topic,
    reads it from its end, and writes the command."""
    tag = uuid.uuid4().hex[:8]
    s = secured_settings.with_overrides(command_topic=f"commands-{tag}")
    bootstrap = s.broker.bootstrap
    asyncio.run(create_topics(bootstrap, [s.commands.command_topic], 2))  # (the worker's)
    env = user_env(s, user_password)
    replies = f"replies-{tag}"
    lines = role_acls(env, "client", secured_logs / "role-client.log", "--reply-topic", replies)
    run_as_printed(secured_broker, admin_config, lines)
    send = ["send", "-b", bootstrap, "--type", "AddStock", "--key", "sku-1"]
    send += ["--payload", '{"quantity": 2}', "--wait", "0", "--reply-topic", replies]
    done = run_cli(send, env, secured_logs / "role-client-send.log")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    message_id = json.loads(done.stdout)["messageId"]
    [sent] = asyncio.run(read_topic(bootstrap, s.commands.command_topic))
    assert sent.value is not None and json.loads(sent.value)["messageId"] == message_id

    [write] = [line for line in lines if "--operation Write" in line]
    remove(secured_broker, admin_config, write)
    done = run_cli(send, env, secured_logs / "role-client-send-denied.log")
    assert done.returncode != 0, done.stdout[-2000:]
    assert len(asyncio.run(read_topic(bootstrap, s.commands.command_topic))) == 1


def test_the_compactor_and_replayer_roles(
    secured_broker: SecuredKafkaBroker,
    admin_config: Path,
    user_password: Secret,
    secured_settings: Settings,
    secured_logs: Path,
    tmp_path: Path,
) -> None:
    """``compact`` stores the ordered input's messages; ``replay`` publishes
    them to a topic it creates. Without Create, replay stops before Spark."""
    s = secured_settings
    bootstrap = s.broker.bootstrap
    asyncio.run(create_topics(bootstrap, s.topics(), 2))  # (as admin, as a worker would)
    w = generate(messages=30, keys=3, seed=4)
    asyncio.run(publish(bootstrap, s.ordered.input_topic, w.records))
    env = user_env(s, user_password)
    run_as_printed(
        secured_broker,
        admin_config,
        role_acls(env, "compactor", secured_logs / "role-compactor.log"),
    )
    warehouse = tmp_path / "warehouse"
    compact = ["compact", "-b", bootstrap, "--warehouse", str(warehouse), "--master", "local[1]"]
    done = run_cli(compact, env, secured_logs / "role-compact.log")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"committed under {warehouse}:" in done.stdout, done.stdout[-2000:]
    # one row per message id per stream: the workload's malformed records
    # hold one byte-identical copy of an id (bad-7), counted, not stored
    found = re.search(r"audit run 1: (\d+) rows, (\d+) identical copies", done.stdout)
    assert found, done.stdout[-2000:]
    rows, copies = int(found[1]), int(found[2])
    assert rows + copies == len(w.records) and copies >= 1

    target = f"replayed-{uuid.uuid4().hex[:8]}"
    lines = role_acls(env, "replayer", secured_logs / "role-replayer.log", "--topic", target)
    run_as_printed(secured_broker, admin_config, lines)
    replay = ["replay", "-b", bootstrap, "--warehouse", str(warehouse), "--master", "local[1]"]
    done = run_cli([*replay, "--topic", target], env, secured_logs / "role-replay.log")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{rows} messages published to {target}" in done.stdout, done.stdout
    assert len(asyncio.run(read_topic(bootstrap, target))) == rows

    other = f"replayed-{uuid.uuid4().hex[:8]}"
    lines = role_acls(env, "replayer", secured_logs / "role-replayer-2.log", "--topic", other)
    run_as_printed(secured_broker, admin_config, [x for x in lines if "Create" not in x])
    done = run_cli([*replay, "--topic", other], env, secured_logs / "role-replay-denied.log")
    assert done.returncode == 1 and other in done.stderr, done.stderr[-2000:]


def test_acls_roles_print_no_group_and_no_transactional_id(
    secured_settings: Settings, user_password: Secret, secured_logs: Path
) -> None:
    env = user_env(secured_settings, user_password)
    for role, args in (
        ("reader", ()),
        ("compactor", ()),
        ("client", ()),
        ("replayer", ("--topic", "t")),
    ):
        for line in role_acls(env, role, secured_logs / f"role-shape-{role}.log", *args):
            words = shlex.split(line)
            assert "--group" not in words and "--transactional-id" not in words, line
