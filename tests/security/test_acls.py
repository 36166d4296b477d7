"""Least privilege, proven on Apache Kafka with the StandardAuthorizer
(tests/security/conftest.py): a user granted exactly the ACLs
:func:`seqkeeper.permissions.worker_grants` lists (the ``kafka-acls.sh``
commands of docs/security.md, run as they are printed) runs the ordered
worker (exactly_once) and the command worker; with every topic created by
an admin it needs no Create; without one of them the worker exits 1 at
once with one line naming the operation and the resource."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from seqkeeper.broker import SecuredKafkaBroker
from seqkeeper.client import CommandClient
from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.permissions import Grant, internal_topics, worker_grants
from seqkeeper.security import Secret, kafka_options
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess

pytestmark = pytest.mark.integration

USER = "seqkeeper"


@pytest.fixture(scope="module")
def admin_config(
    secured_broker: SecuredKafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """admin.properties (outside the logs the last test scans for passwords)."""
    return secured_broker.admin_properties(
        tmp_path_factory.mktemp("acl-admin") / "admin.properties"
    )


@pytest.fixture(scope="module")
def user_password(secured_broker: SecuredKafkaBroker, admin_config: Path) -> Secret:
    """The SCRAM user ``seqkeeper``, with no ACL (each test grants its own,
    on resources named for the test)."""
    password = Secret(uuid.uuid4().hex)
    kafka_tool(
        secured_broker,
        "kafka-configs.sh",
        f"--bootstrap-server {secured_broker.bootstrap} --command-config {admin_config} "
        f"--alter --add-config SCRAM-SHA-512=[password={password.reveal()}] "
        f"--entity-type users --entity-name {USER}",
    )
    return password


def kafka_tool(broker: SecuredKafkaBroker, tool: str, args: str) -> None:
    done = subprocess.run(
        [str(broker.home / "bin" / tool), *shlex.split(args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def grant(broker: SecuredKafkaBroker, admin_config: Path, grants: list[Grant]) -> None:
    """Run the documented ``kafka-acls.sh`` commands, all at once (one JVM each)."""
    procs = []
    for g in grants:
        command = g.command(USER, broker.bootstrap).replace("admin.properties", str(admin_config))
        [tool, *args] = shlex.split(command)
        procs.append(
            subprocess.Popen(
                [str(broker.home / "bin" / tool), *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out[-2000:]


@pytest.fixture
def as_user(
    secured_broker: SecuredKafkaBroker, secured_settings: Settings, user_password: Secret
) -> Iterator[Settings]:
    """The test's settings, for worker processes that connect as ``seqkeeper``
    (this process stays ``admin``: it publishes and verifies)."""
    yield secured_settings.with_overrides(sasl_username=USER, sasl_password=user_password.reveal())


def precreate(settings: Settings) -> None:
    """Every topic of the worker and of Faust, as an admin (the changelog
    compacted, as Faust would create it)."""
    asyncio.run(create_topics(settings.broker.bootstrap, settings.topics(), 2))

    async def faust_topics() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.broker.bootstrap, **kafka_options())
        await admin.start()
        try:
            changelog, leader = internal_topics(settings)
            await admin.create_topics(
                [
                    NewTopic(changelog, 2, 1, topic_configs={"cleanup.policy": "compact"}),
                    NewTopic(leader, 2, 1),
                ]
            )
        finally:
            await admin.close()

    asyncio.run(faust_topics())


def run_ordered(settings: Settings, log: Path) -> str:
    """A small workload through the ordered worker; ``verify`` (as admin) passes."""
    w = generate(messages=300, keys=8, malformed=2, seed=7)
    asyncio.run(create_topics(settings.broker.bootstrap, [settings.ordered.input_topic], 2))
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, w.records))
    worker = WorkerProcess(settings, log).start()
    try:
        worker.wait_ready(120)  # (it creates the topics verify reads)
        report = asyncio.run(wait_until_verified(settings, timeout=120, worker=worker))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
    finally:
        code = worker.stop()
    text = worker.log()
    assert code == 0, text[-3000:]
    assert "exactly_once" in text, text[-3000:]
    return text


def test_the_ordered_worker_with_the_documented_acls(
    secured_broker: SecuredKafkaBroker, admin_config: Path, as_user: Settings, secured_logs: Path
) -> None:
    grant(secured_broker, admin_config, worker_grants(as_user))
    run_ordered(as_user, secured_logs / "acl-ordered.log")


def test_precreated_topics_need_no_create_acl(
    secured_broker: SecuredKafkaBroker, admin_config: Path, as_user: Settings, secured_logs: Path
) -> None:
    precreate(as_user)
    grants = worker_grants(as_user, create=False)
    assert not any("Create" in g.operations for g in grants)
    grant(secured_broker, admin_config, grants)
    run_ordered(as_user, secured_logs / "acl-precreated.log")


def test_the_command_worker_with_the_documented_acls(
    secured_broker: SecuredKafkaBroker, admin_config: Path, as_user: Settings, secured_logs: Path
) -> None:
    settings = as_user.with_overrides(topology="commands")
    tag = settings.runtime.app_id
    reply_topic = f"replies-{tag}"
    grant(secured_broker, admin_config, worker_grants(settings, reply_topics=[reply_topic]))
    worker = WorkerProcess(settings, secured_logs / "acl-commands.log").start()
    try:
        worker.wait_ready(120)

        async def requests() -> None:
            async with CommandClient(
                settings.broker.bootstrap,
                command_topic=settings.commands.command_topic,
                client_id=f"client-{tag}",
                reply_topic=reply_topic,
            ) as client:
                replies = await asyncio.gather(
                    *(
                        client.request("AddStock", f"sku-{i % 3}", {"quantity": 2}, timeout=60)
                        for i in range(9)
                    )
                )
            assert all(r.success for r in replies), [r.message for r in replies]
            assert sorted(r.version or 0 for r in replies) == [1, 1, 1, 2, 2, 2, 3, 3, 3]

        asyncio.run(requests())
    finally:
        code = worker.stop()
    assert code == 0, worker.log()[-3000:]


def without(grants: list[Grant], operation: str, kind: str, name: str) -> list[Grant]:
    """``grants`` less ``operation`` on the resource ``kind`` ``name``."""
    kept = []
    for g in grants:
        if g.kind == kind and name in g.names and operation in g.operations:
            names = tuple(n for n in g.names if n != name)
            if names:
                kept.append(Grant(g.operations, g.kind, names, g.prefixed))
            ops = tuple(o for o in g.operations if o != operation)
            if ops:
                kept.append(Grant(ops, g.kind, (name,), g.prefixed))
        else:
            kept.append(g)
    return kept


@pytest.mark.parametrize("case", ["input-read", "group-read", "output-write", "create"])
def test_a_missing_acl_is_one_line_naming_it(
    case: str,
    secured_broker: SecuredKafkaBroker,
    admin_config: Path,
    as_user: Settings,
    secured_logs: Path,
) -> None:
    s = as_user
    o = s.ordered
    grants = worker_grants(s)
    if case == "input-read":
        grants, expected = (
            without(grants, "Read", "topic", o.input_topic),
            f"Read topic {o.input_topic!r}",
        )
    elif case == "group-read":
        grants, expected = (
            without(grants, "Read", "group", s.group_id),
            f"Read group {s.group_id!r}",
        )
    elif case == "output-write":
        grants = without(grants, "Write", "topic", o.deduped_topic)
        expected = f"Write topic {o.deduped_topic!r}"
    else:
        grants = worker_grants(s, create=False)
        expected = f"Create topic {o.input_topic!r}"
    if case != "create":
        precreate(s)  # (so each case fails on its own ACL alone)
    grant(secured_broker, admin_config, grants)
    started = time.monotonic()
    worker = WorkerProcess(s, secured_logs / f"acl-denied-{case}.log").start()
    assert worker.proc is not None
    try:
        code = worker.proc.wait(90)
    finally:
        worker.stop()
    took = time.monotonic() - started
    log = worker.log()
    assert code == 1, log[-3000:]
    assert took < 60, took
    assert "Traceback" not in log, log[-3000:]
    [line] = [x for x in log.splitlines() if x.startswith("error:")]
    assert f"user {USER!r} may not {expected}" in line, line
    assert f"--allow-principal User:{USER}" in line and "kafka-acls.sh" in line, line
