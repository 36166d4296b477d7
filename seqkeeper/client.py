"""Request/reply with the command worker: :class:`CommandClient`.

A request is a command whose ``replyTo`` is the client's reply topic
(default ``<client id>.replies``, created when missing); the reply the worker
sends there is matched by its ``causationId`` (the command's messageId).
Each client reads the whole reply topic without a consumer group, from its
end when it starts, so several clients (processes, instances) may share one
reply topic: each takes the replies to its own requests and skips the rest.
A reply the worker sends again after a crash is byte-identical and is
skipped once its request is answered. Replies are read ``read_committed``
(``isolation``; default ``SEQKEEPER_ISOLATION``): an exactly_once worker's
reply counts once its transaction commits, so a reply whose transaction
was aborted (the worker killed before its commit) is never returned.

``async with CommandClient(bootstrap) as client: await client.request(...)``;
:class:`SyncCommandClient` is the same for code without an event loop.
With a ``signer`` (:class:`seqkeeper.state.tokens.TokenSigner`: a private
key and its kid), each command carries a token for its own tenant and
commandType, bound to its bytes (``SEQKEEPER_COMMAND_AUTH=jwt``,
docs/security.md).

Refusals are one line, as the CLI prints them (``seqkeeper send``), and
come before anything is sent: :meth:`CommandClient.start` checks that the
client may Write the command topic and Read its reply topic (Create on it
when missing), and raises a :class:`~seqkeeper.security.BrokerRefused`:
:class:`~seqkeeper.security.SecurityFailure` for credentials or a
certificate, :class:`~seqkeeper.permissions.PermissionDenied` for an ACL
(naming the user, the resource and the ``kafka-acls.sh`` command that
grants it). A permission taken away later fails the requests waiting, and
those after, the same way (not as a :class:`ReplyTimeout`).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from seqkeeper.security import BrokerRefused, kafka_options, surfaced
from seqkeeper.state.tokens import TokenSigner as TokenSigner  # (public: signs commands)
from seqkeeper.topics import topic_partitions

__all__ = [
    "BrokerRefused",
    "CommandClient",
    "Reply",
    "ReplyTimeout",
    "SyncCommandClient",
    "TokenSigner",
]

T = TypeVar("T")


class ReplyTimeout(TimeoutError):
    """No reply to a request in time; names the command's messageId."""

    def __init__(self, message_id: str, timeout: float, reply_topic: str) -> None:
        super().__init__(
            f"no reply to command {message_id} within {timeout:g} s (on {reply_topic})"
        )
        self.message_id = message_id


@dataclass(frozen=True)
class Reply:
    """The worker's answer to one command."""

    message_id: str  #: the reply's own (``<len(tenant)>:<tenant>/<command messageId>:reply``)
    causation_id: str  #: the command's messageId
    correlation_id: str
    success: bool
    message: str
    data: Any
    version: int | None  #: the entity's version after the command, if applied
    value: bytes  #: the reply as it was on the topic

    @staticmethod
    def parse(value: bytes) -> Reply | None:
        try:
            doc = orjson.loads(value)
            return Reply(
                doc["messageId"],
                doc["causationId"],
                doc["correlationId"],
                bool(doc["success"]),
                doc.get("message", ""),
                doc.get("data"),
                doc.get("version"),
                value,
            )
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None  # not a reply of seqkeeper's: not ours to answer

    def to_json(self) -> Any:
        return orjson.loads(self.value)


class CommandClient:
    """Sends commands to the command worker; :meth:`request` waits for the
    reply. ``tenant``: the ``tenantId`` of commands that name none;
    ``signer``: signs each command's token (none: commands are unsigned);
    ``isolation``: how replies are read (default ``SEQKEEPER_ISOLATION``)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        command_topic: str = "commands.in",
        client_id: str = "seqkeeper-client",
        reply_topic: str | None = None,
        tenant: str = "default",
        reply_partitions: int = 1,
        signer: TokenSigner | None = None,
        isolation: str | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        #: how replies are read (None: the setting SEQKEEPER_ISOLATION)
        self.isolation = isolation
        self.signer = signer
        self.command_topic = command_topic
        self.client_id = client_id
        self.reply_topic = reply_topic or f"{client_id}.replies"
        self.tenant = tenant
        self.reply_partitions = reply_partitions
        self._pending: dict[str, asyncio.Future[Reply]] = {}
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None
        #: why the replies can no longer be read (raised by the requests)
        self._refused: BaseException | None = None

    async def start(self) -> None:
        """Connect, once the checks of the module's docstring passed; on a
        failure nothing is left open."""
        try:
            with surfaced(self.bootstrap):
                await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        from seqkeeper.access import check_topics

        # the command topic may be missing (the worker creates it): not probed then
        await check_topics(
            self._settings(),
            reads=[self.reply_topic],
            writes=[self.command_topic],
            optional={self.command_topic},
            create={self.reply_topic: self.reply_partitions},
        )
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            **kafka_options(),
            client_id=self.client_id,
            acks="all",
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            **kafka_options(),
            client_id=self.client_id,
            enable_auto_commit=False,
            isolation_level=self.isolation or self._settings().broker.isolation,
        )
        await self._producer.start()
        await self._consumer.start()
        partitions = await topic_partitions(self._consumer, self.reply_topic)
        self._consumer.assign(partitions)
        await self._consumer.seek_to_end(*partitions)
        for tp in partitions:  # the position now, before any request is sent
            await self._consumer.position(tp)
        self._reader = asyncio.create_task(self._read_replies())

    def _settings(self) -> Any:
        """The environment's settings on this client's broker: whom a
        refusal names (:func:`seqkeeper.permissions.principal_of`)."""
        from seqkeeper.settings import Settings

        return Settings.of(bootstrap=self.bootstrap)

    def _refusal(self, exc: BaseException) -> BaseException:
        """``exc`` as a one-line :class:`BrokerRefused` when the broker
        refused (:func:`seqkeeper.failures.refusal`), else as it is."""
        from seqkeeper.failures import refusal

        return refusal(exc, self._settings()) or exc

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        for pending in self._pending.values():
            pending.cancel()
        if self._producer is not None:
            await self._producer.stop()
        if self._consumer is not None:
            await self._consumer.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def _read_replies(self) -> None:
        assert self._consumer is not None
        while True:
            try:
                fetched = await self._consumer.getmany(timeout_ms=200)
            except KafkaError as exc:  # (a Read ACL taken away, a password changed)
                refused = self._refusal(exc)
                if not isinstance(refused, BrokerRefused):
                    raise
                self._refused = refused
                for pending in self._pending.values():
                    if not pending.done():
                        pending.set_exception(refused)
                return
            for records in fetched.values():
                for record in records:
                    reply = None if record.value is None else Reply.parse(record.value)
                    if reply is None:
                        continue
                    waiting = self._pending.get(reply.causation_id)
                    if waiting is not None and not waiting.done():
                        waiting.set_result(reply)

    def command(
        self,
        command_type: str,
        key: str,
        payload: Any,
        *,
        tenant: str | None = None,
        message_id: str | None = None,
        correlation_id: str | None = None,
        schema_version: int = 1,
        expected_version: int | None = None,
        reply_to: str | None = None,
    ) -> dict[str, Any]:
        """A command envelope (``messageId`` and ``correlationId`` made up
        when not given)."""
        message_id = message_id or f"{self.client_id}:{uuid.uuid4()}"
        doc: dict[str, Any] = {
            "messageId": message_id,
            "commandType": command_type,
            "schemaVersion": schema_version,
            "correlationId": correlation_id or message_id,
            "partitionKey": key,
            "tenantId": tenant or self.tenant,
            "payload": payload,
        }
        if expected_version is not None:
            doc["expectedVersion"] = expected_version
        if reply_to is not None:
            doc["replyTo"] = reply_to
        return doc

    async def _send(self, doc: dict[str, Any]) -> None:
        if self._producer is None:
            raise RuntimeError("the client is not started (use it in 'async with')")
        if self._refused is not None:  # its reply could not be read
            raise self._refused
        value = orjson.dumps(doc)
        headers = None if self.signer is None else [self.signer.header(doc, time.time(), value)]
        try:
            await self._producer.send_and_wait(
                self.command_topic, value, key=doc["partitionKey"].encode(), headers=headers
            )
        except KafkaError as exc:  # (a Write ACL taken away)
            refused = self._refusal(exc)
            if refused is exc:
                raise
            raise refused from None

    async def send(self, command_type: str, key: str, payload: Any, **options: Any) -> str:
        """Send a command without waiting for a reply (none is asked for);
        its messageId."""
        doc = self.command(command_type, key, payload, **options)
        await self._send(doc)
        return str(doc["messageId"])

    async def request(
        self, command_type: str, key: str, payload: Any, *, timeout: float = 30.0, **options: Any
    ) -> Reply:
        """Send a command and return its reply; :class:`ReplyTimeout` after
        ``timeout`` seconds. The options are :meth:`command`'s."""
        doc = self.command(command_type, key, payload, reply_to=self.reply_topic, **options)
        message_id = doc["messageId"]
        waiting: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[message_id] = waiting
        try:
            await self._send(doc)
            return await asyncio.wait_for(waiting, timeout)
        except TimeoutError:
            raise ReplyTimeout(message_id, timeout, self.reply_topic) from None
        finally:
            self._pending.pop(message_id, None)


class SyncCommandClient:
    """:class:`CommandClient` for code without an event loop: the client
    runs on a loop of its own in a background thread."""

    def __init__(self, bootstrap: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="seqkeeper-client", daemon=True
        )
        self._thread.start()
        self.client = CommandClient(bootstrap, **options)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def start(self) -> None:
        self._call(self.client.start())

    def stop(self) -> None:
        try:
            self._call(self.client.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def request(
        self, command_type: str, key: str, payload: Any, *, timeout: float = 30.0, **options: Any
    ) -> Reply:
        return self._call(
            self.client.request(command_type, key, payload, timeout=timeout, **options)
        )

    def send(self, command_type: str, key: str, payload: Any, **options: Any) -> str:
        return self._call(self.client.send(command_type, key, payload, **options))
