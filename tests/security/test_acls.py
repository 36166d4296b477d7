"""Least privilege, proven on Apache Kafka with the StandardAuthorizer
(tests/security/conftest.py): a user granted exactly the ACLs
:func:`seqkeeper.permissions.worker_grants` lists (the ``kafka-acls.sh``
commands of docs/security.md, run as they are printed) runs the ordered
worker (exactly_once), with its repartition stage when the key is a field
of the value, and the command worker; with every topic created by an admin
neither needs Create; without one of them the worker exits 1 at once with
one line naming the operation and the resource."""

from __future__ import annotations

import asyncio
import shlex
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from seqkeeper.client import CommandClient
from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.permissions import Grant, internal_topics, worker_grants
from seqkeeper.runtime.repartition import group_of
from seqkeeper.security import Secret, kafka_options
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.kafka_tools import run_commands as run_commands_of
from tests.secured_broker import SecuredKafkaBroker

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
    command = (
        f"kafka-configs.sh --bootstrap-server {secured_broker.bootstrap} "
        f"--command-config {admin_config} "
        f"--alter --add-config SCRAM-SHA-512=[password={password.reveal()}] "
        f"--entity-type users --entity-name {USER}"
    )
    run_commands_of(secured_broker.home, [shlex.split(command)])
    return password


def grant(broker: SecuredKafkaBroker, admin_config: Path, grants: list[Grant]) -> None:
    """Run the documented ``kafka-acls.sh`` commands, as a shell splits them
    (in one JVM: tests/kafka_tools)."""
    run_commands_of(
        broker.home,
        [
            shlex.split(
                g.command(USER, broker.bootstrap).replace("admin.properties", str(admin_config))
            )
            for g in grants
        ],
    )


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


#: The value's field that holds the sequence key, with ``key_field``.
FIELD = "account"


def keyed_by_field(
    records: list[tuple[bytes | None, bytes | None]],
) -> list[tuple[bytes | None, bytes | None]]:
    """The workload as producers that key by something else send it: each
    message's key moved into its value (:data:`FIELD`) and the record keyed
    by one of five other keys, so a key's messages spread over the
    partitions (the malformed records as they were)."""
    out: list[tuple[bytes | None, bytes | None]] = []
    for i, (key, value) in enumerate(records):
        try:
            doc = orjson.loads(value) if value is not None else None
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and key is not None:
            out.append((f"other-{i % 5}".encode(), orjson.dumps({**doc, FIELD: key.decode()})))
        else:
            out.append((key, value))
    return out


def run_ordered(settings: Settings, log: Path) -> str:
    """A small workload through the ordered worker; ``verify`` (as admin)
    passes. With ``key_field`` (:data:`FIELD`) the workload's keys are in
    the values and the records keyed otherwise (:func:`keyed_by_field`):
    the worker's repartition stage brings each key's messages together."""
    w = generate(messages=300, keys=8, malformed=2, seed=7)
    by_key_field = bool(settings.ordered.key_field)
    records = keyed_by_field(w.records) if by_key_field else w.records
    asyncio.run(create_topics(settings.broker.bootstrap, [settings.ordered.input_topic], 2))
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, records))
    worker = WorkerProcess(settings, log).start()
    try:
        worker.wait_ready(120)  # (it creates the topics verify reads)
        # (with a key field: verified in the settings' shape, keyed by the field)
        report = asyncio.run(wait_until_verified(settings, 120, worker))
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


def test_the_repartition_stage_with_the_documented_acls(
    secured_broker: SecuredKafkaBroker, admin_config: Path, as_user: Settings, secured_logs: Path
) -> None:
    """The key a field of the value: the worker's repartition stage (its
    own group and its topic ``G-<input>-repartition``) runs on the ACLs
    printed for these settings."""
    settings = as_user.with_overrides(key_field=FIELD)
    grants = worker_grants(settings)
    assert any(g.kind == "group" and group_of(settings) in g.names for g in grants)
    grant(secured_broker, admin_config, grants)
    run_ordered(settings, secured_logs / "acl-repartition.log")


def command_worker(settings: Settings) -> Settings:
    """``settings`` for the command worker, on topics named for the test
    (the broker is the session's: on the default ``commands.in`` a second
    test's worker would apply the first one's commands again)."""
    tag = settings.runtime.app_id
    return settings.with_overrides(
        topology="commands",
        command_topic=f"commands-{tag}",
        events_topic=f"events-{tag}",
        command_dlq_topic=f"commands-dlq-{tag}",
    )


def run_commands(settings: Settings, reply_topic: str, log: Path) -> str:
    """Nine commands through the command worker; their replies (as admin)
    come back, each applied once."""
    tag = settings.runtime.app_id
    worker = WorkerProcess(settings, log).start()
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
    text = worker.log()
    assert code == 0, text[-3000:]
    return text


def test_the_command_worker_with_the_documented_acls(
    secured_broker: SecuredKafkaBroker, admin_config: Path, as_user: Settings, secured_logs: Path
) -> None:
    settings = command_worker(as_user)
    reply_topic = f"{settings.runtime.app_id}.replies"
    grant(secured_broker, admin_config, worker_grants(settings, reply_topics=[reply_topic]))
    run_commands(settings, reply_topic, secured_logs / "acl-commands.log")


def test_the_command_worker_with_precreated_topics_needs_no_create_acl(
    secured_broker: SecuredKafkaBroker, admin_config: Path, as_user: Settings, secured_logs: Path
) -> None:
    settings = command_worker(as_user)
    reply_topic = f"{settings.runtime.app_id}.replies"
    precreate(settings)
    grants = worker_grants(settings, create=False, reply_topics=[reply_topic])
    assert not any("Create" in g.operations for g in grants)
    grant(secured_broker, admin_config, grants)
    text = run_commands(settings, reply_topic, secured_logs / "acl-commands-precreated.log")
    assert "exactly_once" in text, text[-3000:]


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


@pytest.mark.parametrize(
    "case", ["input-read", "group-read", "repartition-group-read", "output-write", "create"]
)
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
    elif case == "repartition-group-read":
        s = s.with_overrides(key_field=FIELD)
        grants, expected = (
            without(worker_grants(s), "Read", "group", group_of(s)),
            f"Read group {group_of(s)!r}",
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


#: A processor whose outputs go to two other topics (their names in the environment).
SIDE = """
import os

from seqkeeper import Output


def fn(state, message):
    named, prefixed = os.environ["SIDE_NAMED"], os.environ["SIDE_PREFIXED"]
    return state, [Output(message.seq, topic=named), Output(message.seq, topic=prefixed)]
"""


def test_a_processors_topics_with_the_documented_acls(
    secured_broker: SecuredKafkaBroker,
    admin_config: Path,
    as_user: Settings,
    secured_logs: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``SEQKEEPER_PROCESSOR_TOPICS``: a name (created by the worker at
    start, Write and Create granted on it) and a ``prefix*`` pattern (a
    prefixed Write ACL; its topic created by an admin) take the processor's
    outputs with the ACLs printed for these settings, and nothing more."""
    tag = as_user.group_id.removeprefix("app-")
    named, prefixed = f"side-{tag}", f"pre-{tag}.one"
    monkeypatch.setenv("SIDE_NAMED", named)
    monkeypatch.setenv("SIDE_PREFIXED", prefixed)
    project = tmp_path / "project"
    project.mkdir()
    (project / "side.py").write_text(SIDE)
    settings = as_user.with_overrides(
        processor="side:fn",
        processor_topics=f"{named},pre-{tag}.*",
        processed_topic=f"processed-{tag}",
    )
    bootstrap = settings.broker.bootstrap
    asyncio.run(create_topics(bootstrap, [settings.ordered.input_topic, prefixed], 2))
    grant(secured_broker, admin_config, worker_grants(settings))
    records = [
        (b"k", orjson.dumps({"messageId": f"m{i}", "seq": i, "type": "t", "data": i}))
        for i in range(1, 6)
    ]
    asyncio.run(publish(bootstrap, settings.ordered.input_topic, records))
    worker = WorkerProcess(settings, secured_logs / "acl-processor-topics.log", cwd=project).start()
    try:
        worker.wait_ready(120)
        deadline = time.monotonic() + 90
        while True:
            got = [
                asyncio.run(read_topic(bootstrap, t, isolation="read_committed"))
                for t in (named, prefixed)
            ]
            if all(len(g) >= len(records) for g in got):
                break
            worker.check_alive()
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.5)
    finally:
        code = worker.stop()
    assert code == 0, worker.log()[-3000:]
    for g in got:
        assert sorted(orjson.loads(r.value)["data"] for r in g) == [1, 2, 3, 4, 5]
