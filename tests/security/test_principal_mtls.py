"""The certificate's principal on Apache Kafka (tests/security/conftest.py:
an mTLS listener, the StandardAuthorizer, the broker's
``ssl.principal.mapping.rules`` :data:`PRINCIPAL_RULES`): with a client
certificate and no SASL user, ``seqkeeper acls`` prints the principal the
broker derives from the certificate, granting exactly the printed ACLs
lets the worker run end to end over mTLS, and a missing ACL's one line
names the same principal. Two certificates: ``CN=worker-a,OU=streams,O=Example``,
whose principal is its whole subject (no rule but DEFAULT applies), and
``CN=Worker-B,OU=mapped,O=Example``, which a rule maps to ``worker-b``
(the same rules given to seqkeeper)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from seqkeeper.settings import Settings
from tests.kafka_tools import run_commands
from tests.secured_broker import SecuredKafkaBroker
from tests.security.conftest import PRINCIPAL_RULES
from tests.security.test_acls import precreate, run_ordered
from tests.security.test_secured_kafka import run_cli, worker_error

pytestmark = pytest.mark.integration

#: certificate, the rules seqkeeper is given, the principal the broker derives
CASES = [
    ("worker-a", "DEFAULT", "CN=worker-a,OU=streams,O=Example"),
    ("worker-b", PRINCIPAL_RULES, "worker-b"),
]


@pytest.fixture(scope="module")
def admin_config(
    secured_broker: SecuredKafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """admin.properties (outside the logs the last test scans for passwords)."""
    return secured_broker.admin_properties(
        tmp_path_factory.mktemp("principal-admin") / "admin.properties"
    )


def by_certificate(
    broker: SecuredKafkaBroker, settings: Settings, name: str, rules: str
) -> Settings:
    """``settings`` (mTLS) with the client certificate ``name`` and the mapping ``rules``."""
    client = broker.client_security_mtls(name)
    return settings.with_overrides(
        ssl_certfile=client.certfile,
        ssl_keyfile=client.keyfile,
        ssl_principal_mapping_rules=rules,
    )


def printed_acls(settings: Settings, log: Path) -> list[str]:
    """What ``seqkeeper acls`` prints with ``settings`` as its environment."""
    done = run_cli(["acls"], {**os.environ, **settings.to_env()}, log)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines and all(line.startswith("kafka-acls.sh ") for line in lines), lines
    return lines


def run_as_printed(broker: SecuredKafkaBroker, admin_config: Path, lines: list[str]) -> None:
    """Each ``kafka-acls.sh`` command as a shell splits it (in one JVM:
    tests/kafka_tools), with the admin's config file and its SASL_SSL
    listener (the printed bootstrap is the worker's mTLS one)."""
    commands = []
    for line in lines:
        [tool, *args] = shlex.split(line)
        at = args.index("--bootstrap-server") + 1
        args[at] = broker.bootstrap
        args[args.index("admin.properties")] = str(admin_config)
        commands.append([tool, *args])
    run_commands(broker.home, commands)


@pytest.mark.parametrize(("certificate", "rules", "principal"), CASES, ids=["subject", "mapped"])
def test_the_printed_acls_name_the_certificate_and_run_the_worker(
    certificate: str,
    rules: str,
    principal: str,
    secured_broker: SecuredKafkaBroker,
    admin_config: Path,
    mtls_settings: Settings,
    secured_logs: Path,
) -> None:
    settings = by_certificate(secured_broker, mtls_settings, certificate, rules)
    lines = printed_acls(settings, secured_logs / f"acls-{certificate}.log")
    assert all(shlex.split(line)[7] == f"User:{principal}" for line in lines), lines
    run_as_printed(secured_broker, admin_config, lines)
    run_ordered(settings, secured_logs / f"principal-{certificate}.log")


@pytest.mark.parametrize(("certificate", "rules", "principal"), CASES, ids=["subject", "mapped"])
def test_a_missing_acl_names_the_certificates_principal(
    certificate: str,
    rules: str,
    principal: str,
    secured_broker: SecuredKafkaBroker,
    admin_config: Path,
    mtls_settings: Settings,
    secured_logs: Path,
) -> None:
    """All printed ACLs but Read on the input: the worker's one line names
    the principal, and its grant is the printed one left out."""
    settings = by_certificate(secured_broker, mtls_settings, certificate, rules)
    lines = printed_acls(settings, secured_logs / f"acls-missing-{certificate}.log")
    read_input = f"--operation Read --topic {settings.ordered.input_topic}"
    [left_out] = [line for line in lines if line.endswith(read_input)]
    precreate(settings)
    run_as_printed(secured_broker, admin_config, [line for line in lines if line != left_out])
    line, _ = worker_error(settings, secured_logs / f"principal-missing-{certificate}.log")
    input_topic = settings.ordered.input_topic
    assert f"user {principal!r} may not Read topic {input_topic!r}" in line, line
    assert line.endswith("grant it with " + left_out), (line, left_out)
