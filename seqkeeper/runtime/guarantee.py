"""The processing guarantee: exactly-once where the broker has transactions,
the write-ahead outbox (at-least-once) where it has not, chosen once at
worker start (``SEQKEEPER_PROCESSING_GUARANTEE``).

A broker may advertise the transactional API versions and still not
implement them: the embedded broker lists InitProducerId but answers it
with UNKNOWN_SERVER_ERROR, for a transactional producer and an idempotent
one alike. So the question is asked the only way that tells: a
transactional producer starts (InitProducerId) or does not. Only "not
implemented" answers mean no; an authorization error, or a broker that
cannot be reached, is raised as it is — falling back to at-least-once
there would weaken the guarantee because of a misconfiguration.
"""

from __future__ import annotations

import asyncio
import logging
import math

from aiokafka import AIOKafkaProducer
from aiokafka.errors import UnknownError, UnsupportedVersionError

from seqkeeper.security import kafka_options
from seqkeeper.settings import VARS, Guarantee, Settings
from seqkeeper.settings.runtime_settings import auto_fetch_wait

#: The answers that mean "this broker has no transactions".
NOT_IMPLEMENTED = (UnknownError, UnsupportedVersionError)
#: Their names in Kafka's protocol (aiokafka calls -1 just UNKNOWN).
ANSWER_NAMES: dict[type[Exception], str] = {
    UnknownError: "UNKNOWN_SERVER_ERROR",
    UnsupportedVersionError: "UNSUPPORTED_VERSION",
}
#: The shortest time the probe gets, whatever ``SEQKEEPER_BROKER_WAIT``
#: says: a fresh Kafka creates its transaction log on the first
#: InitProducerId.
PROBE_MIN_SECONDS = 30.0
#: The variable that asks for a guarantee.
SETTING = VARS["processing_guarantee"].env


class GuaranteeRefused(RuntimeError):
    """The requested guarantee cannot be had on this broker, or the worker
    may not ask: the message, one line, says why and what to do."""


async def transactions_answer(bootstrap: str, transactional_id: str) -> str | None:
    """``None`` when the broker initialises a producer with
    ``transactional_id`` (use an id of its own: initialising fences an older
    producer with it); else the broker's "not implemented" answer, named as
    in Kafka's protocol (``UNKNOWN_SERVER_ERROR``, ``UNSUPPORTED_VERSION``).
    Any other error is raised."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, **kafka_options(), transactional_id=transactional_id
    )
    sender = logging.getLogger("aiokafka.producer.sender")
    quiet = sender.level
    sender.setLevel(logging.CRITICAL)  # its error log of the answer we expect on no
    try:
        await producer.start()
    except NOT_IMPLEMENTED as exc:
        return ANSWER_NAMES.get(type(exc), type(exc).__name__)
    finally:
        sender.setLevel(quiet)
        await producer.stop()
    return None


async def has_transactions(bootstrap: str, transactional_id: str) -> bool:
    """Whether the broker initialises a producer with ``transactional_id``
    (use an id of its own: initialising fences an older producer with it)."""
    return await transactions_answer(bootstrap, transactional_id) is None


def is_authorization_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a broker's denial (``TransactionalIdAuthorizationFailed``,
    ``ClusterAuthorizationFailedError``, …): never a reason to fall back."""
    name = type(exc).__name__
    return name.endswith(("AuthorizationFailed", "AuthorizationFailedError"))


def no_transactions(
    requested: str, bootstrap: str, answer: str, embedded: bool
) -> GuaranteeRefused:
    """The refusal of ``requested`` (exactly_once) on a broker without transactions."""
    which = " (the embedded broker, Tansu)" if embedded else ""
    return GuaranteeRefused(
        f"{SETTING}={requested} needs a broker with transactions: the broker at {bootstrap}"
        f"{which} answered InitProducerId with {answer}; use at_least_once or auto, "
        "or Apache Kafka (KAFKA_BOOTSTRAP_SERVERS / KAFKA_HOME)"
    )


def denied(
    requested: str, bootstrap: str, app_id: str, exc: BaseException, principal: str = ""
) -> GuaranteeRefused:
    """The refusal when the broker denies the probe its transactional id
    (``principal``: the user the broker authorizes, when it has one)."""
    answer = getattr(type(exc), "message", type(exc).__name__)
    who = f"the worker (User:{principal})" if principal else "the worker"
    return GuaranteeRefused(
        f"{SETTING}={requested}: the broker at {bootstrap} answered InitProducerId of "
        f"{app_id}-probe with {answer}; {who} needs WRITE and DESCRIBE on "
        f"TransactionalId prefix {app_id}- (or set {SETTING}=at_least_once)"
    )


def no_answer(requested: str, bootstrap: str, app_id: str, limit: float) -> GuaranteeRefused:
    """The refusal when the probe's InitProducerId is not answered in time."""
    return GuaranteeRefused(
        f"{SETTING}={requested}: the broker at {bootstrap} did not answer InitProducerId of "
        f"{app_id}-probe within {limit:g} s (is its transaction coordinator up? a single "
        "broker needs transaction.state.log.replication.factor=1 and "
        f"transaction.state.log.min.isr=1); or set {SETTING}=at_least_once"
    )


async def resolve_guarantee(
    requested: str,
    bootstrap: str,
    app_id: str,
    embedded: bool,
    *,
    timeout: float | None = None,
    principal: str = "",
) -> tuple[Guarantee, str]:
    """The guarantee to run and why,
    for the setting's value ``requested``. Unless at_least_once is asked
    for, the broker is probed with the transactional id ``{app_id}-probe``
    (its own: it never fences a running owner; the same ACL prefix as the
    worker's). :class:`GuaranteeRefused` when exactly_once is asked of a
    broker without transactions, when the broker denies the id (whatever
    was asked: a denial is a misconfiguration, not a broker without
    transactions), or when it gives no answer within ``timeout`` seconds."""
    if requested == Guarantee.AT_LEAST_ONCE:
        return Guarantee.AT_LEAST_ONCE, "requested"
    try:
        answer = await asyncio.wait_for(transactions_answer(bootstrap, f"{app_id}-probe"), timeout)
    except TimeoutError:
        if timeout is None:  # (not ours)
            raise
        raise no_answer(requested, bootstrap, app_id, timeout) from None
    except Exception as exc:
        if is_authorization_error(exc):
            raise denied(requested, bootstrap, app_id, exc, principal) from None
        raise
    if requested == "auto":
        if answer is None:
            return Guarantee.EXACTLY_ONCE, "auto: the broker supports transactions"
        return Guarantee.AT_LEAST_ONCE, "auto: the broker has no transactions"
    if answer is None:
        return Guarantee.EXACTLY_ONCE, "requested"
    raise no_transactions(requested, bootstrap, answer, embedded)


def probe_limit(broker_wait: float) -> float | None:
    """How long the probe may take: ``SEQKEEPER_BROKER_WAIT`` (``None``
    for no limit), at least :data:`PROBE_MIN_SECONDS`."""
    return None if math.isinf(broker_wait) else max(broker_wait, PROBE_MIN_SECONDS)


def choose_guarantee(settings: Settings, embedded: bool, principal: str = "") -> Settings:
    """``settings`` with the guarantee the worker runs, resolved against
    its broker (``embedded``: the embedded broker this process started),
    and a line saying which and why. A refusal is :class:`GuaranteeRefused`
    (``seqkeeper worker``: one line, exit 1); a stop (Ctrl-C, SIGTERM) exits 0."""
    bootstrap = settings.broker.bootstrap
    try:
        mode, why = asyncio.run(
            resolve_guarantee(
                settings.runtime.processing_guarantee,
                bootstrap,
                settings.group_id,
                embedded,
                timeout=probe_limit(settings.broker.broker_wait),
                principal=principal,
            )
        )
    except KeyboardInterrupt:
        print(f"stopped while asking the broker at {bootstrap} for transactions", flush=True)
        raise SystemExit(0) from None
    print(f"processing guarantee: {mode} ({why})", flush=True)
    return settings.with_overrides(processing_guarantee=mode.value)


def choose_fetch_wait(settings: Settings) -> Settings:
    """``settings`` (with its guarantee chosen, :func:`choose_guarantee`)
    with ``SEQKEEPER_FETCH_MAX_WAIT=auto`` resolved (:func:`auto_fetch_wait`),
    and a line saying which and why; a value set is kept as it is."""
    if settings.runtime.fetch_max_wait is not None:
        return settings
    mode = settings.runtime.guarantee
    wait = auto_fetch_wait(mode)
    why = (
        "the broker answers a waiting fetch when records arrive"
        if mode is Guarantee.EXACTLY_ONCE
        else "a bound on the latency a waiting fetch adds"
    )
    print(f"fetch max wait: {wait:g} s (auto, {mode}: {why})", flush=True)
    return settings.with_overrides(fetch_max_wait=wait)
