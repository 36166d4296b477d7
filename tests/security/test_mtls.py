"""Every client over mutual TLS (an SSL listener with
``ssl.client.auth=required``, tests/security/conftest.py): the worker
processes a workload and ``verify`` passes, by certificate alone; without a
client certificate, or with a key file that cannot be read, the worker and
``verify`` stop at once with one line saying what failed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from seqkeeper.settings import Settings
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
