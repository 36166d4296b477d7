"""A secured Apache Kafka for the tests of TLS and SASL: one SASL_SSL
listener with SCRAM-SHA-512 users (SCRAM-SHA-256 and PLAIN too), an SSL
listener that requires a client certificate (mTLS), a CA and server
certificate made at start, the StandardAuthorizer denying what no ACL allows, and ``admin`` a
super user (:class:`tests.secured_broker.SecuredKafkaBroker`).

It needs ``KAFKA_HOME`` (Apache Kafka 3.7+/4.x and Java 17): the embedded
broker has no TLS or SASL, so without it these tests are skipped."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqkeeper.broker import kafka_home_from_env
from seqkeeper.security import ClientSecurity
from seqkeeper.settings import EXAMPLE_HANDLERS, Secret, Settings
from tests.secured_broker import SecuredKafkaBroker

#: Every log the secured tests write goes here, and the broker's too: the
#: last test reads them all for the passwords.
LOGS = Path(tempfile.gettempdir()) / f"seqkeeper-secured-{uuid.uuid4().hex[:8]}"


#: Client certificates of the mTLS listener besides admin's: one whose
#: principal is its whole subject, one a mapping rule shortens.
CLIENT_SUBJECTS = {
    "worker-a": "CN=worker-a,OU=streams,O=Example",
    "worker-b": "CN=Worker-B,OU=mapped,O=Example",
}
#: The broker's ssl.principal.mapping.rules: a certificate of a CN alone is
#: that CN (admin's, the broker's), one of OU=mapped its CN in lower case,
#: any other its whole subject (RFC 2253).
PRINCIPAL_RULES = "RULE:^CN=([^,]+)$/$1/,RULE:^CN=([^,]+),OU=mapped,.*$/$1/L,DEFAULT"


@pytest.fixture(scope="session")
def secured_broker() -> Iterator[SecuredKafkaBroker]:
    home = kafka_home_from_env()
    if not home:
        pytest.skip(
            "KAFKA_HOME is not set: TLS and SASL are tested on Apache Kafka "
            "(the embedded broker has no TLS or SASL listener)"
        )
    LOGS.mkdir(parents=True, exist_ok=True)
    with SecuredKafkaBroker(
        home,
        log_path=LOGS / "kafka.log",
        partitions=2,
        mtls=True,
        client_subjects=CLIENT_SUBJECTS,
        principal_rules=PRINCIPAL_RULES,
    ) as kafka:
        yield kafka


@pytest.fixture(scope="session")
def secured_logs(secured_broker: SecuredKafkaBroker) -> Path:
    return LOGS


@pytest.fixture(scope="session")
def audit_keys() -> tuple[str, str]:
    """Two audit keys (an old one and its successor, as ``seqkeeper keygen``
    prints them): the last test reads every log for them too."""
    from seqkeeper.spark_sink.crypto import new_key

    return new_key(), new_key()


def security_env(security: ClientSecurity) -> dict[str, str]:
    """The environment variables that make ``security`` every client's."""
    return {
        "SEQKEEPER_SECURITY_PROTOCOL": security.protocol,
        "SEQKEEPER_SASL_MECHANISM": security.mechanism,
        "SEQKEEPER_SASL_USERNAME": security.username,
        "SEQKEEPER_SASL_PASSWORD": security.password.reveal(),
        "SEQKEEPER_SSL_CAFILE": security.cafile,
    }


@pytest.fixture
def as_admin(secured_broker: SecuredKafkaBroker, monkeypatch: pytest.MonkeyPatch) -> ClientSecurity:
    """This process's clients (and the workers it starts) connect to the
    secured broker as its super user."""
    security = secured_broker.client_security()
    for name, value in security_env(security).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", secured_broker.bootstrap)
    return security


@pytest.fixture
def secured_settings(as_admin: ClientSecurity, tmp_path: Path) -> Settings:
    """Worker settings on the secured broker, with names of their own."""
    tag = uuid.uuid4().hex[:8]
    return Settings.of(
        data_dir=tmp_path / "data",
        partitions=2,
        session_timeout=6.0,
        gap_timeout=120.0,
        handlers=EXAMPLE_HANDLERS,
        app_id=f"app-{tag}",
        input_topic=f"in-{tag}",
        ordered_topic=f"ordered-{tag}",
        deduped_topic=f"deduped-{tag}",
        dlq_topic=f"dlq-{tag}",
        late_topic=f"late-{tag}",
        broker_wait=30.0,
    )


#: The SASL variables a mutual TLS client leaves unset.
SASL_VARS = (
    "SEQKEEPER_SASL_MECHANISM",
    "SEQKEEPER_SASL_USERNAME",
    "SEQKEEPER_SASL_PASSWORD",
    "SEQKEEPER_SASL_PASSWORD_FILE",
)


@pytest.fixture
def as_mtls(
    as_admin: ClientSecurity, secured_broker: SecuredKafkaBroker, monkeypatch: pytest.MonkeyPatch
) -> ClientSecurity:
    """This process's clients (and the workers it starts) connect to the
    secured broker's mTLS listener, as its super user by certificate."""
    security = secured_broker.client_security_mtls()
    for name in SASL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SEQKEEPER_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("SEQKEEPER_SSL_CAFILE", security.cafile)
    monkeypatch.setenv("SEQKEEPER_SSL_CERTFILE", security.certfile)
    monkeypatch.setenv("SEQKEEPER_SSL_KEYFILE", security.keyfile)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", secured_broker.mtls_bootstrap)
    return security


@pytest.fixture
def mtls_settings(
    as_mtls: ClientSecurity, secured_broker: SecuredKafkaBroker, secured_settings: Settings
) -> Settings:
    """:func:`secured_settings` on the mTLS listener, by certificate."""
    return secured_settings.with_overrides(
        bootstrap=secured_broker.mtls_bootstrap,
        security_protocol="SSL",
        sasl_username="",
        sasl_password=Secret(""),
        ssl_certfile=as_mtls.certfile,
        ssl_keyfile=as_mtls.keyfile,
    )
