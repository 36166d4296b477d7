"""Command Messages: an idempotent command handler with a Transactional Outbox.

A command names an entity (``tenantId`` + ``partitionKey``, the Kafka key)
and a ``commandType``; a registered handler ``(state, command) -> (new_state,
events)`` decides. :func:`decide` turns one command, the entity record and
the command's receipt into a :class:`Decision`: the new entity record, the
new receipt, what to dispatch, and whether to retry or dead-letter.

Records (the shell stores them; time is an argument, never read here):

* :class:`Entity` — version, state, and the *outbox*: the messages of
  commands not yet known to be dispatched, stored in the same record as the
  state they belong to, so persisting both is one write.
* :class:`Receipt` — the Message Store record and dedup marker of a command:
  status (RECEIVED -> PROCESSING -> COMPLETED | FAILED | EXPIRED),
  timestamps, error, attempts, the reply, and whether it was dispatched.

Rules:

* Tenants are apart: a command's tenant is its ``tenantId`` (which the
  record's ``tenant`` header, when a gateway sets one, must equal). Its
  entity is the partitionKey within the tenant (:func:`entity_key`), its
  receipt the messageId within the tenant (:func:`receipt_id`): the same
  messageId from two tenants is two commands, each decided on its own.
* A command's effect is decided at most once per tenant and messageId. What
  a copy dispatches depends on the shell's commit (``transactional``):

  - at_least_once (the write-ahead outbox: state first, outputs after, a
    crash between the two loses the dispatch): a copy that arrives while
    its messages are still in the outbox dispatches them again (same
    messageIds, same bytes); a copy after they were dispatched is dropped,
    and its stored reply is sent again when the copy asks for one
    (``replyTo``);
  - exactly_once (``transactional``: the messages commit in one transaction
    with the entity that holds them, or nothing does): a copy that arrives
    while they are still in the outbox dispatches nothing (they are queued
    in that transaction already, and its reply answers the copy too: it
    commits after the copy was sent); a copy after they were dispatched
    gets the stored reply again when it asks, as under at_least_once (a
    client that missed the answer asks again with the same messageId),
    and nothing else. So a read_committed consumer sees each event and
    dead letter once, and a reply once plus once per later copy that asks
    (byte-identical).
* Unknown ``commandType`` or unsupported ``schemaVersion``: FAILED and
  dead-lettered with the reason (checked first: a contract error).
* ``expiresAt`` passed: not executed, EXPIRED, reply "expired".
* ``expectedVersion`` (optimistic concurrency) differs from the entity's
  version: FAILED, reply naming both versions, state unchanged.
* A handler ends its entity by returning :class:`End` as the new state: the
  command is COMPLETED at the next version (its events and reply carry it,
  the reply ``ended: true`` and ``data`` the :class:`End`'s), and the entity
  is then the record of an entity never seen, ``Entity(0, None, outbox)``:
  its outbox (the ending command's messages among them) is dispatched and
  marked as any other, and a record holding nothing (:attr:`Entity.empty`)
  is deleted by the shell, not written. Receipts are kept per command, not
  per entity, so a copy of any command of the ended entity is still a
  duplicate (its stored reply, no second run) for as long as its receipt
  is kept; a new command for the key starts a new entity at version 0
  (``expectedVersion`` 0 asks for exactly that).
* :class:`DomainError` from the handler: FAILED, reply ``success=false``,
  no retry. Any other exception (a timeout too): PROCESSING, retried with
  capped exponential backoff (:class:`RetryPolicy`), then FAILED and
  dead-lettered.

Handlers may be ``async def``. The core never awaits: :func:`handler_to_call`
says which handler :func:`decide` would call for its arguments, the shell
awaits that handler itself and hands its :data:`Outcome` (:class:`Returned`
or :class:`Raised`) to :func:`decide`, which then decides as if it had
called the handler. Without an outcome :func:`decide` calls a sync handler
(``tests/processors/test_command_outcome.py``: the two decide alike, and
:func:`handler_to_call` names a handler exactly when :func:`decide` calls one).

Invariants (``tests/processors/test_command.py``): however often and in
whatever interleaving commands of several tenants are delivered, each
(tenant, messageId)'s handler result is applied at most once and never
hides another tenant's command of the same messageId, entity versions count
applied commands (since the entity's last end), and every dispatch of a
command carries the same messageIds and bytes; ``tests/processors/
test_command_end.py``: after an end, copies of the entity's commands get
their stored replies and run nothing, and a new command sees a new entity.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import orjson

from seqkeeper.processors.dead_letter import DETAIL, dead_letter_headers
from seqkeeper.processors.envelope import InvalidMessage, output_id, parse_time
from seqkeeper.processors.envelope import scoped as scoped  # (tenant-scoped names, re-exported)
from seqkeeper.processors.envelope import unscoped as unscoped
from seqkeeper.processors.values import value

Status = Literal["RECEIVED", "PROCESSING", "COMPLETED", "FAILED", "EXPIRED"]
#: :attr:`Outgoing.topic` of a dead letter (the shell's dead-letter topic).
DEAD_LETTER = "@dead-letter"
#: Where a command was read: topic, partition, offset, timestamp (ms).
Origin = tuple[str, int, int, int | None]


class CommandReason:
    """Dead-letter reasons of the command topic (``seqkeeper.reason``)."""

    INVALID_ENVELOPE = "invalid-envelope"
    KEY_MISMATCH = "key-mismatch"
    TENANT_MISMATCH = "tenant-mismatch"
    #: SEQKEEPER_COMMAND_AUTH=jwt: the token does not allow the command
    #: (:mod:`processors.authorization`)
    UNAUTHORIZED = "unauthorized"
    UNKNOWN_COMMAND_TYPE = "unknown-command-type"
    UNSUPPORTED_SCHEMA_VERSION = "unsupported-schema-version"
    HANDLER_FAILED = "handler-failed"
    #: ``replyTo`` names a topic replies may not go to (processors/return_address.py)
    INVALID_REPLY_TO = "invalid-reply-to"
    #: the reply's topic does not exist or may not be written (the command was applied)
    REPLY_UNDELIVERABLE = "reply-undeliverable"


class DomainError(Exception):
    """A business rule refused the command (no retry; the reply says why)."""

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


@value
class Command:
    """A valid command envelope. ``value`` is the original bytes."""

    message_id: str
    command_type: str
    schema_version: int
    correlation_id: str
    causation_id: str | None
    reply_to: str | None
    expires_at: float | None
    partition_key: str
    tenant_id: str
    headers: Mapping[str, Any]
    payload: Any
    expected_version: int | None
    value: bytes
    #: the record's trace headers (W3C ``traceparent``, ``tracestate``),
    #: copied onto the command's reply and events
    trace: tuple[tuple[str, bytes], ...] = ()

    @property
    def entity(self) -> str:
        """The entity this command addresses: tenant and aggregate id."""
        return entity_key(self.tenant_id, self.partition_key)

    @property
    def receipt_id(self) -> str:
        """What this command's receipt is kept under: tenant and messageId."""
        return receipt_id(self.tenant_id, self.message_id)


def entity_key(tenant_id: str, partition_key: str) -> str:
    return scoped(tenant_id, partition_key)


def receipt_id(tenant_id: str, message_id: str) -> str:
    return scoped(tenant_id, message_id)


def tenant_header(tenants: Sequence[bytes | None]) -> bytes | None:
    """The tenant a record's ``tenant`` headers name (``None``: no such
    header); :class:`InvalidMessage` ``tenant-mismatch`` unless each names
    the same one: a gateway's header may come after a client's own, and a
    null one names no tenant."""
    if tenants and (tenants[0] is None or tenants.count(tenants[0]) != len(tenants)):
        raise InvalidMessage(
            CommandReason.TENANT_MISMATCH,
            f"the record's tenant headers {list(tenants)!r} do not name one tenant",
        )
    return tenants[0] if tenants else None


def parse_command(
    key: bytes | None,
    value: bytes | None,
    tenant: bytes | None = None,
    trace: tuple[tuple[str, bytes], ...] = (),
) -> Command:
    """Validate a command record; raise :class:`InvalidMessage` saying why.

    ``tenant``: the record's ``tenant`` header when a gateway sets it; the
    envelope's ``tenantId`` must then match it. ``trace``: the record's
    trace headers (:func:`trace_of`)."""

    def bad(reason: str, detail: str) -> InvalidMessage:
        return InvalidMessage(reason, detail)

    if value is None:
        raise bad(CommandReason.INVALID_ENVELOPE, "the value is null; expected a JSON object")
    try:
        doc: Any = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise bad(CommandReason.INVALID_ENVELOPE, f"the value is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise bad(CommandReason.INVALID_ENVELOPE, "the value is not a JSON object")

    def text(name: str, required: bool = True) -> str | None:
        v = doc.get(name)
        if v is None and not required:
            return None
        if not isinstance(v, str) or not v:
            raise bad(
                CommandReason.INVALID_ENVELOPE, f"{name} must be a non-empty string, got {v!r}"
            )
        return v

    message_id = text("messageId")
    command_type = text("commandType")
    correlation_id = text("correlationId")
    partition_key = text("partitionKey")
    tenant_id = text("tenantId")
    causation_id = text("causationId", required=False)
    reply_to = text("replyTo", required=False)
    version = doc.get("schemaVersion")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise bad(
            CommandReason.INVALID_ENVELOPE,
            f"schemaVersion must be an integer >= 1, got {version!r}",
        )
    expected = doc.get("expectedVersion")
    if expected is not None and (
        isinstance(expected, bool) or not isinstance(expected, int) or expected < 0
    ):
        raise bad(
            CommandReason.INVALID_ENVELOPE,
            f"expectedVersion must be an integer >= 0, got {expected!r}",
        )
    headers = doc.get("headers", {})
    if not isinstance(headers, dict):
        raise bad(CommandReason.INVALID_ENVELOPE, f"headers must be an object, got {headers!r}")
    if "payload" not in doc:
        raise bad(CommandReason.INVALID_ENVELOPE, "required field 'payload' is missing")
    expires_at = None
    if doc.get("expiresAt") is not None:
        try:
            expires_at = parse_time(doc["expiresAt"], "expiresAt")
        except InvalidMessage as exc:
            raise bad(CommandReason.INVALID_ENVELOPE, exc.detail) from None
    assert message_id and command_type and correlation_id and partition_key and tenant_id
    # compared as bytes: decoded with replacement, b"\xff" and b"\xfe" would
    # both pass for the partitionKey (or tenantId) "\ufffd"
    if key != partition_key.encode("utf-8"):
        kafka_key = None if key is None else key.decode("utf-8", "replace")
        raise bad(
            CommandReason.KEY_MISMATCH,
            f"the Kafka key {kafka_key!r} is not the partitionKey {partition_key!r}",
        )
    if tenant is not None and tenant != tenant_id.encode("utf-8"):
        raise bad(
            CommandReason.TENANT_MISMATCH,
            f"tenantId {tenant_id!r} is not the record's tenant header "
            f"{tenant.decode('utf-8', 'replace')!r}",
        )
    return Command(
        message_id,
        command_type,
        version,
        correlation_id,
        causation_id,
        reply_to,
        expires_at,
        partition_key,
        tenant_id,
        headers,
        doc["payload"],
        expected,
        value,
        trace,
    )


@value
class Event:
    """What a handler emits: a domain event (``topic`` None: the events topic)."""

    type: str
    data: Any = None
    topic: str | None = None


@value
class Outgoing:
    """A message to dispatch: topic (``None``: the events topic;
    :data:`DEAD_LETTER`: the dead-letter topic), key, bytes, headers."""

    topic: str | None
    key: str
    message_id: str
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()

    def to_json(self) -> list[Any]:
        return [
            self.topic,
            self.key,
            self.message_id,
            self.value.decode("latin-1"),
            [[k, v.decode("latin-1")] for k, v in self.headers],
        ]

    @staticmethod
    def from_json(raw: list[Any]) -> Outgoing:
        headers = tuple((k, v.encode("latin-1")) for k, v in raw[4])
        return Outgoing(raw[0], raw[1], raw[2], raw[3].encode("latin-1"), headers)


@value
class Entity:
    """An entity record: version (applied commands since the entity began),
    state, and the outbox (command messageId -> its messages) of commands
    not yet dispatched."""

    version: int = 0
    state: Any = None
    outbox: tuple[tuple[str, tuple[Outgoing, ...]], ...] = ()

    @property
    def empty(self) -> bool:
        """Whether the record holds nothing: an entity never seen, or one
        ended (:class:`End`) whose messages are dispatched. The shell
        deletes such a record rather than write it, so an absent record and
        an empty one read alike."""
        return self.version == 0 and self.state is None and not self.outbox

    def pending(self, command_id: str) -> tuple[Outgoing, ...] | None:
        for cid, messages in self.outbox:
            if cid == command_id:
                return messages
        return None


@value
class Receipt:
    """The Message Store record of a command (and its dedup marker)."""

    message_id: str
    status: Status
    entity: str
    command_type: str
    correlation_id: str
    received_at: float
    updated_at: float
    attempts: int = 0
    error: str | None = None
    reply: Outgoing | None = None
    dispatched: bool = False
    retry_at: float | None = None
    #: The command bytes and where they were read, kept only while a retry
    #: is pending.
    value: bytes | None = None
    origin: Origin | None = None
    #: The command record's trace headers (values as Latin-1 text), kept
    #: only while a retry is pending, as ``value`` is.
    trace: tuple[tuple[str, str], ...] = ()

    @property
    def tenant(self) -> str:
        """The command's tenant (its entity key names it)."""
        return unscoped(self.entity)[0]

    @property
    def receipt_id(self) -> str:
        """What the receipt is kept under (:attr:`Command.receipt_id`)."""
        return scoped(self.tenant, self.message_id)


@value
class End:
    """A handler's new state that ends its entity: ``return End(data),
    events``. The command is applied (COMPLETED, at the next version, its
    events dispatched once, its reply ``ended: true`` with ``data``: say
    what the client should know, e.g. the entity's last state); the
    entity's record is deleted once those messages are dispatched (a
    changelog tombstone, so a restore forgets it), and the next command for
    the same key gets ``None`` at version 0: a new entity."""

    data: Any = None


#: ``(state, command) -> (new_state, events)``, or an ``async def`` one;
#: ``new_state`` :class:`End` ends the entity.
Handler = Callable[[Any, Command], tuple[Any, list[Event]] | Awaitable[tuple[Any, list[Event]]]]
HandlerT = TypeVar("HandlerT", bound=Handler)


@dataclass
class Registry:
    """Handlers per ``(commandType, schemaVersion)``."""

    handlers: dict[tuple[str, int], Handler] = field(default_factory=dict)

    def register(
        self, command_type: str, schema_version: int = 1
    ) -> Callable[[HandlerT], HandlerT]:
        def add(handler: HandlerT) -> HandlerT:
            self.handlers[(command_type, schema_version)] = handler
            return handler

        return add

    def versions(self, command_type: str) -> list[int]:
        return sorted(v for t, v in self.handlers if t == command_type)


@value
class RetryPolicy:
    """Attempts in all (the first included), and the capped backoff."""

    attempts: int = 5
    base: float = 0.5
    cap: float = 30.0

    def delay(self, attempt: int) -> float:
        """Seconds before attempt ``attempt + 1`` (``attempt`` >= 1)."""
        return float(min(self.cap, self.base * 2 ** (attempt - 1)))


@value
class Decision:
    """What to persist (``entity`` and ``receipt`` when not ``None``), what
    to dispatch now, and a dead letter ``(reason, detail, exception class)``."""

    entity: Entity | None = None
    receipt: Receipt | None = None
    dispatch: tuple[Outgoing, ...] = ()
    dead_letter: tuple[str, str, str] | None = None
    duplicate: bool = False
    applied: bool = False
    #: the handler ended the entity (:class:`End`)
    ended: bool = False
    #: the command's outbox entry was added to ``entity`` (it may hold
    #: nothing to send): the shell marks it once the batch is committed
    entry: bool = False


@value
class Returned:
    """A handler returned: the new state and the events."""

    state: Any
    events: list[Event]


@value
class Raised:
    """A handler raised ``error`` (a :class:`DomainError`, or a transient
    failure, such as :func:`timed_out`)."""

    error: Exception


#: What one run of a handler came to.
Outcome = Returned | Raised


def returned(result: Any) -> Returned:
    """A handler's return value, ``(new_state, events)``, as a
    :class:`Returned`; an error when it is no pair (an awaitable, from a
    handler not declared ``async def``, is closed unawaited: only the shell
    awaits)."""
    if type(result) is not tuple and inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise TypeError(
            "the handler returned an awaitable where a (new_state, events) pair was expected "
            "(declare it async def)"
        )
    state, events = result
    if state is End:
        raise TypeError("the handler returned the class End where End(data) was expected")
    return Returned(state, events)


def run(handler: Handler, state: Any, command: Command) -> Outcome:
    """Call a sync ``handler``: what it returned or raised."""
    try:
        return returned(handler(state, command))
    except Exception as exc:  # noqa: BLE001 - every failure is an outcome
        return Raised(exc)


def timed_out(limit: float) -> Raised:
    """The outcome of a run stopped after ``limit`` seconds: a transient
    failure (retried, then dead-lettered) that names the limit."""
    return Raised(TimeoutError(f"handler ran past {limit:g} s"))


def handler_to_call(
    registry: Registry,
    entity: Entity,
    receipt: Receipt | None,
    command: Command,
    now: float,
    retrying: bool = False,
) -> Handler | None:
    """The handler :func:`decide` calls for these arguments, or ``None``
    when it decides without one (a copy of a command already decided, no
    handler for its type and version, expired, a version conflict)."""
    if entity.pending(command.message_id) is not None or _decided(receipt, retrying):
        return None
    handler = registry.handlers.get((command.command_type, command.schema_version))
    if handler is None or _expired(command, now) or _conflict(command, entity):
        return None
    return handler


def _decided(receipt: Receipt | None, retrying: bool) -> bool:
    """Whether the command's receipt says it needs no run (again)."""
    return receipt is not None and not (retrying and receipt.status == "PROCESSING")


def _expired(command: Command, now: float) -> bool:
    return command.expires_at is not None and now > command.expires_at


def _conflict(command: Command, entity: Entity) -> bool:
    return command.expected_version is not None and command.expected_version != entity.version


def reply_id(command: Command) -> str:
    """The messageId of ``command``'s reply (:func:`output_id` in its tenant)."""
    return output_id(command.tenant_id, command.message_id, "reply")


def reply(
    command: Command,
    success: bool,
    message: str,
    data: Any = None,
    version: int | None = None,
    ended: bool = False,
) -> Outgoing | None:
    if command.reply_to is None:
        return None
    body = {
        "messageId": reply_id(command),
        "correlationId": command.correlation_id,
        "causationId": command.message_id,
        "success": success,
        "message": message,
        "data": data,
    }
    if version is not None:
        body["version"] = version
    if ended:
        body["ended"] = True
    return Outgoing(
        command.reply_to,
        command.partition_key,
        reply_id(command),
        orjson.dumps(body),
        command.trace,
    )


def _events(command: Command, events: list[Event], version: int) -> tuple[Outgoing, ...]:
    out = []
    for n, ev in enumerate(events, 1):
        mid = output_id(command.tenant_id, command.message_id, str(n))
        body = {
            "messageId": mid,
            "type": ev.type,
            "correlationId": command.correlation_id,
            "causationId": command.message_id,
            "tenantId": command.tenant_id,
            "entity": command.partition_key,
            "version": version,
            "data": ev.data,
        }
        out.append(
            Outgoing(ev.topic, command.partition_key, mid, orjson.dumps(body), command.trace)
        )
    return tuple(out)


def decide(
    registry: Registry,
    entity: Entity,
    receipt: Receipt | None,
    command: Command,
    now: float,
    retry: RetryPolicy = RetryPolicy(),
    retrying: bool = False,
    origin: Origin | None = None,
    outcome: Outcome | None = None,
    transactional: bool = False,
) -> Decision:
    """Decide on ``command`` for ``entity`` given its ``receipt`` (if any).

    ``retrying``: the shell's retry timer offers a command in PROCESSING.
    ``origin``: where the command was read (for dead-letter headers).
    ``outcome``: what the handler :func:`handler_to_call` names came to
    when the shell ran it (an async handler) on ``entity.state``; used
    instead of calling the handler, and ignored when these arguments call
    none. Without it, the (sync) handler is called here.
    ``transactional``: the shell commits the messages decided here in one
    transaction with the entity that holds them (exactly_once): a copy then
    dispatches nothing again but its stored reply (see the module's rules).
    """
    mid = command.message_id
    stored = entity.pending(mid)
    if stored is not None:  # not yet known to be dispatched
        repaired = receipt
        if receipt is None or receipt.status == "PROCESSING":  # a crash cut the receipt write
            repaired = recovered_receipt(command.entity, mid, stored, now, receipt, command)
        # at_least_once: the dispatch before may be lost, dispatch the same
        # messages again; exactly_once: they go out in the transaction that
        # commits this entity (or nothing of it does), once, and the reply
        # among them commits after this copy was sent: it answers it too
        return Decision(
            receipt=repaired if repaired is not receipt else None,
            dispatch=() if transactional else stored,
            duplicate=True,
        )
    if _decided(receipt, retrying):
        assert receipt is not None
        again: tuple[Outgoing, ...] = ()
        if receipt.dispatched and receipt.reply is not None and command.reply_to is not None:
            again = (receipt.reply,)  # (committed before this copy was read: it asks again)
        return Decision(dispatch=again, duplicate=True)

    attempts = receipt.attempts if receipt is not None else 0
    received = receipt.received_at if receipt is not None else now

    def record(
        status: Status, error: str | None = None, answer: Outgoing | None = None, **extra: Any
    ) -> Receipt:
        return Receipt(
            mid,
            status,
            command.entity,
            command.command_type,
            command.correlation_id,
            received,
            now,
            attempts,
            error,
            answer,
            **extra,
        )

    def finish(
        status: Status,
        answer: Outgoing | None,
        error: str | None = None,
        new: Entity | None = None,
        events: tuple[Outgoing, ...] = (),
        dead: tuple[str, str, str] | None = None,
        ended: bool = False,
    ) -> Decision:
        base = entity if new is None else new
        messages = events + ((answer,) if answer is not None else ())
        if dead is not None:  # the dead letter is dispatched like the rest
            reason, detail, cls = dead
            where = origin or ("", 0, 0, None)
            headers = dead_letter_headers(reason, detail, *where, exception_class=cls)
            headers.append(("seqkeeper.attempts", str(attempts).encode()))
            letter = Outgoing(
                DEAD_LETTER,
                command.partition_key,
                output_id(command.tenant_id, mid, "dead-letter"),
                command.value,
                tuple(headers),
            )
            messages += (letter,)
        # An applied command keeps an outbox entry even with nothing to send
        # (no events, no replyTo; an End's too) unless its entity and
        # receipt commit together (``transactional``): the entity record is
        # written (or deleted) before the receipt, and without the entry a
        # crash between the two would leave no trace of the command but its
        # effect, so a copy would be applied again. The
        # mark drops the entry after the receipt is written (after a crash,
        # the sweep's: recovered_receipt). A command not applied writes no
        # entity, so a copy after such a crash is decided again alike.
        entry = bool(messages) or (new is not None and not transactional)
        stored_entity = replace(base, outbox=(*base.outbox, (mid, messages))) if entry else new
        rec = record(status, error, answer, dispatched=not entry)
        return Decision(
            stored_entity,
            rec,
            messages,
            dead,
            applied=new is not None,
            ended=ended,
            entry=entry,
        )

    handler = registry.handlers.get((command.command_type, command.schema_version))
    if handler is None:
        versions = registry.versions(command.command_type)
        if versions:
            reason = CommandReason.UNSUPPORTED_SCHEMA_VERSION
            detail = (
                f"{command.command_type} schemaVersion {command.schema_version} is not "
                f"supported (supported: {', '.join(map(str, versions))})"
            )
        else:
            reason = CommandReason.UNKNOWN_COMMAND_TYPE
            detail = f"no handler for commandType {command.command_type!r}"
        return finish(
            "FAILED",
            reply(command, False, detail),
            detail,
            dead=(reason, detail, "seqkeeper.UnknownCommand"),
        )
    if _expired(command, now):
        return finish("EXPIRED", reply(command, False, "expired"), "expired")
    if _conflict(command, entity):
        detail = (
            f"version conflict: expected version {command.expected_version}, "
            f"entity is at version {entity.version}"
        )
        return finish("FAILED", reply(command, False, detail, version=entity.version), detail)
    attempts += 1
    if outcome is None:
        outcome = run(handler, entity.state, command)
    if isinstance(outcome, Raised):
        exc = outcome.error
        if isinstance(exc, DomainError):
            return finish(
                "FAILED",
                reply(command, False, exc.message, exc.data, version=entity.version),
                exc.message,
            )
        # any other failure is retried
        error = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
        if attempts < retry.attempts:
            return Decision(
                receipt=record(
                    "PROCESSING",
                    error,
                    retry_at=now + retry.delay(attempts),
                    value=command.value,
                    origin=origin,
                    trace=tuple((k, v.decode("latin-1")) for k, v in command.trace),
                )
            )
        detail = f"handler failed {attempts} times; last error: {error}"
        cls = f"{type(exc).__module__}.{type(exc).__qualname__}"
        return finish(
            "FAILED",
            reply(command, False, detail),
            detail,
            dead=(CommandReason.HANDLER_FAILED, detail, cls),
        )
    new_state, events = outcome.state, outcome.events
    version = entity.version + 1
    if isinstance(new_state, End):
        # Version 0 and no state: what an entity never seen reads as, so
        # the record goes once its outbox is dispatched (Entity.empty) and
        # the next command starts a new entity; the outbox stays until then.
        return finish(
            "COMPLETED",
            reply(command, True, "ok", new_state.data, version=version, ended=True),
            None,
            new=Entity(0, None, entity.outbox),
            events=_events(command, events, version),
            ended=True,
        )
    new = Entity(version, new_state, entity.outbox)
    return finish(
        "COMPLETED",
        reply(command, True, "ok", new_state, version=version),
        None,
        new=new,
        events=_events(command, events, version),
    )


def recovered_receipt(
    entity_id: str,
    command_id: str,
    messages: tuple[Outgoing, ...],
    now: float,
    known: Receipt | None = None,
    command: Command | None = None,
) -> Receipt:
    """The receipt of a command whose outbox entry ``messages`` (in entity
    ``entity_id``) survived a crash that cut the receipt write after it;
    ``known``: the receipt the crash left (none, or the PROCESSING one of
    the attempt before), ``command``: a copy of the command, if at hand.

    The entity record (version, state and outbox in one write) is written
    before the receipt, so a crash can keep the first without the second.
    The outbox entry is then the only record that the command was decided,
    and it must not leave the entity before a receipt is written (else a
    copy, finding neither, would be applied again). The messages say
    what a copy needs: the status (a dead letter: FAILED; else the reply's
    ``success``, a failure naming no entity version being an expiry; else
    events only: COMPLETED), the reply sent (sent again on request), the
    correlationId (an entry holding nothing, a quiet command's, tells none:
    the shell passes ``known`` or ``command`` then). The command type, receive time and attempts come from
    ``command`` and ``known`` (else from the dead letter's command; a type
    found nowhere is ``""``).
    """
    reply = letter = None
    for m in messages:
        if m.topic == DEAD_LETTER:
            letter = m
        elif m.message_id.endswith(":reply"):  # (the entry holds this command's only)
            reply = m
    first = _document(messages[0].value) if messages else {}
    status: Status = "COMPLETED"
    error = None
    attempts = known.attempts if known is not None else 0
    if letter is not None:
        headers = dict(letter.headers)
        status, error = "FAILED", headers.get(DETAIL, b"").decode("utf-8", "replace")
        count = headers.get("seqkeeper.attempts", b"")
        attempts = int(count) if count.isdigit() else attempts
        first = _document(letter.value)  # the command itself
    elif reply is not None and (body := _document(reply.value)).get("success") is False:
        status = "FAILED" if "version" in body else "EXPIRED"
        error = str(body.get("message"))
    else:
        attempts += 1  # (the handler ran)
    if command is not None:
        command_type, correlation_id = command.command_type, command.correlation_id
    elif known is not None:
        command_type, correlation_id = known.command_type, known.correlation_id
    else:
        command_type = str(first.get("commandType", ""))
        correlation_id = str(first.get("correlationId", ""))
    received = known.received_at if known is not None else now
    return Receipt(
        command_id,
        status,
        entity_id,
        command_type,
        correlation_id,
        received,
        now,
        attempts,
        error,
        reply,
    )


def _document(raw: bytes) -> dict[str, Any]:
    """A message's JSON object (``{}`` if it is none)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def mark_dispatched(
    entity: Entity, receipt: Receipt | None, command_id: str, now: float
) -> tuple[Entity, Receipt | None]:
    """The command's messages are durable downstream: drop them from the
    outbox (keeping the reply in the receipt, to send again on request).
    ``receipt`` must be the command's finished receipt, written before the
    entity without the entry: when a crash left none, or a PROCESSING one,
    write :func:`recovered_receipt` first (the shell's confirm does)."""
    outbox = tuple((cid, msgs) for cid, msgs in entity.outbox if cid != command_id)
    done = receipt
    if receipt is not None and not receipt.dispatched:
        done = replace(receipt, dispatched=True, updated_at=now, value=None, origin=None, trace=())
    return replace(entity, outbox=outbox), done


def expired_receipt(receipt: Receipt, now: float, keep: float) -> bool:
    """Whether a dispatched, finished receipt is past its retention."""
    return (
        receipt.dispatched
        and receipt.status in ("COMPLETED", "FAILED", "EXPIRED")
        and receipt.updated_at + keep < now
    )
