"""The processing guarantee's choice without a broker: the refusals' words,
what counts as a denial, and at_least_once asking no broker at all (the
broker's own answers are in tests/integration/test_guarantee.py)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    TransactionalIdAuthorizationFailed,
    UnknownError,
    UnsupportedVersionError,
)

from seqkeeper.broker import free_port
from seqkeeper.runtime.guarantee import (
    PROBE_MIN_SECONDS,
    GuaranteeRefused,
    choose_guarantee,
    denied,
    is_authorization_error,
    no_transactions,
    probe_limit,
    resolve_guarantee,
)
from seqkeeper.settings import Settings


def test_the_refusal_names_the_setting_the_broker_and_the_ways_out() -> None:
    message = str(no_transactions("exactly_once", "127.0.0.1:9092", "UNKNOWN_SERVER_ERROR", False))
    assert message == (
        "SEQKEEPER_PROCESSING_GUARANTEE=exactly_once needs a broker with transactions: "
        "the broker at 127.0.0.1:9092 answered InitProducerId with UNKNOWN_SERVER_ERROR; "
        "use at_least_once or auto, or Apache Kafka (KAFKA_BOOTSTRAP_SERVERS / KAFKA_HOME)"
    )


def test_the_refusal_says_when_the_broker_is_the_embedded_one() -> None:
    message = str(no_transactions("exactly_once", "127.0.0.1:9092", "UNKNOWN_SERVER_ERROR", True))
    assert "the broker at 127.0.0.1:9092 (the embedded broker, Tansu) answered" in message
    assert "\n" not in message


def test_the_refusal_repeats_the_brokers_answer() -> None:
    message = str(no_transactions("exactly_once", "h:1", "UNSUPPORTED_VERSION", False))
    assert "answered InitProducerId with UNSUPPORTED_VERSION;" in message
    assert "UNKNOWN_SERVER_ERROR" not in message


@pytest.mark.parametrize(
    "error",
    [
        TransactionalIdAuthorizationFailed,
        ClusterAuthorizationFailedError,
        GroupAuthorizationFailedError,
    ],
)
def test_a_denial_is_an_authorization_error(error: type[Exception]) -> None:
    assert is_authorization_error(error("app-probe"))


@pytest.mark.parametrize("error", [UnknownError, UnsupportedVersionError, RuntimeError])
def test_no_answer_that_means_no_transactions_is_a_denial(error: type[Exception]) -> None:
    assert not is_authorization_error(error())


def test_a_denial_names_the_acl_the_worker_needs() -> None:
    message = str(
        denied("auto", "h:1", "orders", TransactionalIdAuthorizationFailed("orders-probe"))
    )
    assert message == (
        "SEQKEEPER_PROCESSING_GUARANTEE=auto: the broker at h:1 answered InitProducerId of "
        "orders-probe with TRANSACTIONAL_ID_AUTHORIZATION_FAILED; the worker needs WRITE and "
        "DESCRIBE on TransactionalId prefix orders- (or set "
        "SEQKEEPER_PROCESSING_GUARANTEE=at_least_once)"
    )


def test_a_denial_names_the_principal_when_there_is_one() -> None:
    exc = TransactionalIdAuthorizationFailed("orders-probe")
    message = str(denied("auto", "h:1", "orders", exc, "CN=worker-a,OU=streams"))
    assert "; the worker (User:CN=worker-a,OU=streams) needs WRITE and DESCRIBE on " in message


def test_the_probe_gets_the_broker_wait_and_at_least_a_minimum() -> None:
    assert probe_limit(float("inf")) is None
    assert probe_limit(0.0) == PROBE_MIN_SECONDS
    assert probe_limit(PROBE_MIN_SECONDS + 5) == PROBE_MIN_SECONDS + 5


def nobody() -> str:
    """An address where nothing listens: any probe of it fails."""
    return f"127.0.0.1:{free_port()}"


def test_at_least_once_asks_no_broker() -> None:
    answer = asyncio.run(resolve_guarantee("at_least_once", nobody(), "app", embedded=False))
    assert answer == ("at_least_once", "requested")


def test_the_other_modes_ask_the_broker() -> None:
    # the counterpart of the test above: nothing listens, so the probe fails
    with pytest.raises(KafkaConnectionError):
        asyncio.run(resolve_guarantee("auto", nobody(), "app", embedded=False, timeout=20))


@pytest.fixture
def silent() -> Iterator[str]:
    """An address that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


def test_a_broker_that_does_not_answer_is_refused_in_time(silent: str) -> None:
    with pytest.raises(GuaranteeRefused) as refused:
        asyncio.run(resolve_guarantee("auto", silent, "app", embedded=False, timeout=0.5))
    assert str(refused.value).startswith(
        f"SEQKEEPER_PROCESSING_GUARANTEE=auto: the broker at {silent} did not answer "
        "InitProducerId of app-probe within 0.5 s"
    )


def test_the_chosen_guarantee_is_said_and_kept(capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings.of(bootstrap=nobody(), processing_guarantee="at_least_once")
    chosen = choose_guarantee(settings, embedded=False)
    assert chosen.runtime.processing_guarantee == "at_least_once"
    assert capsys.readouterr().out == "processing guarantee: at_least_once (requested)\n"
