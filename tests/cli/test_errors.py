"""Every way a command fails goes through one map (seqkeeper/cli/errors.py):
each mapped exception, raised by a command, is its exit code and one line on
stderr, without a traceback; every command of the app is wrapped by it; and
no other module of seqkeeper/cli ends a command itself (a typer.Exit, a
SystemExit, sys.exit) or writes an ``error:`` line. Without a broker."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.cli.errors import (
    EXIT_CODES,
    NEWER_STATE,
    NO_REPLY,
    REFUSED,
    USAGE,
    Commands,
    Failed,
    NotFound,
    Usage,
    exit_with,
)
from seqkeeper.permissions import PermissionDenied
from seqkeeper.security import SecurityFailure

CLI = Path(__file__).resolve().parents[2] / "seqkeeper" / "cli"
WORKER = CLI.parent / "worker.py"


def raising(exc: BaseException) -> typer.Typer:
    """An app of one command, ``fail``, that raises ``exc``."""
    tiny = Commands()

    @tiny.command()
    def fail() -> None:
        raise exc

    @tiny.command()
    def other() -> None:  # (two commands: ``fail`` is a subcommand, as in the app)
        pass

    return tiny


def run(exc: BaseException) -> tuple[int, str, str]:
    done = CliRunner().invoke(raising(exc), ["fail"])
    return done.exit_code, done.stdout, done.stderr


def the_class(name: str) -> type[BaseException]:
    module, _, cls = name.partition(":")
    found = getattr(importlib.import_module(module), cls)
    assert issubclass(found, BaseException), name
    return found


def test_the_map_holds_every_kind_of_failure() -> None:
    codes = dict(EXIT_CODES)
    assert len(codes) == len(EXIT_CODES) >= 15  # (no entry named twice)
    assert set(codes.values()) == {REFUSED, USAGE, NO_REPLY, NEWER_STATE}
    assert codes["seqkeeper.settings:SettingError"] == 2
    assert codes["seqkeeper.wait:BrokerUnreachable"] == 1
    assert codes["seqkeeper.client:ReplyTimeout"] == 3


def test_the_newer_state_code_is_the_worker_s() -> None:
    from seqkeeper.adapter.store import NEWER_STATE_EXIT

    assert NEWER_STATE == NEWER_STATE_EXIT == 4


@pytest.mark.parametrize(("name", "code"), EXIT_CODES, ids=[n for n, _ in EXIT_CODES])
def test_each_mapped_exception_is_its_code_and_one_line(name: str, code: int) -> None:
    cls = the_class(name)
    exc = cls.__new__(cls)
    BaseException.__init__(exc, f"what went wrong with {name}")
    exit_code, stdout, stderr = run(exc)
    assert (exit_code, stderr) == (code, f"error: what went wrong with {name}\n")
    assert stdout == ""


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (Usage("give --yes"), USAGE, "error: give --yes"),
        (Failed("no tables under w"), REFUSED, "error: no tables under w"),
        (NotFound("no such stream"), REFUSED, "no such stream"),
        (
            PermissionDenied("user 'u' may not Read topic 't'"),
            REFUSED,
            "error: user 'u' may not Read topic 't'",
        ),
        (
            SecurityFailure("Kafka at k:9093: authentication failed"),
            REFUSED,
            "error: Kafka at k:9093: authentication failed",
        ),
    ],
)
def test_a_command_s_own_failures_and_refusals_are_one_line(
    exc: BaseException, code: int, line: str
) -> None:
    assert run(exc) == (code, "", line + "\n")


def test_a_bug_is_not_mapped_its_traceback_is_wanted() -> None:
    done = CliRunner().invoke(raising(ZeroDivisionError("a bug")), ["fail"])
    assert isinstance(done.exception, ZeroDivisionError)
    assert "error:" not in done.stderr


def test_an_outcome_is_its_code_and_no_line() -> None:
    tiny = Commands()

    @tiny.command()
    def outcome() -> None:
        print("report: 1 failure")
        exit_with(3)

    @tiny.command()
    def other() -> None:
        pass

    done = CliRunner().invoke(tiny, ["outcome"])
    assert (done.exit_code, done.stdout, done.stderr) == (3, "report: 1 failure\n", "")


def unwrapped(typer_app: typer.Typer, prefix: str = "") -> list[str]:
    """The commands of ``typer_app`` (and its groups) not wrapped by the map."""
    found = []
    for info in typer_app.registered_commands:
        name = info.name or (info.callback.__name__ if info.callback else "?")
        if not getattr(info.callback, "in_one_line", False):
            found.append(prefix + name)
    for group in typer_app.registered_groups:
        assert group.typer_instance is not None
        found += unwrapped(group.typer_instance, f"{prefix}{group.name} ")
    return found


def test_every_command_goes_through_the_map() -> None:
    assert len(app.registered_commands) >= 13
    store = [g.typer_instance for g in app.registered_groups if g.name == "store"]
    assert store and store[0] and len(store[0].registered_commands) >= 6
    assert unwrapped(app) == []


def test_a_command_registered_around_the_map_is_found() -> None:
    planted = typer.Typer()
    planted.command()(lambda: None)
    planted.add_typer(Commands(), name="group")
    assert unwrapped(planted) == ["<lambda>"]


def own_exits(source: str) -> list[str]:
    """Where ``source`` ends a command itself or writes an ``error:`` line:
    what only errors.py does."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("Exit", "Abort", "exit", "_exit"):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in ("SystemExit", "Exit"):
            found.append(f"line {node.lineno}: {node.id}")
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith("error:"):
                found.append(f"line {node.lineno}: an error: line")
        elif isinstance(node, ast.Constant) and str(node.value).startswith("error:"):
            found.append(f"line {node.lineno}: an error: line")
    return found


#: ``error:`` in a report a command prints on stdout, not how it ends
REPORT_LINES = {("verification.py", 'console.print(f"error: {runner.probe_error}")')}


def test_no_module_but_errors_py_ends_a_command_or_writes_an_error_line() -> None:
    modules = sorted(p for p in CLI.glob("*.py") if p.name != "errors.py")
    assert len(modules) >= 10
    wrong = {}
    for path in [*modules, WORKER]:
        source = path.read_text()
        lines = source.splitlines()
        found = [
            f
            for f in own_exits(source)
            if (path.name, lines[int(f.split()[1].rstrip(":")) - 1].strip()) not in REPORT_LINES
        ]
        if path == WORKER:  # (its stops, Ctrl-C, exit 0: not failures)
            found = [f for f in found if "error:" in f]
        if found:
            wrong[path.name] = found
    assert not wrong, wrong


@pytest.mark.parametrize(
    "planted",
    [
        'typer.echo(f"error: {e}", err=True)',
        "raise typer.Exit(2)",
        "raise SystemExit(1)",
        "sys.exit(2)",
        'print("error: no broker", file=sys.stderr)',
    ],
)
def test_a_command_that_ends_itself_is_found(planted: str) -> None:
    assert own_exits(f"def command(e):\n    {planted}\n") != []
    assert own_exits("def command(e):\n    raise Usage(str(e))\n") == []
