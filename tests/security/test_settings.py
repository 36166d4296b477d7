"""Client security settings: parsing, the combinations refused (each with a
message naming the variables or options), and the password, which no
message, repr or rendered setting shows."""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.security import (
    SPARK_OPTIONS,
    ClientSecurity,
    current,
    installed,
    kafka_options,
    security_cause,
)
from seqkeeper.settings import Secret, SettingError, Settings, effective

PASSWORD = "pa55-w0rd-never-shown"


def test_plaintext_is_the_default_and_changes_nothing() -> None:
    assert Settings().security.security_protocol == "PLAINTEXT"
    assert ClientSecurity.of(Settings().security) == ClientSecurity()
    assert kafka_options(ClientSecurity()) == {"security_protocol": "PLAINTEXT"}


def test_sasl_ssl_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SEQKEEPER_SECURITY_PROTOCOL", "sasl_ssl")
    monkeypatch.setenv("SEQKEEPER_SASL_MECHANISM", "scram-sha-256")
    monkeypatch.setenv("SEQKEEPER_SASL_USERNAME", "alice")
    monkeypatch.setenv("SEQKEEPER_SASL_PASSWORD", PASSWORD)
    options = kafka_options()
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-256"
    assert options["sasl_plain_username"] == "alice"
    assert options["sasl_plain_password"] == PASSWORD
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    monkeypatch.setenv("SEQKEEPER_SSL_CHECK_HOSTNAME", "false")
    assert not kafka_options()["ssl_context"].check_hostname


def test_the_password_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")  # as a mounted secret often ends
    monkeypatch.setenv("SEQKEEPER_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("SEQKEEPER_SASL_USERNAME", "alice")
    monkeypatch.setenv("SEQKEEPER_SASL_PASSWORD_FILE", str(secret))
    assert current().password.reveal() == PASSWORD
    assert "ssl_context" not in kafka_options()
    secret.unlink()
    with pytest.raises(SettingError, match="SEQKEEPER_SASL_PASSWORD_FILE=.*cannot read it"):
        current()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SEQKEEPER_SECURITY_PROTOCOL": "SASL_SSL", "SEQKEEPER_SASL_PASSWORD": PASSWORD},
            "SEQKEEPER_SECURITY_PROTOCOL=SASL_SSL needs SEQKEEPER_SASL_USERNAME",
        ),
        (
            {"SEQKEEPER_SECURITY_PROTOCOL": "SASL_SSL", "SEQKEEPER_SASL_USERNAME": "a"},
            "needs SEQKEEPER_SASL_PASSWORD or SEQKEEPER_SASL_PASSWORD_FILE",
        ),
        (
            {
                "SEQKEEPER_SECURITY_PROTOCOL": "SASL_SSL",
                "SEQKEEPER_SASL_USERNAME": "a",
                "SEQKEEPER_SASL_PASSWORD": PASSWORD,
                "SEQKEEPER_SASL_PASSWORD_FILE": "/run/secrets/kafka",
            },
            "SEQKEEPER_SASL_PASSWORD and SEQKEEPER_SASL_PASSWORD_FILE are both set: give one",
        ),
        (
            {"SEQKEEPER_SASL_USERNAME": "a", "SEQKEEPER_SASL_PASSWORD": PASSWORD},
            "SEQKEEPER_SASL_USERNAME, SEQKEEPER_SASL_PASSWORD set, but "
            "SEQKEEPER_SECURITY_PROTOCOL=PLAINTEXT uses no SASL",
        ),
        (
            {
                "SEQKEEPER_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "SEQKEEPER_SASL_USERNAME": "a",
                "SEQKEEPER_SASL_PASSWORD": PASSWORD,
                "SEQKEEPER_SSL_CAFILE": "/ca.pem",
            },
            "SEQKEEPER_SSL_CAFILE set, but SEQKEEPER_SECURITY_PROTOCOL=SASL_PLAINTEXT uses no TLS",
        ),
        (
            {"SEQKEEPER_SECURITY_PROTOCOL": "SSL", "SEQKEEPER_SSL_KEYFILE": "/key.pem"},
            "SEQKEEPER_SSL_KEYFILE needs SEQKEEPER_SSL_CERTFILE",
        ),
        (
            {"SEQKEEPER_SECURITY_PROTOCOL": "TLS"},
            "SEQKEEPER_SECURITY_PROTOCOL='TLS': expected one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        ),
        (
            {"SEQKEEPER_SASL_MECHANISM": "GSSAPI"},
            "expected one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        ),
    ],
)
def test_refused_combinations_name_the_variables(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingError) as caught:
        Settings()
    assert message in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_the_password_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEQKEEPER_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("SEQKEEPER_SASL_USERNAME", "alice")
    monkeypatch.setenv("SEQKEEPER_SASL_PASSWORD", PASSWORD)
    settings = Settings()
    security = ClientSecurity.of(settings.security)
    for shown in (repr(settings), str(settings), repr(security), security.describe()):
        assert PASSWORD not in shown
    assert [text for v, text, _ in effective() if v.name == "sasl_password"] == ["***"]
    # a worker process gets it in its environment, and reads it back
    assert settings.to_env()["SEQKEEPER_SASL_PASSWORD"] == PASSWORD
    assert pickle.loads(pickle.dumps(security)) == security  # (Spark ships it to executors)


def test_the_worker_help_shows_no_security_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from seqkeeper.cli import app

    monkeypatch.setenv("SEQKEEPER_SASL_PASSWORD", PASSWORD)
    for command in ("worker", "verify", "demo", "inspect"):
        done = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "300"})
        assert PASSWORD not in done.output


@given(st.text(min_size=1, max_size=40))
def test_a_secret_shows_only_stars(text: str) -> None:
    secret = Secret(text)
    assert repr(secret) == str(secret) == "Secret('***')"
    assert f"{secret}" == "Secret('***')" and secret.reveal() == text
    assert Secret(text) == secret and hash(Secret(text)) == hash(secret)


def test_spark_options() -> None:
    security = ClientSecurity.from_options(
        {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.username": "spark",
            "kafka.sasl.password": PASSWORD,
            "kafka.bootstrap.servers": "h:9093",
        }
    )
    assert security.protocol == "SASL_SSL" and security.username == "spark"
    assert security.password.reveal() == PASSWORD and PASSWORD not in repr(security)
    assert ClientSecurity.from_options({"kafka.bootstrap.servers": "h:9092"}) == ClientSecurity()


@pytest.mark.parametrize(
    "key",
    [
        "kafka.sasl.jaas.config",
        "kafka.ssl.keystore.location",
        "kafka.ssl.truststore.location",
        "kafka.ssl.keystore.password",
        "kafka.ssl.endpoint.identification.algorithm",
    ],
)
def test_spark_options_refuse_jaas_and_keystores_naming_the_accepted(key: str) -> None:
    with pytest.raises(SettingError) as caught:
        ClientSecurity.from_options({key: f'x password="{PASSWORD}";'})
    message = str(caught.value)
    assert key in message
    for accepted in SPARK_OPTIONS:
        assert accepted in message
    assert PASSWORD not in message


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.password": PASSWORD},
            "kafka.security.protocol=SASL_SSL needs kafka.sasl.username",
        ),
        (
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.username": "a",
                "kafka.sasl.password": PASSWORD,
                "kafka.sasl.password.file": "/p",
            },
            "kafka.sasl.password and kafka.sasl.password.file are both set: give one",
        ),
        ({"kafka.security.protocol": "BOGUS"}, "kafka.security.protocol='BOGUS'"),
    ],
)
def test_spark_option_errors_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(SettingError) as caught:
        ClientSecurity.from_options(options)
    assert message in str(caught.value) and PASSWORD not in str(caught.value)


def test_installed_is_the_process_default() -> None:
    secured = ClientSecurity(protocol="SASL_PLAINTEXT", username="u", password=Secret(PASSWORD))
    with installed(secured):
        assert current() == secured
        assert kafka_options()["sasl_plain_username"] == "u"
    assert current() == ClientSecurity()


def test_security_causes() -> None:
    from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    verify.verify_message = "unable to get local issuer certificate"
    assert security_cause(verify) == (
        "certificate verify failed (unable to get local issuer certificate)"
    )
    cause = security_cause(
        SaslAuthenticationFailed(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        )
    )
    assert cause is not None and cause.startswith("authentication failed (")
    assert security_cause(KafkaConnectionError("Unable to bootstrap")) is None
    assert security_cause(ConnectionRefusedError()) is None


@given(
    protocol=st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
    mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
    check=st.booleans(),
)
def test_spark_options_round_trip(protocol: str, mechanism: str, check: bool) -> None:
    """What compact gives the Spark source is what the process's clients use."""
    sasl = protocol.startswith("SASL_")
    tls = protocol.endswith("SSL")
    security = ClientSecurity(
        protocol=protocol,
        mechanism=mechanism if sasl else "SCRAM-SHA-512",
        username="u" if sasl else "",
        password=Secret(PASSWORD if sasl else ""),
        cafile="/ca.pem" if tls else "",
        check_hostname=check or not tls,
    )
    assert ClientSecurity.from_options(security.spark_options()) == security


def test_a_closed_connection_caused_by_a_tls_alert_is_a_security_cause() -> None:
    """Over TLS 1.3 a broker that requires a client certificate says so only
    after the handshake: aiokafka's ``Connection closed`` carries the alert."""
    from aiokafka.errors import KafkaConnectionError

    alert = ssl.SSLError(1, "[SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert bad certificate")
    alert.reason = "SSLV3_ALERT_BAD_CERTIFICATE"
    closed = KafkaConnectionError("Connection at h:9093 closed")
    closed.__cause__ = alert
    cause = security_cause(closed)
    assert cause is not None and "requires a client certificate" in cause
    closed.__cause__ = ConnectionResetError()
    assert security_cause(closed) is None
    missing = ClientSecurity(protocol="SSL")
    assert missing.describe() == "SSL, no client certificate"
    with_cert = ClientSecurity(protocol="SSL", certfile="/c.pem", keyfile="/c.key")
    assert with_cert.describe() == "SSL, client certificate /c.pem"


def test_a_client_key_that_cannot_be_read_names_its_variable(tmp_path: Path) -> None:
    cert = tmp_path / "client.pem"
    cert.write_text("not read: the key fails first\n")
    security = ClientSecurity(
        protocol="SSL", certfile=str(cert), keyfile=str(tmp_path / "missing.key")
    )
    with pytest.raises(
        SettingError, match=r"^SEQKEEPER_SSL_KEYFILE=.*missing\.key: cannot read it"
    ):
        security.ssl_context()
