"""Command handlers from a user's module (``--handlers module:attribute``,
``SEQKEEPER_HANDLERS``): loaded by name, from the directory the worker runs
in; anything that cannot be loaded is one line naming it, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from seqkeeper import Registry
from seqkeeper.plugins import PluginError, load_processor, load_registry
from tests.user.project import write_project

SCRIPT = str(Path(sys.executable).parent / "seqkeeper")


def worker(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SEQKEEPER_", "KAFKA_"))}
    return subprocess.run(
        [SCRIPT, "worker", "--topology", "commands", *args],
        cwd=cwd,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's project in the current directory, not yet imported, and
    the import path as a worker started elsewhere has it."""
    write_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    for name in [m for m in sys.modules if m == "ledger" or m.startswith("ledger.")]:
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


def test_a_registry_is_loaded_by_name_from_the_current_directory(project: Path) -> None:
    registry = load_registry("ledger.handlers:registry")
    assert isinstance(registry, Registry)
    assert set(registry.handlers) == {("Deposit", 1), ("Withdraw", 1)}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("ledger.handlers", "expected module:attribute"),
        ("nosuch.handlers:registry", "no module named 'nosuch'"),
        ("ledger.handlers:nothing", "module 'ledger.handlers' has no attribute 'nothing'"),
        ("ledger.handlers:deposit", "is a function, not a seqkeeper.Registry"),
        ("ledger.broken:registry", "importing 'ledger.broken' raised ZeroDivisionError"),
        ("ledger.empty:registry", "the registry has no handlers"),
    ],
)
def test_what_cannot_be_loaded_is_named(project: Path, spec: str, says: str) -> None:
    (project / "ledger" / "broken.py").write_text("1 / 0\n")
    (project / "ledger" / "empty.py").write_text(
        "from seqkeeper import Registry\nregistry = Registry()\n"
    )
    with pytest.raises(PluginError) as caught:
        load_registry(spec)
    assert str(caught.value).startswith(f"SEQKEEPER_HANDLERS={spec!r}: ")
    assert says in str(caught.value)


def test_the_worker_names_missing_handlers_in_one_line(tmp_path: Path) -> None:
    done = worker(tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "error: the commands topology needs handlers: set SEQKEEPER_HANDLERS (or --handlers) "
        "to module:registry, e.g. seqkeeper.processors.inventory:registry"
    )
    done = worker(tmp_path, "--handlers", "nosuch:registry")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: SEQKEEPER_HANDLERS='nosuch:registry': no module named 'nosuch' (from {tmp_path})"
    )


def test_the_installed_command_imports_the_project_it_runs_in(tmp_path: Path) -> None:
    """The ``seqkeeper`` script (not ``python -m``) finds the project's
    module: the handlers load, and the worker goes on to wait for its
    broker (none here: it gives up after the wait, exit 1)."""
    write_project(tmp_path)
    done = worker(
        tmp_path,
        "--broker",
        "127.0.0.1:1",
        "--broker-wait",
        "0",
        SEQKEEPER_HANDLERS="ledger.handlers:registry",
    )
    assert done.returncode == 1, done.stderr
    assert "SEQKEEPER_HANDLERS" not in done.stderr
    assert "127.0.0.1:1" in done.stderr


# -- an ordered processor (--processor module:function, SEQKEEPER_PROCESSOR) ----


def test_a_processor_is_loaded_by_name_sync_or_async(project: Path) -> None:
    import inspect

    assert callable(load_processor("ledger.balances:apply"))
    assert inspect.iscoroutinefunction(load_processor("ledger.balances:apply_async"))


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("ledger.balances", "expected module:attribute"),
        ("ledger.balances:nothing", "module 'ledger.balances' has no attribute 'nothing'"),
        ("ledger.handlers:registry", "is a Registry, not a function"),
        ("ledger.balances:DELAY", "is a float, not a function"),
        ("ledger.one:fn", "must take two arguments (state, message)"),
    ],
)
def test_a_processor_that_cannot_be_loaded_is_named(project: Path, spec: str, says: str) -> None:
    (project / "ledger" / "one.py").write_text("def fn(message):\n    return None, []\n")
    with pytest.raises(PluginError) as caught:
        load_processor(spec)
    assert str(caught.value).startswith(f"SEQKEEPER_PROCESSOR={spec!r}: ")
    assert says in str(caught.value)


def test_the_worker_names_a_bad_processor_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [SCRIPT, "worker", "--processor", "nosuch:fn"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith(("SEQKEEPER_", "KAFKA_"))},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"error: SEQKEEPER_PROCESSOR='nosuch:fn': no module named 'nosuch' (from {tmp_path})"
    )


def test_the_worker_takes_its_processor_topics_and_names_a_bad_one_in_one_line(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [SCRIPT, "worker", "--processor-topics", "commands.in,a b"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith(("SEQKEEPER_", "KAFKA_"))},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: processor-topics='commands.in,a b': 'a b' is no topic name or pattern: expected "
        "names of a-z, A-Z, 0-9, '.', '_', '-' (at most 249), where * stands for any run of "
        "characters, comma-separated"
    ]
