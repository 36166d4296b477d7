"""Child processes of the fleet: started with their environment and log,
stopped gracefully or killed after the timeout (no broker needed)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from seqkeeper.fleet.processes import WorkerDied, WorkerProcess, process, spawn, stop
from seqkeeper.settings import Settings

SLEEPER = "import os, time; print(os.environ['FLEET_PROBE'], flush=True); time.sleep(60)"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('up', flush=True); time.sleep(60)"
)


def wait_for(log: Path, text: str) -> None:
    deadline = time.monotonic() + 20
    while text not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        time.sleep(0.05)


def test_a_process_gets_its_environment_and_is_stopped_when_the_block_ends(
    tmp_path: Path,
) -> None:
    log = tmp_path / "child.log"
    with process([sys.executable, "-c", SLEEPER], {"FLEET_PROBE": "hello"}, log) as proc:
        wait_for(log, "hello")
        assert proc.poll() is None
    assert proc.returncode == -signal.SIGTERM


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    proc = spawn([sys.executable, "-c", STUBBORN], {}, log)
    wait_for(log, "up")
    started = time.monotonic()
    assert stop(proc, 0.5) == -signal.SIGKILL
    assert time.monotonic() - started < 10


def test_a_worker_process_has_its_settings_as_its_environment(tmp_path: Path) -> None:
    settings = Settings.of(bootstrap="127.0.0.1:1", app_id="fleet-probe")
    worker = WorkerProcess(settings, tmp_path / "w.log")
    env = worker.environment()
    assert settings.to_env().items() <= env.items()
    assert env["SEQKEEPER_APP_ID"] == "fleet-probe"
    assert worker.stop() is None and not worker.running()  # (never started)


def test_a_dead_worker_s_error_carries_the_end_of_its_log(tmp_path: Path) -> None:
    """The report of a worker that exited shows why, even once the run's
    temporary directory, and the log in it, is gone."""
    worker = WorkerProcess(Settings(), tmp_path / "w.log")
    worker.proc = spawn(
        [sys.executable, "-c", "print('error: port 1 in use'); raise SystemExit(1)"],
        {},
        worker.log_path,
    )
    worker.proc.wait()
    try:
        worker.check_alive()
    except WorkerDied as e:
        assert "exited with code 1" in str(e) and "error: port 1 in use" in str(e), e
    else:
        raise AssertionError("check_alive passed for a worker that exited")
