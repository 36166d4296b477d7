"""How every ``seqkeeper`` command fails: one line on stderr and an exit
code (docs/operations.md), no traceback. The one place that maps an
exception to its line and code (:func:`one_line`), applied to each command
by :class:`Commands`; no other module of :mod:`seqkeeper.cli` prints
``error:`` or ends a command with a code (tests/cli/test_errors.py).

* exit 2, something to correct before running again: a bad setting or flag
  (:class:`~seqkeeper.settings.SettingError`), a module that does not load
  (:class:`~seqkeeper.plugins.PluginError`), a missing audit key, a signing
  key that cannot be used, a topic that does not exist
  (:class:`~seqkeeper.topics.UnknownTopic`), a broker address where none
  answers, an Iceberg REST catalog that does not answer, a warehouse of the
  pre-Iceberg layout; a command's own :class:`Usage`;
* exit 1, the broker refused: credentials or a certificate
  (:class:`~seqkeeper.security.SecurityFailure`, also when aiokafka only
  logged the cause), an ACL (:class:`~seqkeeper.permissions.PermissionDenied`,
  and aiokafka's own authorization errors, named the same way by
  :func:`seqkeeper.failures.refusal`: the user, the resource and the
  ``kafka-acls.sh`` command that grants it), a topic it would not create, a
  guarantee it cannot give; or the run could not go on: no broker answered
  in the wait, a local broker that did not start, a commit lost to another
  writer, the worker's web address; a command's own :class:`Failed` and
  :class:`NotFound`;
* exit 3: no reply to ``send`` in time; exit 4: the worker's local state
  was written by a newer release.

A click usage error (``typer.BadParameter``) is click's: its usage text and
exit 2. An outcome that is not an error (a report that failed, a reply that
says so) ends the command with :func:`exit_with`. Ctrl-C is the command's
to handle (the broker and the worker stop quietly, exit 0).

The commands check ahead what they will use (:mod:`seqkeeper.access`,
:func:`seqkeeper.cli.options.check_connection`), so these lines come before
anything is written; aiokafka's authorization errors are mapped too for a
permission taken away while a command runs.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, ClassVar, NoReturn, TypeVar

import click
import typer

from seqkeeper.cli.options import command_settings, forget_settings
from seqkeeper.failures import refusal
from seqkeeper.security import watching
from seqkeeper.settings import SettingError, Settings

F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes (docs/operations.md).
REFUSED = 1
USAGE = 2
NO_REPLY = 3
NEWER_STATE = 4  # (seqkeeper.adapter.store.NEWER_STATE_EXIT, a worker's exit mid-run)

#: The failures that are their own line (``module:Class``, subclasses too) and
#: their exit code; first match wins. A refusal by the broker and a broker
#: that does not answer are named by :func:`one_line` itself.
EXIT_CODES: tuple[tuple[str, int], ...] = (
    ("seqkeeper.client:ReplyTimeout", NO_REPLY),
    ("seqkeeper.worker:NewerState", NEWER_STATE),
    ("seqkeeper.topics:TopicsNotCreated", REFUSED),
    ("seqkeeper.wait:BrokerUnreachable", REFUSED),
    ("seqkeeper.runtime.guarantee:GuaranteeRefused", REFUSED),
    ("seqkeeper.broker:BrokerError", REFUSED),
    ("seqkeeper.spark_sink.tables:LostCommit", REFUSED),
    ("seqkeeper.worker:WebAddressUnusable", REFUSED),
    ("seqkeeper.settings:SettingError", USAGE),
    ("seqkeeper.plugins:PluginError", USAGE),
    ("seqkeeper.topics:UnknownTopic", USAGE),
    ("seqkeeper.spark_sink.crypto:AuditKeyError", USAGE),
    ("seqkeeper.state.tokens:BadKey", USAGE),
    ("seqkeeper.spark_sink.tables:CatalogUnavailable", USAGE),
    ("seqkeeper.spark_sink.tables:LegacyWarehouse", USAGE),
)


class CommandFailure(Exception):
    """A failure a command finds itself: its line (``str``) and exit code."""

    code: ClassVar[int] = REFUSED
    #: what precedes the line on stderr
    prefix: ClassVar[str] = "error: "


class Usage(CommandFailure):
    """Something to correct before running again (a flag, an address): exit 2."""

    code = USAGE


class Failed(CommandFailure):
    """The command could not do what it was asked: exit 1."""


class NotFound(CommandFailure):
    """What was asked for is not there (a stream, a command): its line as it
    is, exit 1."""

    prefix = ""


def one_line(
    exc: BaseException, settings: Settings | None, logged_cause: str | None = None
) -> tuple[str, int] | None:
    """The line (without ``error:``) and exit code of ``exc``, raised by a
    command run with ``settings`` (None: the environment's could not be
    read); ``logged_cause``: a security failure aiokafka logged meanwhile
    (:func:`seqkeeper.security.watching`). None: not a failure of this
    kind (a bug: its traceback is wanted)."""
    # what the command itself named is said as it is, whatever aiokafka logged
    if isinstance(exc, CommandFailure):
        return str(exc), exc.code
    for name, code in EXIT_CODES:
        if isinstance(exc, _loaded(name)):
            return str(exc), code
    refused = refusal(exc, settings, logged_cause)
    if refused is not None:
        return str(refused), REFUSED
    if isinstance(exc, _loaded("aiokafka.errors:KafkaConnectionError")) and settings is not None:
        # (aiokafka's "Unable to bootstrap from [...]" says no more)
        return f"cannot reach a Kafka broker at {settings.broker.bootstrap}", USAGE
    return None


def _loaded(*names: str) -> tuple[type[BaseException], ...]:
    """The exception classes ``module:Class`` whose module is imported: one
    whose module is not cannot have been raised, and importing it only to
    compare would cost every failing command that module's start-up (the
    worker's modules import Faust)."""
    found = []
    for name in names:
        module, _, cls = name.partition(":")
        if module in sys.modules:
            found.append(getattr(sys.modules[module], cls))
    return tuple(found)


def exit_with(code: int) -> NoReturn:
    """End the command with ``code``, its outcome (0: what it checked holds;
    else a report, a reply or a run that failed, as it printed)."""
    raise typer.Exit(code)


class Commands(typer.Typer):
    """``typer.Typer`` whose every command fails in one line: an error the
    user can fix is mapped once, for all of them (:func:`in_one_line`)."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        register = super().command(*args, **kwargs)

        def decorator(f: F) -> F:
            register(in_one_line(f))
            return f

        return decorator


def in_one_line(command: F) -> F:
    """``command``, whose failures of :func:`one_line` print their line on
    stderr and exit with its code, with no traceback; a security failure
    aiokafka only logged is named too."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        forget_settings()
        with watching(quiet=False) as causes:
            try:
                return command(*args, **kwargs)
            except (click.exceptions.Exit, click.ClickException, click.Abort):
                raise  # typer's own: an exit code, a usage error
            except Exception as exc:
                said = one_line(exc, command_settings() or _environment(), causes.cause)
                if said is None:
                    raise
                line, code = said
                prefix = exc.prefix if isinstance(exc, CommandFailure) else "error: "
                typer.echo(prefix + line, err=True)
                raise typer.Exit(code) from None

    run.in_one_line = True  # type: ignore[attr-defined]
    return run  # type: ignore[return-value]


def _environment() -> Settings | None:
    """The environment's settings, for a failure before a command read them."""
    try:
        return Settings.of()
    except SettingError:
        return None
