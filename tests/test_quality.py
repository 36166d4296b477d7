"""Lint and types are part of the suite: ruff on everything, mypy (strict) on
the whole seqkeeper package (``[tool.mypy] files`` in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_is_clean() -> None:
    result = run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
