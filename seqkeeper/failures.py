"""A refusal by the broker named in one line: who was refused, what, and
what to do (:func:`refusal`), for the commands' map of failures
(:mod:`seqkeeper.cli.errors`) and for :mod:`seqkeeper.client`'s callers.
aiokafka's errors say neither who nor what to grant.
"""

from __future__ import annotations

from pathlib import PurePath

from seqkeeper.permissions import PermissionDenied, denied, principal_of
from seqkeeper.security import BrokerRefused, ClientSecurity, failure, security_cause
from seqkeeper.settings import SettingError, Settings


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
