"""What a command prints when it fails for a reason the user can fix: one
line and an exit code (docs/operations.md), mapped here once for every
command, by :func:`one_line` (:func:`seqkeeper.cli.in_one_line` applies
it to each).

* exit 2, something to correct before running again: a bad setting or flag
  (:class:`~seqkeeper.settings.SettingError`), a module that does not load
  (:class:`~seqkeeper.plugins.PluginError`), a missing audit key, a topic
  that does not exist (:class:`~seqkeeper.topics.UnknownTopic`), a broker
  address where none answers, an Iceberg REST catalog that does not answer
  (:class:`~seqkeeper.spark_sink.tables.CatalogUnavailable`);
* exit 1, the broker refused: credentials or a certificate
  (:class:`~seqkeeper.security.SecurityFailure`, also when aiokafka only
  logged the cause), an ACL (:class:`~seqkeeper.permissions.PermissionDenied`,
  and aiokafka's own authorization errors, named the same way: the user,
  the resource and the ``kafka-acls.sh`` command that grants it), a topic
  it would not create.

The commands check ahead what they will use (:mod:`seqkeeper.access`,
:func:`seqkeeper.cli.check_connection`), so these lines come before
anything is written; aiokafka's authorization errors are mapped too for a
permission taken away while a command runs.
"""

from __future__ import annotations

from pathlib import PurePath

from seqkeeper.permissions import PermissionDenied, denied, principal_of
from seqkeeper.plugins import PluginError
from seqkeeper.security import BrokerRefused, ClientSecurity, failure, security_cause
from seqkeeper.settings import SettingError, Settings
from seqkeeper.topics import TopicsNotCreated, UnknownTopic

#: Exit codes (docs/operations.md).
REFUSED = 1
USAGE = 2


def one_line(
    exc: BaseException, settings: Settings | None, logged_cause: str | None = None
) -> tuple[str, int] | None:
    """The line (without ``error:``) and exit code of ``exc``, raised by a
    command run with ``settings`` (None: the environment's could not be
    read); ``logged_cause``: a security failure aiokafka logged meanwhile
    (:func:`seqkeeper.security.watching`). None: not a failure of this
    kind (a bug: its traceback is wanted)."""
    from aiokafka.errors import KafkaConnectionError

    from seqkeeper.spark_sink.crypto import AuditKeyError
    from seqkeeper.spark_sink.tables import CatalogUnavailable

    if isinstance(exc, TopicsNotCreated):
        return str(exc), REFUSED
    if isinstance(
        exc, SettingError | PluginError | AuditKeyError | UnknownTopic | CatalogUnavailable
    ):
        return str(exc), USAGE
    refused = refusal(exc, settings, logged_cause)
    if refused is not None:
        return str(refused), REFUSED
    if isinstance(exc, KafkaConnectionError) and settings is not None:
        # (aiokafka's "Unable to bootstrap from [...]" says no more)
        return f"cannot reach a Kafka broker at {settings.broker.bootstrap}", USAGE
    return None


def refusal(
    exc: BaseException, settings: Settings | None, logged_cause: str | None = None
) -> BrokerRefused | None:
    """``exc`` as the one-line :class:`~seqkeeper.security.BrokerRefused` it
    is (aiokafka's errors say neither who nor what to grant), or None when
    the broker did not refuse: :class:`~seqkeeper.security.SecurityFailure`
    for credentials or a certificate (``logged_cause``: what aiokafka
    logged of it), :class:`~seqkeeper.permissions.PermissionDenied` for an
    ACL, naming the user of ``settings`` and the grant."""
    from aiokafka.errors import (
        ClusterAuthorizationFailedError,
        GroupAuthorizationFailedError,
        TopicAuthorizationFailedError,
        TransactionalIdAuthorizationFailed,
    )

    if isinstance(exc, BrokerRefused):
        return exc
    bootstrap = settings.broker.bootstrap if settings else ""
    cause = logged_cause or security_cause(exc)
    if cause:
        return failure(bootstrap, cause, _security(settings))
    if settings is None:
        return None
    if isinstance(exc, TopicAuthorizationFailedError) and _named(exc):
        return denied(settings, _operation(exc), "topic", _named(exc), exc.message, by_prefix=False)
    if isinstance(exc, GroupAuthorizationFailedError) and _named(exc):
        return denied(settings, "Read", "group", _named(exc), exc.message)
    if isinstance(exc, TransactionalIdAuthorizationFailed) and _named(exc):
        return denied(settings, "Write", "transactional-id", _named(exc), exc.message)
    if isinstance(
        exc,
        TopicAuthorizationFailedError
        | GroupAuthorizationFailedError
        | TransactionalIdAuthorizationFailed
        | ClusterAuthorizationFailedError,
    ):  # (no resource named: the cluster's, or one aiokafka does not tell)
        return PermissionDenied(
            f"user {principal_of(settings)!r} was refused by Kafka at {bootstrap} "
            f"({exc.message}): ask the cluster's admin for the ACL "
            "(seqkeeper acls prints what a worker needs)"
        )
    return None


def _security(settings: Settings | None) -> ClientSecurity | None:
    """How the clients of ``settings`` connect (None: the process default)."""
    try:
        return ClientSecurity.of(settings.security) if settings else None
    except SettingError:  # (a password file that cannot be read: not this line's news)
        return None


def _named(exc: BaseException) -> str:
    """The resource aiokafka's error names (a name, or a set of them: the
    first in order), else empty."""
    if not exc.args:
        return ""
    arg = exc.args[0]
    if isinstance(arg, str):
        return arg
    if isinstance(arg, set | frozenset | list | tuple) and arg:
        return str(sorted(arg)[0])
    return ""


def _operation(exc: BaseException) -> str:
    """Write when aiokafka's producer raised ``exc`` (a send), else Read
    (a consumer's fetch or metadata): its error says neither."""
    tb = exc.__traceback__
    while tb is not None:
        parts = PurePath(tb.tb_frame.f_code.co_filename).parts
        if "aiokafka" in parts and "producer" in parts:
            return "Write"
        tb = tb.tb_next
    return "Read"
