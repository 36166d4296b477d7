"""Child processes: a seqkeeper worker (:class:`WorkerProcess`) or any
program a bench section measures (:func:`process`), started with its
environment and its output in a log file, dying with its parent, and
stopped gracefully (SIGTERM, then SIGKILL after a timeout) or with
``kill -9``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from seqkeeper.broker import die_with_parent
from seqkeeper.settings import Settings


def spawn(
    cmd: list[str], env: Mapping[str, str], log: Path, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with exactly ``env``, its stdout and stderr appended to
    ``log``; it dies with this process (:func:`seqkeeper.broker.die_with_parent`)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
            cwd=cwd,
        )


def stop(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Graceful stop (SIGTERM), SIGKILL after ``timeout`` s; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@contextmanager
def process(
    cmd: list[str], env: dict[str, str], log: Path, timeout: float = 20.0
) -> Iterator[subprocess.Popen[bytes]]:
    """``cmd`` running with ``env`` over this process's environment, stopped
    (:func:`stop`, ``timeout``) when the block ends."""
    proc = spawn(cmd, {**os.environ, **env}, log)
    try:
        yield proc
    finally:
        stop(proc, timeout)


class WorkerDied(RuntimeError):
    """The worker process exited while it was expected to run."""


class WorkerProcess:
    """``seqkeeper worker`` as a child process (demo, tests, chaos runs)."""

    def __init__(
        self,
        settings: Settings,
        log_path: Path,
        log_level: str = "info",
        cwd: Path | None = None,
    ) -> None:
        self.settings = settings
        self.log_path = log_path
        self.log_level = log_level
        #: run in this directory, as the installed ``seqkeeper`` command (a
        #: user's project); None: ``python -m seqkeeper`` here
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        if self.cwd is not None:
            script = str(Path(sys.executable).parent / "seqkeeper")
            return [script, "worker", "--log-level", self.log_level]
        return [sys.executable, "-m", "seqkeeper", "worker", "--log-level", self.log_level]

    def environment(self) -> dict[str, str]:
        """The child's environment: every setting as its variable."""
        return {**os.environ, **self.settings.to_env()}

    def start(self) -> WorkerProcess:
        self.proc = spawn(self.command(), self.environment(), self.log_path, self.cwd)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        """Whether the worker process was started and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 90.0) -> WorkerProcess:
        """Return once the worker logged that it is ready (its partitions'
        state restored); :class:`WorkerDied` if it exits first, a
        ``TimeoutError`` with the end of its log after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while "Worker ready" not in self.log():
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the worker was not ready in {timeout:g} s: {self.log()[-3000:]}"
                )
            time.sleep(0.2)
        return self

    def check_alive(self) -> None:
        """:class:`WorkerDied` if the worker exited, with the end of its log
        (the log itself may be gone with the run's temporary directory by
        the time anyone reads the report)."""
        if self.proc is not None and self.proc.poll() is not None:
            tail = "\n".join(self.log().splitlines()[-20:])
            raise WorkerDied(
                f"the worker exited with code {self.proc.returncode}; log: {self.log_path}"
                + (f"; it ends:\n{tail}" if tail else "")
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def dump(self, wait: float = 1.0) -> None:
        """Have a running worker log its asyncio tasks and consumer state
        (SIGUSR1, see :func:`seqkeeper.adapter.diagnostics.install_diagnostics`): called
        before a test gives up on it, so its log shows where it was stuck."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(wait)

    def kill(self) -> None:
        """``kill -9``: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 30.0) -> int | None:
        """Graceful stop (SIGTERM), SIGKILL after ``timeout``; the exit code."""
        if self.proc is None:
            return None
        return stop(self.proc, timeout)
