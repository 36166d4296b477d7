"""The one mapping of a command's failures to a line and an exit code
(seqkeeper.cli.errors; the refusals named by seqkeeper.failures), without a broker: aiokafka's authorization errors
name the user, the resource and the grant; a security cause aiokafka only
logged names the broker; a bug is not mapped (its traceback is wanted).
The secured broker's cases, as a user sees them, are
tests/security/test_cli_errors.py's."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.cli.errors import REFUSED, USAGE, one_line
from seqkeeper.failures import refusal
from seqkeeper.permissions import PermissionDenied
from seqkeeper.security import BrokerRefused, SecurityFailure, security_cause
from seqkeeper.settings import SettingError, Settings
from seqkeeper.topics import UnknownTopic

BOOTSTRAP = "kafka-1:9093"


def settings(user: str = "reader") -> Settings:
    return Settings.of(
        bootstrap=BOOTSTRAP,
        security_protocol="SASL_SSL",
        sasl_username=user,
        sasl_password="pw",
        app_id="app",
    )


def raised_in(path: str, exc: BaseException) -> BaseException:
    """``exc`` as raised by code in the file ``path`` (its traceback's frame)."""
    code = compile("def fail(exc):\n    raise exc\n", path, "exec")
    scope: dict[str, Any] = {}
    exec(code, scope)
    try:
        scope["fail"](exc)
    except BaseException as caught:
        return caught
    raise AssertionError("not raised")


# Kafka's resource names: letters, digits, '.', '_', '-'
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=40)


@given(user=names, topic=names)
def test_a_topic_refusal_names_user_topic_and_grant(user: str, topic: str) -> None:
    s = settings(user)
    for path, operation in (
        ("/x/site-packages/aiokafka/producer/producer.py", "Write"),
        ("/x/site-packages/aiokafka/consumer/fetcher.py", "Read"),
    ):
        said = one_line(raised_in(path, TopicAuthorizationFailedError(topic)), s)
        assert said is not None
        line, code = said
        assert code == REFUSED
        assert "\n" not in line
        assert line.startswith(f"user {user!r} may not {operation} topic {topic!r} ("), line
        assert line.endswith(
            f"--allow-principal User:{user} --operation {operation} --topic {topic}"
        ), line


def test_group_and_transactional_id_refusals() -> None:
    line, code = one_line(GroupAuthorizationFailedError("app"), settings()) or ("", 0)
    assert code == REFUSED and "may not Read group 'app'" in line and "--group app" in line
    error = TransactionalIdAuthorizationFailed("app-in-0")
    line, code = one_line(error, settings()) or ("", 0)
    assert code == REFUSED and "may not Write transactional-id" in line, line
    assert "--transactional-id app-" in line, line
    # no resource named (the cluster's): the user and the broker, still one line
    line, code = one_line(ClusterAuthorizationFailedError(), settings()) or ("", 0)
    assert code == REFUSED and line.startswith(f"user 'reader' was refused by Kafka at {BOOTSTRAP}")


def test_the_typed_failures_and_their_codes() -> None:
    s = settings()
    denied = PermissionDenied("user 'reader' may not Read topic 't'")
    assert one_line(denied, s) == (str(denied), REFUSED)
    assert isinstance(denied, BrokerRefused)
    assert one_line(SettingError("SEQKEEPER_X='y': expected z"), s) == (
        "SEQKEEPER_X='y': expected z",
        USAGE,
    )
    assert one_line(UnknownTopic("topic 't' does not exist"), s) == (
        "topic 't' does not exist",
        USAGE,
    )
    assert one_line(ValueError("a bug"), s) is None
    assert one_line(KafkaConnectionError("Unable to bootstrap from [...]"), s) == (
        f"cannot reach a Kafka broker at {BOOTSTRAP}",
        USAGE,
    )
    assert one_line(TopicAuthorizationFailedError(), s) is not None  # (no topic: still one line)


def test_a_security_cause_names_the_broker() -> None:
    s = settings()
    said = one_line(RuntimeError("Unable to bootstrap"), s, "authentication failed (bad)")
    assert said is not None
    line, code = said
    assert code == REFUSED
    assert line.startswith(f"Kafka at {BOOTSTRAP}: authentication failed (bad) [SASL_SSL"), line
    assert isinstance(refusal(RuntimeError("x"), s, "authentication failed"), SecurityFailure)
    assert refusal(RuntimeError("x"), s) is None


@pytest.mark.parametrize(
    "reason",
    [
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",  # another CA's certificate (Java's TLS)
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",  # none
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    ],
)
def test_a_refused_client_certificate_says_so(reason: str) -> None:
    alert = ssl.SSLError(1, f"[SSL: {reason}] alert")
    alert.reason = reason
    assert security_cause(alert) == (
        f"TLS handshake failed: the broker requires a client certificate it trusts ({reason})"
    )
