"""Waiting for the broker at start: a worker started before its broker (a
compose file, a pod beside a broker that restarts) retries with a capped
backoff instead of dying, and gives up with one clear line after
``SEQKEEPER_BROKER_WAIT`` seconds.

The schedule (:func:`backoff`) and the loop (:func:`wait_for_broker`) take
no broker: the loop is given the attempt to make, a clock and a sleep, so
both are tested without one. :func:`broker_answers` is the attempt that
talks to Kafka (a metadata request through aiokafka's admin client).

Once the worker runs, aiokafka and Faust reconnect by themselves: a broker
lost mid-run is retried there, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

from seqkeeper.security import (
    SecurityFailure,
    failure,
    kafka_options,
    security_cause,
    watching,
)
from seqkeeper.settings import VARS, parse_seconds

__all__ = ["parse_seconds"]

T = TypeVar("T")

#: The variable that sets ``Settings().broker.broker_wait``.
WAIT_VAR = VARS["broker_wait"].env
#: First delay between attempts, its growth factor and its cap, in seconds.
FIRST_DELAY = 0.5
FACTOR = 2.0
MAX_DELAY = 10.0
#: Longest one attempt may take (a frozen broker accepts connections but
#: never answers): the metadata request's timeout.
ATTEMPT_TIMEOUT = 5.0


def backoff(
    first: float = FIRST_DELAY, factor: float = FACTOR, cap: float = MAX_DELAY
) -> Iterator[float]:
    """The delays between attempts: ``first``, multiplied by ``factor`` after
    each attempt, never above ``cap`` (0.5, 1, 2, 4, 8, 10, 10, ...)."""
    delay = first
    while True:
        yield min(delay, cap)
        delay = min(delay * factor, cap)


class BrokerUnreachable(RuntimeError):
    """No broker answered at an address within the allowed wait."""

    def __init__(self, address: str, limit: float, last: BaseException | None) -> None:
        self.address = address
        self.limit = limit
        self.last = last
        super().__init__(
            f"no Kafka broker answered at {address} within {seconds(limit)} ({WAIT_VAR})"
        )


def seconds(value: float) -> str:
    """``value`` seconds as the log lines show them (to a tenth: 0.5s, 10s)."""
    return "no limit" if math.isinf(value) else f"{round(value, 1):g}s"


def retry_line(address: str, reason: str, delay: float, waited: float, limit: float) -> str:
    """The line logged after a failed attempt."""
    return (
        f"broker {address} unreachable ({reason}); retrying in {seconds(delay)} "
        f"(waited {seconds(waited)} of {seconds(limit)})"
    )


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means "no broker answers (yet)", worth another attempt:
    a refused or timed-out connection, or a retriable Kafka error (a broker
    that is starting: no leader, no coordinator, not ready). Anything else
    (a bad address, an authentication failure) is not waited out."""
    from aiokafka.errors import KafkaConnectionError, KafkaError

    if isinstance(exc, (OSError, asyncio.TimeoutError, KafkaConnectionError)):
        return True
    return isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))


class _LastMessage(logging.Handler):
    """Keeps the last message aiokafka logs during an attempt (its connection
    errors say more than the exception it raises), instead of printing it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.last = record.getMessage()


@contextlib.contextmanager
def _aiokafka_quiet() -> Iterator[_LastMessage]:
    """aiokafka's warnings and errors go to the returned handler only: each
    attempt is reported by one line of ours, not by a line of theirs too."""
    logger = logging.getLogger("aiokafka")
    handler = _LastMessage()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


#: How aiokafka's connection messages begin (``Unable connect to "host:port": ``):
#: the line names the address already.
_ADDRESS_PREFIX = re.compile(r'^Unable [^"]*"[^"]*": ')


def reason(exc: BaseException, logged: str | None) -> str:
    """Why an attempt failed, in a few words: the exception's type, and what
    aiokafka logged about it when it logged anything (the exception of a
    refused bootstrap only lists the addresses it tried)."""
    name = type(exc).__name__
    detail = _ADDRESS_PREFIX.sub("", logged) if logged else str(exc)
    detail = detail.removeprefix(f"{name}: ")
    return f"{name}: {detail}" if detail else name


async def wait_for_broker(
    address: str,
    limit: float,
    attempt: Callable[[], Awaitable[T]],
    *,
    delays: Iterator[float] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    say: Callable[[str], object] | None = None,
) -> T:
    """Make ``attempt`` until it succeeds, and return what it returns.

    An attempt that fails because the broker does not answer (see
    :func:`unreachable`) is logged as one line naming ``address``, the
    reason and the delay before the next attempt, which follows
    :func:`backoff`. Once ``limit`` seconds have passed since the first
    attempt, :class:`BrokerUnreachable` is raised instead; the last delay
    is shortened so that the last attempt falls on the limit. A failed
    authentication or an untrusted certificate raises
    :class:`~seqkeeper.security.SecurityFailure` at once (aiokafka logs
    the cause and raises "Unable to bootstrap"); any other error propagates
    at once.
    """
    say = say or (lambda line: print(line, flush=True))
    delays = delays if delays is not None else backoff()
    limit = max(limit, 0.0)
    start = clock()
    while True:
        with _aiokafka_quiet() as logged, watching() as causes:
            try:
                return await attempt()
            except Exception as exc:
                cause = causes.cause or security_cause(exc)
                if cause:  # retrying cannot help: say what failed, once
                    raise failure(address, cause) from None
                if not unreachable(exc):
                    raise
                last, why = exc, reason(exc, logged.last)
        waited = clock() - start
        remaining = limit - waited
        if remaining <= 0:
            raise BrokerUnreachable(address, limit, last)
        delay = min(next(delays), remaining)
        say(retry_line(address, why, delay, waited, limit))
        await sleep(delay)


async def broker_answers(address: str, timeout: float = ATTEMPT_TIMEOUT) -> dict[str, object]:
    """One attempt: connect to ``address`` and ask for the cluster's metadata
    (aiokafka's admin client, closed after); the answer, which names at
    least one broker. Raises when no broker answers within ``timeout``."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaConnectionError

    timeout_ms = max(int(timeout * 1000), 1)
    admin = AIOKafkaAdminClient(
        bootstrap_servers=address, **kafka_options(), request_timeout_ms=timeout_ms
    )
    try:
        async with asyncio.timeout(timeout + 1.0):
            await admin.start()
            cluster: dict[str, object] = await admin.describe_cluster()
    finally:
        await admin.close()
    if not cluster.get("brokers"):
        raise KafkaConnectionError(f"the metadata from {address} names no broker yet")
    return cluster


async def first_connection(address: str, timeout: float = ATTEMPT_TIMEOUT) -> BaseException | None:
    """One attempt of :func:`wait_for_broker` at ``address``, printing
    nothing (aiokafka's lines of it are kept from the output): raises
    :class:`~seqkeeper.security.SecurityFailure` on a failed authentication
    or an untrusted certificate; else None once a broker answered, or what
    else failed, not raised (a broker that does not answer yet: whoever
    connects next meets it, and waits or reports it in its own way)."""
    try:
        await wait_for_broker(
            address, 0.0, lambda: broker_answers(address, timeout), say=lambda line: None
        )
    except SecurityFailure:
        raise
    except Exception as exc:
        return exc
    return None
