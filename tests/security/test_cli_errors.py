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
once the connection is known to work)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from seqkeeper.broker import make_tls_files
from seqkeeper.settings import Settings
from tests.security.test_secured_kafka import WRONG_PASSWORD, error_lines, run_cli, verify_args

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
