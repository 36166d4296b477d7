"""Every client over mutual TLS (an SSL listener with
``ssl.client.auth=required``, tests/security/conftest.py): the worker
processes a workload and ``verify`` passes, by certificate alone; without a
client certificate, or with a key file that cannot be read, the worker and
``verify`` stop at once with one line saying what failed. The controller
listener requires a certificate too: no anonymous client gets an answer."""

from __future__ import annotations

import os
import socket
import ssl
import struct
from pathlib import Path

import pytest

from seqkeeper.settings import Settings
from tests.secured_broker import SecuredKafkaBroker
from tests.security.test_secured_kafka import (
    run_cli,
    verify_args,
    worker_and_verify,
    worker_error,
)

pytestmark = pytest.mark.integration


def test_the_worker_and_verify_over_mtls(mtls_settings: Settings, secured_logs: Path) -> None:
    settings = mtls_settings
    assert settings.security.security_protocol == "SSL" and not settings.security.sasl_username
    # (the certificate's principal, User:admin, may use transactions too)
    worker_and_verify(settings, secured_logs, "-mtls", {**os.environ, **settings.to_env()})


def test_without_a_client_certificate_fails_fast_with_one_line(
    mtls_settings: Settings, secured_logs: Path
) -> None:
    settings = mtls_settings.with_overrides(ssl_certfile="", ssl_keyfile="")
    env = {**os.environ, **settings.to_env()}
    done = run_cli(verify_args(settings), env, secured_logs / "verify-no-client-cert.log")
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()  # nothing else: no traceback, no warning
    assert line.startswith(f"error: Kafka at {settings.broker.bootstrap}: "), line
    assert "requires a client certificate" in line and "[SSL, no client certificate]" in line

    line, _ = worker_error(settings, secured_logs / "worker-no-client-cert.log")
    assert "requires a client certificate" in line, line


@pytest.mark.parametrize("problem", ["missing", "a directory"])
def test_an_unreadable_client_key_names_the_variable(
    mtls_settings: Settings, secured_logs: Path, tmp_path: Path, problem: str
) -> None:
    key = tmp_path / "client.key"
    if problem == "a directory":
        key.mkdir()
    settings = mtls_settings.with_overrides(ssl_keyfile=str(key))
    env = {**os.environ, **settings.to_env()}
    done = run_cli(verify_args(settings), env, secured_logs / f"verify-key-{problem[-4:]}.log")
    assert done.returncode != 0, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: SEQKEEPER_SSL_KEYFILE={key}: cannot read it ("), line

    line, _ = worker_error(settings, secured_logs / f"worker-key-{problem[-4:]}.log", code=None)
    assert f"SEQKEEPER_SSL_KEYFILE={key}: cannot read it" in line, line


def api_versions(port: int, context: ssl.SSLContext | None) -> bytes:
    """The first 8 bytes of the answer of the listener on ``port`` to an
    ApiVersions v0 request (size, correlation id), over TLS with
    ``context``; ``b""`` when the listener closes the connection or fails
    the handshake (not when it stays silent: that times out)."""
    body = struct.pack(">hhih", 18, 0, 7, len(b"probe")) + b"probe"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            sock = context.wrap_socket(raw, server_hostname="127.0.0.1") if context else raw
            sock.sendall(struct.pack(">i", len(body)) + body)
            answer = b""
            while len(answer) < 8:
                got = sock.recv(8 - len(answer))
                if not got:
                    return b""
                answer += got
            return answer
    except TimeoutError:
        raise
    except OSError:  # reset, TLS alert (ssl.SSLError is an OSError)
        return b""


def test_the_controller_listener_answers_no_anonymous_client(
    secured_broker: SecuredKafkaBroker,
) -> None:
    """The controller listener (loopback, not advertised) is SSL with a
    required client certificate: the broker's own (``CN=kafka-broker``, a
    super user) passes; a PLAINTEXT client and a TLS client without a
    certificate get no answer at all, so ``User:ANONYMOUS`` (no super user
    any more) has nothing to be allowed."""
    port, tls = secured_broker.controller_port, secured_broker.tls
    assert port and tls is not None
    client = tls.clients[secured_broker.admin]
    with_cert = ssl.create_default_context(cafile=str(tls.ca))
    with_cert.load_cert_chain(str(client.cert), str(client.key))
    size, correlation = struct.unpack(">ii", api_versions(port, with_cert))
    assert size > 4 and correlation == 7  # the listener answers a client it knows
    assert api_versions(port, ssl.create_default_context(cafile=str(tls.ca))) == b""
    assert api_versions(port, None) == b""
