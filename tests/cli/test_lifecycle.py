"""Graceful shutdown: Ctrl-C (SIGINT) or SIGTERM stops the worker and the
broker it started; `seqkeeper broker` runs until interrupted. The broker is
the one a user without KAFKA_BOOTSTRAP_SERVERS gets: Apache Kafka when
KAFKA_HOME is set (the CI's Kafka pass), else the embedded one."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ADDRESS = re.compile(rb"127\.0\.0\.1:(\d+)")
#: What the worker prints once the broker it started is up, either kind.
STARTED = re.compile(rb"(embedded broker \(Tansu|Apache Kafka \(KAFKA_HOME=).* at 127\.0\.0\.1:")

pytestmark = pytest.mark.integration


def own_broker_env() -> dict[str, str]:
    """This environment without a bootstrap address: the child starts its own."""
    return {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}


def wait_for_line(
    proc: subprocess.Popen[bytes], pattern: bytes | re.Pattern[bytes], timeout: float = 120
) -> bytes:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = b""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
        if pattern.search(line) if isinstance(pattern, re.Pattern) else pattern in line:
            return line
    raise AssertionError(
        f"{pattern!r} not printed; output so far:\n{seen.decode(errors='replace')}"
    )


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def port_closes(port: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_open(port):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_broker_command_stops_on_signal(sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "seqkeeper", "broker"], stdout=subprocess.PIPE, env=own_broker_env()
    )
    try:
        line = wait_for_line(proc, b"KAFKA_BOOTSTRAP_SERVERS=")
        port = int(ADDRESS.search(line).group(1))  # type: ignore[union-attr]
        assert port_open(port)
        proc.send_signal(sig)
        assert proc.wait(60) == 0
        assert port_closes(port)
    finally:
        proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_worker_with_its_own_broker_stops_both(sig: signal.Signals, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seqkeeper",
            "worker",
            "--data-dir",
            str(tmp_path / "d"),
            "--session-timeout",
            "6",
            "--log-level",
            "info",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=own_broker_env(),
    )
    try:
        line = wait_for_line(proc, STARTED)
        port = int(ADDRESS.search(line).group(1))  # type: ignore[union-attr]
        wait_for_line(proc, b"Worker]: Ready")
        proc.send_signal(sig)
        assert proc.wait(60) == 0
        assert port_closes(port), "the broker outlived the worker"
    finally:
        proc.kill()
