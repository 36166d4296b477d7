"""Running an example as a user would: a copy of its directory outside the
repository, and its scripts run by this interpreter (which has seqkeeper
installed) in that copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from seqkeeper.settings import Settings
from tests.conftest import Broker

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def copy_example(name: str, dest: Path) -> Path:
    """``examples/<name>`` copied to ``dest`` (without caches); returns ``dest``."""
    shutil.copytree(EXAMPLES / name, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def script(project: Path, *args: str, timeout: float = 120, **kw: Any) -> str:
    """``python <args>`` in ``project``; its stdout, failing with its output
    unless it exits 0."""
    done = subprocess.run(
        [sys.executable, *args], cwd=project, capture_output=True, text=True, timeout=timeout, **kw
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def one_command_env(broker: Broker, settings: Settings) -> dict[str, str]:
    """The environment for an example's ``run.py`` as a user runs it: no
    seqkeeper settings, so it starts a broker of the test broker's kind
    (Apache Kafka when KAFKA_HOME is set, else the embedded one). On a
    broker the tests did not start, ``settings`` (unique names) instead."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SEQKEEPER_") and k != "KAFKA_BOOTSTRAP_SERVERS"
    }
    if broker.kind in ("external", "testcontainers"):
        env.update(settings.to_env())
    return env
