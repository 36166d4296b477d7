"""Every command that connects to Kafka, on a security failure (a wrong
password, a CA that did not sign the broker's certificate, no client
certificate on the mutual TLS listener): exit 1 within seconds, no
traceback, and one ``error:`` line naming the cause, which no other line
repeats (aiokafka's own line of it, ``Unable connect to ...``, is not
printed). The worker and ``verify`` are test_secured_kafka's and
test_mtls's; ``verify`` is run here too, as every connecting command is.

``replay`` and ``compact`` connect after Spark has started (``replay``
after it selected from the warehouse): the check at their start stops them
before, so the warehouse here does not exist (``replay`` reads it only
once the connection is known to work).

A client certificate of another CA on the mutual TLS listener: the same
line as for none, naming the certificate. A user granted all a command
needs but one ACL (``verify``, ``inspect``, ``compact``, ``replay``,
``send``, and ``seqkeeper.client``): one line naming the user, the topic
and the grant, and nothing written."""

from __future__ import annotations

import asyncio
import base64
import os
import shlex
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from seqkeeper.client import CommandClient, SyncCommandClient
from seqkeeper.demo import publish
from seqkeeper.permissions import Grant, PermissionDenied
from seqkeeper.security import BrokerRefused, ClientSecurity, installed, kafka_options
from seqkeeper.settings import Secret, Settings
from seqkeeper.spark_sink.crypto import KEY_ENV, Sealer
from seqkeeper.topics import create_topics, end_offsets_of
from tests.kafka_tools import run_commands
from tests.secured_broker import SecuredKafkaBroker, make_tls_files
from tests.security.test_secured_kafka import WRONG_PASSWORD, error_lines, run_cli, verify_args
from tests.spark_sink.small_store import build

pytestmark = pytest.mark.integration


def command(name: str, settings: Settings, tmp: Path) -> list[str]:
    """``name``'s arguments: as small a run as it takes, on ``settings``' broker."""
    b = settings.broker.bootstrap
    return {
        "demo": ["demo", "-b", b, "--messages", "50", "--keys", "5", "--timeout", "30"],
        "demo-commands": ["demo", "-b", b, "--topology", "commands", "--commands", "5"],
        "inspect": ["inspect", "-b", b, "--message-id", "cmd-1-0", "--web-port", "0"],
        "replay": ["replay", "-b", b, "--topic", "replayed", "--warehouse", str(tmp / "wh")],
        "compact": ["compact", "-b", b, "--warehouse", str(tmp / "wh")],
        "bench": ["bench", "-b", b, "--smoke", "--only", "throughput", "--messages", "200"]
        + ["--out", str(tmp / "bench"), "--workdir", str(tmp / "bench-work")],
        "chaos": ["chaos", "-b", b, "--short", "--scenario", "kill", "--workdir", str(tmp / "c")],
        "send": ["send", "-b", b, "--type", "Reserve", "--key", "k1", "--wait", "0"],
        "verify": verify_args(settings),
    }[name]


COMMANDS = [
    "demo",
    "demo-commands",
    "inspect",
    "replay",
    "compact",
    "bench",
    "chaos",
    "send",
    "verify",
]


def one_line_failure(args: list[str], settings: Settings, log: Path, cause: str) -> str:
    """Run ``args`` on ``settings`` (their environment) and check it fails
    fast with one line naming ``cause``, and nothing else naming it: that line."""
    env = {**os.environ, **settings.to_env()}
    started = time.monotonic()
    done = run_cli(args, env, log)
    took = time.monotonic() - started
    text = done.stdout + done.stderr
    assert done.returncode == 1, (done.returncode, text[-3000:])
    assert took < 60, took
    assert "Traceback" not in text, text[-3000:]
    lines = error_lines(text)
    assert len(lines) == 1, text[-3000:]
    [line] = lines
    assert cause in line and settings.broker.bootstrap in line, line
    # aiokafka's line of it ("Unable connect to ...: [Error 58] ... Authentication
    # failed ...", "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    # is not printed: our line replaces it
    naming = [s for s in text.splitlines() if cause.lower() in s.lower()]
    assert naming == [line], naming
    for theirs in ("Unable connect", "Unable to request metadata", "Unable to bootstrap"):
        assert theirs not in text, text[-3000:]
    return line


@pytest.mark.parametrize("name", COMMANDS)
def test_a_wrong_password_is_one_line(
    name: str, secured_settings: Settings, secured_logs: Path, tmp_path: Path
) -> None:
    settings = secured_settings.with_overrides(sasl_password=WRONG_PASSWORD)
    args = command(name, settings, tmp_path)
    line = one_line_failure(
        args, settings, secured_logs / f"cli-{name}-wrong-password.log", "authentication failed"
    )
    assert "SCRAM-SHA-512" in line, line


@pytest.mark.parametrize("name", ["inspect", "bench", "replay"])
def test_an_untrusted_ca_is_one_line(
    name: str, secured_settings: Settings, secured_logs: Path, tmp_path: Path
) -> None:
    other = make_tls_files(tmp_path / "other-ca")  # a CA that did not sign the broker's
    settings = secured_settings.with_overrides(ssl_cafile=str(other.ca))
    args = command(name, settings, tmp_path)
    one_line_failure(
        args, settings, secured_logs / f"cli-{name}-untrusted.log", "certificate verify failed"
    )


@pytest.mark.parametrize("name", ["demo", "chaos"])
def test_no_client_certificate_is_one_line(
    name: str, mtls_settings: Settings, secured_logs: Path, tmp_path: Path
) -> None:
    settings = mtls_settings.with_overrides(ssl_certfile="", ssl_keyfile="")
    args = command(name, settings, tmp_path)
    one_line_failure(
        args,
        settings,
        secured_logs / f"cli-{name}-no-client-cert.log",
        "requires a client certificate",
    )


@pytest.mark.parametrize("name", ["verify", "inspect", "compact", "replay", "send"])
def test_a_client_certificate_of_another_ca_is_one_line(
    name: str, mtls_settings: Settings, secured_logs: Path, tmp_path: Path
) -> None:
    """The mTLS listener refuses a client certificate its truststore does
    not trust (Java's TLS: ``certificate_unknown``): the line says so,
    as for no certificate, and names the certificate given."""
    other = make_tls_files(tmp_path / "other-ca", clients=("admin",))
    client = other.clients["admin"]  # CN=admin, as the broker's own, but of another CA
    settings = mtls_settings.with_overrides(
        ssl_certfile=str(client.cert), ssl_keyfile=str(client.key)
    )
    args = command(name, settings, tmp_path)
    line = one_line_failure(
        args,
        settings,
        secured_logs / f"cli-{name}-other-ca-cert.log",
        "TLS handshake failed: the broker requires a client certificate it trusts",
    )
    assert f"[SSL, client certificate {client.cert}]" in line, line


# -- a missing ACL ---------------------------------------------------------------

#: The user of the cases below: a SCRAM user with only the ACLs :func:`operator` grants.
OPERATOR = "operator"


@dataclass(frozen=True)
class Operator:
    """The topics of the cases (made by the admin, ``tag`` in their names)
    and the password of :data:`OPERATOR`."""

    tag: str
    password: Secret
    admin_config: Path

    def topic(self, name: str) -> str:
        return f"{name}-{self.tag}"


@pytest.fixture(scope="module")
def operator(
    secured_broker: SecuredKafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Operator:
    """:data:`OPERATOR` and the topics, each granted all the cases need but
    one ACL (Describe only, or nothing): four JVMs at once, then every case
    is one CLI run."""
    tag = uuid.uuid4().hex[:8]
    admin_config = secured_broker.admin_properties(
        tmp_path_factory.mktemp("cli-acl-admin") / "admin.properties"
    )
    op = Operator(tag, Secret(uuid.uuid4().hex), admin_config)
    t = op.topic
    # (v-late is never created: verify reads it when it exists, so it may read it)
    reads = [t("v-in"), t("v-ord"), t("v-dd"), t("v-late"), t("c-in"), t("s1-rep")]
    reads.append(f"c-{tag}-state-changelog")
    described = [t("v-dlq"), f"i-{tag}-commands-commands-changelog", t("c-ord"), t("r")]
    described += [t("s1-cmd"), t("s2-rep")]
    writes = [t("r-new"), t("s2-cmd")]
    b = secured_broker.bootstrap
    jobs = [
        (
            "kafka-configs.sh",
            f"--bootstrap-server {b} --command-config admin.properties --alter --add-config "
            f"SCRAM-SHA-512=[password={op.password.reveal()}] "
            f"--entity-type users --entity-name {OPERATOR}",
        ),
        *(
            tuple(Grant((o,), "topic", tuple(names)).command(OPERATOR, b).split(" ", 1))
            for o, names in (("Read", reads), ("Describe", described), ("Write", writes))
        ),
    ]
    procs = [
        subprocess.Popen(
            [str(secured_broker.home / "bin" / tool), *shlex.split(args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for tool, args in (
            (tool, args.replace("admin.properties", str(admin_config))) for tool, args in jobs
        )
    ]
    with installed(secured_broker.client_security()):
        created = [*reads, *described, t("s2-cmd")]
        created.remove(t("v-late"))
        asyncio.run(create_topics(b, created, 2))
        records = [(b"k", orjson.dumps({"messageId": "m1", "seq": 1}))]
        for topic in (f"c-{tag}-state-changelog", t("c-in"), t("c-ord")):
            asyncio.run(publish(b, topic, records))
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0, out[-2000:]
    return op


def operator_case(
    case: str, op: Operator, settings: Settings, tmp: Path
) -> tuple[list[str], Settings, str, str]:
    """The CLI arguments of ``case``, its settings, and the operation and
    topic the line must name."""
    t, tag = op.topic, op.tag
    b = settings.broker.bootstrap
    if case == "verify":
        names = {"input_topic": t("v-in"), "ordered_topic": t("v-ord"), "deduped_topic": t("v-dd")}
        names |= {"dlq_topic": t("v-dlq"), "late_topic": t("v-late")}
        return ["verify", "-b", b], settings.with_overrides(**names), "Read", t("v-dlq")
    if case == "inspect":
        args = ["inspect", "-b", b, "--message-id", "m1", "--web-port", "0"]
        changelog = f"i-{tag}-commands-commands-changelog"
        return args, settings.with_overrides(app_id=f"i-{tag}"), "Read", changelog
    if case == "compact":
        names = {"app_id": f"c-{tag}", "input_topic": t("c-in"), "ordered_topic": t("c-ord")}
        names |= {n: t(f"c-{n}") for n in ("deduped_topic", "dlq_topic", "late_topic")}
        names |= {n: t(f"c-{n}") for n in ("command_topic", "events_topic", "command_dlq_topic")}
        args = ["compact", "-b", b, "--warehouse", str(tmp / "warehouse")]
        return args, settings.with_overrides(**names), "Read", t("c-ord")
    if case in ("replay", "replay-create"):
        topic, operation = (t("r"), "Write") if case == "replay" else (t("r-new"), "Create")
        args = ["replay", "-b", b, "--topic", topic, "--warehouse", str(tmp / "warehouse")]
        return args, settings, operation, topic
    n, operation = ("s1", "Write") if case == "send-write" else ("s2", "Read")
    args = ["send", "--type", "AddStock", "--key", "k1", "--wait", "5"]
    args += ["--command-topic", t(f"{n}-cmd"), "--reply-topic", t(f"{n}-rep")]
    return args, settings, operation, t(f"{n}-cmd" if operation == "Write" else f"{n}-rep")


@pytest.mark.parametrize(
    "case",
    ["verify", "inspect", "compact", "replay", "replay-create", "send-write", "send-read"],
)
def test_a_missing_acl_is_one_line_and_nothing_is_written(
    case: str,
    operator: Operator,
    secured_broker: SecuredKafkaBroker,
    secured_settings: Settings,
    secured_logs: Path,
    audit_keys: tuple[str, str],
    tmp_path: Path,
) -> None:
    """A user granted all a command needs but one ACL: exit 1 within
    seconds, one line (nothing else on either stream) naming the user, the
    topic and the ``kafka-acls.sh`` command that grants the operation; and
    nothing written: ``compact`` commits no run (Spark never starts),
    ``replay`` and ``send`` send nothing. ``verify`` then passes once the
    printed command was run."""
    as_operator = secured_settings.with_overrides(
        sasl_username=OPERATOR, sasl_password=operator.password.reveal()
    )
    args, settings, operation, topic = operator_case(case, operator, as_operator, tmp_path)
    t = operator.topic
    key = audit_keys[0]
    if case.startswith("replay"):  # an audit log to replay (without Kafka)
        build(tmp_path / "warehouse", [Sealer(base64.urlsafe_b64decode(key), ("email",))])
    sent = [t("r"), t("s1-cmd"), t("s2-cmd")]
    before = asyncio.run(end_offsets_of(secured_broker.bootstrap, sent))
    env = {**os.environ, **settings.to_env(), KEY_ENV: key}
    started = time.monotonic()
    done = run_cli(args, env, secured_logs / f"cli-acl-{case}.log")
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert done.stdout == "", done.stdout[-3000:]
    [line] = done.stderr.splitlines()  # one line, no other
    assert took < 60, took
    assert line.startswith(f"error: user {OPERATOR!r} may not {operation} topic {topic!r} ("), line
    grant = (
        f"kafka-acls.sh --bootstrap-server {settings.broker.bootstrap} --command-config "
        f"admin.properties --add --allow-principal User:{OPERATOR} --operation {operation} "
        f"--topic {topic}"
    )
    assert line.endswith(f": grant it with {grant}"), line
    # nothing written
    assert not (tmp_path / "warehouse" / "snapshots").exists()
    assert asyncio.run(end_offsets_of(secured_broker.bootstrap, sent)) == before
    with installed(secured_broker.client_security()):
        assert asyncio.run(topic_exists(secured_broker.bootstrap, t("r-new"))) is False
    if case == "verify":  # the printed command is the fix
        command = grant.replace("admin.properties", str(operator.admin_config))
        run_commands(secured_broker.home, [shlex.split(command)])
        done = run_cli([*args, "--json"], env, secured_logs / "cli-acl-verify-granted.log")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert orjson.loads(done.stdout)["ok"], done.stdout


async def topic_exists(bootstrap: str, topic: str) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_options())
    try:
        await admin.start()
        return topic in await admin.list_topics()
    finally:
        await admin.close()


def test_the_command_client_raises_the_same_line(
    operator: Operator,
    secured_broker: SecuredKafkaBroker,
    as_admin: ClientSecurity,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``seqkeeper.client`` (what ``send`` uses): a typed one-line refusal
    at start, before anything is sent, not aiokafka's error or a timeout."""
    t = operator.topic
    monkeypatch.setenv("SEQKEEPER_SASL_USERNAME", OPERATOR)
    monkeypatch.setenv("SEQKEEPER_SASL_PASSWORD", operator.password.reveal())
    b = secured_broker.bootstrap
    options = {"command_topic": t("s2-cmd"), "reply_topic": t("s2-rep")}

    async def start() -> None:
        async with CommandClient(b, **options) as client:
            await client.request("AddStock", "k1", {"quantity": 1}, timeout=5)

    with pytest.raises(PermissionDenied) as caught:
        asyncio.run(start())
    assert isinstance(caught.value, BrokerRefused)
    expected = f"user {OPERATOR!r} may not Read topic {t('s2-rep')!r} ("
    assert str(caught.value).startswith(expected), caught.value
    assert "\n" not in str(caught.value)
    with pytest.raises(PermissionDenied, match="may not Read topic"):
        SyncCommandClient(b, **options).start()
