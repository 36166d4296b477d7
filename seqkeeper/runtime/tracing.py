"""Tracing with OpenTelemetry: off unless ``SEQKEEPER_TRACING=otel``.

Off (the default) nothing here runs and ``opentelemetry`` is never
imported: the agent checks once per fetch whether there is a
:class:`Tracing`, an output once whether its headers are to be stamped
(:attr:`~seqkeeper.runtime.protocol.OutboxOwner.stamp`), a commit cycle
gets the no-op :data:`NO_CYCLE`.

On (the ``otel`` extra), the standard ``OTEL_*`` environment configures the
SDK (:func:`start`), and the worker makes these spans (the pure cores in
``processors/`` know nothing of them; the runtime makes them around them):

- ``process <topic>`` (CONSUMER) per input record, whose parent is the W3C
  context of the record's ``traceparent``/``tracestate`` headers (the
  TraceContext propagator), with the messaging attributes (system, topic,
  partition, offset, key, consumer group);
- every output made while it is current carries it as its ``traceparent``
  (and ``tracestate``), in place of the producer's copied onward. An output
  whose copied trace is another record's (a buffered message released by a
  later record or by a gap timeout, an output emitted again after a
  restart, a command's retry) gets a ``send <topic>`` span (PRODUCER) of its
  own trace instead, linked to the span current when it was made: each
  trace goes on through seqkeeper whatever record released it;
- ``handle <commandType>`` around a command handler's call, with the
  command's type, version and ids;
- ``commit`` per outbox cycle that had work, with the steps of the
  guarantee as children (``flush``, ``produce``, ``confirm`` under
  at_least_once; a ``transaction`` per input partition under exactly_once);
- ``restore`` per recovery of the state, from the rebalance that starts it
  to its end.

Records are handed to the topology one at a time while tracing is on, so
that each one's outputs are made inside its span: a processor's async
calls no longer overlap across keys of a fetch.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from seqkeeper.processors.command import Command, Registry
from seqkeeper.processors.envelope import TRACE_HEADERS
from seqkeeper.settings import SettingError, Settings

#: The value of ``SEQKEEPER_TRACING`` that turns tracing on.
OTEL = "otel"

#: The ``traceparent`` of the input record whose span is current (``None``:
#: it had none, or no record's span is current): an output that copied
#: another one is not this record's.
_incoming: contextvars.ContextVar[bytes | None] = contextvars.ContextVar(
    "seqkeeper_incoming_trace", default=None
)


class _NoCycle:
    """A commit cycle's spans while tracing is off: none."""

    __slots__ = ()

    def step(self, name: str, **attributes: Any) -> AbstractContextManager[Any]:
        return nullcontext()

    def end(self, error: BaseException | None = None) -> None:
        return None


NO_CYCLE = _NoCycle()


def start(settings: Settings) -> Tracing | None:
    """The worker's tracing, or ``None`` when off (``SEQKEEPER_TRACING``
    off, or the SDK disabled by ``OTEL_SDK_DISABLED=true``). The spans go to
    the exporters ``OTEL_TRACES_EXPORTER`` names (default ``otlp``, over the
    protocol ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` names, default
    ``grpc``; ``none``: made, sampled, not exported); a
    :class:`~seqkeeper.settings.SettingError` when the extra is missing or
    an exporter is unknown."""
    if settings.runtime.tracing != OTEL:
        return None
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        raise SettingError(
            "SEQKEEPER_TRACING=otel needs the OpenTelemetry SDK: pip install 'seqkeeper[otel]'"
        ) from None
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        # (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name it otherwise)
        resource = resource.merge(Resource({"service.name": "seqkeeper"}))
    provider = TracerProvider(resource=resource)  # (OTEL_TRACES_SAMPLER: its sampler)
    for processor in _span_processors():
        provider.add_span_processor(processor)
    # global, so that spans a user's handler or processor makes are ours too
    trace.set_tracer_provider(provider)
    return Tracing(provider, group=settings.group_id)


def _span_processors() -> list[Any]:
    """A span processor per exporter ``OTEL_TRACES_EXPORTER`` names."""
    from importlib.metadata import entry_points

    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    given = os.environ.get("OTEL_TRACES_EXPORTER", "otlp")
    processors = []
    for name in (n.strip() for n in given.split(",")):
        if name in ("", "none"):
            continue
        entry = name
        if name == "otlp":
            protocol = os.environ.get(
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ).strip()
            if protocol not in ("grpc", "http/protobuf"):
                raise SettingError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: the OTLP exporter speaks "
                    "grpc or http/protobuf"
                )
            entry = "otlp_proto_http" if protocol == "http/protobuf" else "otlp_proto_grpc"
        found = entry_points(group="opentelemetry_traces_exporter", name=entry)
        if not found:
            known = sorted(e.name for e in entry_points(group="opentelemetry_traces_exporter"))
            raise SettingError(
                f"OTEL_TRACES_EXPORTER={given}: no span exporter {name!r} is installed "
                f"(installed: {', '.join(known) or 'none'}, or none)"
            )
        exporter = next(iter(found)).load()()
        # the console's lines as they happen; the others in batches (OTEL_BSP_*)
        simple = name == "console"
        processors.append(SimpleSpanProcessor(exporter) if simple else BatchSpanProcessor(exporter))
    return processors


class Tracing:
    """The worker's spans (see the module docstring), made by ``provider``'s
    tracer; ``group``: the consumer group, ``topic_of``: an output's topic
    name from the name its topology gives it."""

    def __init__(
        self,
        provider: Any,
        group: str = "",
        topic_of: Callable[[str], str] = lambda name: name,
    ) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self.tracer = provider.get_tracer("seqkeeper")
        self.propagator = TraceContextTextMapPropagator()
        self.group = group
        self.topic_of = topic_of

    # -- input records -----------------------------------------------------------
    def _parent(self, headers: Iterable[tuple[str, bytes | None]]) -> Any:
        """The context the W3C headers among ``headers`` carry (an empty
        one: none, or not valid)."""
        carrier = {
            k: bytes(v).decode("latin-1")
            for k, v in headers
            if k in TRACE_HEADERS and v is not None
        }
        return self.propagator.extract(carrier)

    @contextmanager
    def processing(self, topic: str, partition: int, record: Any) -> Iterator[Any]:
        """The span of one input record's processing, current inside."""
        headers = record.headers or ()
        key = record.key
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.operation": "process",
            "messaging.destination.name": topic,
            "messaging.destination.partition.id": str(partition),
            "messaging.kafka.offset": record.offset,
        }
        if self.group:
            attributes["messaging.consumer.group.name"] = self.group
        if key is not None:
            attributes["messaging.kafka.message.key"] = bytes(key).decode("utf-8", "replace")
        if record.value is None:
            attributes["messaging.kafka.message.tombstone"] = True
        span = self.tracer.start_span(
            f"process {topic}",
            context=self._parent(headers),
            kind=self._trace.SpanKind.CONSUMER,
            attributes=attributes,
        )
        incoming = _incoming.set(_traceparent(headers))
        try:
            with self._trace.use_span(span, end_on_exit=True):
                yield span
        finally:
            _incoming.reset(incoming)

    async def process(
        self,
        topic: str,
        partitions: Iterable[tuple[Any, Sequence[Any]]],
        wall: float,
        on_records: Callable[[int, Iterable[Any], float], Awaitable[None] | None],
        current: Callable[[], bool],
    ) -> None:
        """The agent's step 1 with a span per record: each record handed to
        the topology alone (``on_records``) inside its span, its user code
        awaited there; stops when ``current`` says a rebalance began during
        an await (as the untraced loop does). ``wall`` moves on with the
        time spent, as for the records after an await in one call."""
        began = time.monotonic()
        for tp, records in partitions:
            partition = tp.partition
            for record in records:
                with self.processing(topic, partition, record):
                    waiting = on_records(partition, (record,), wall + (time.monotonic() - began))
                    if waiting is not None:  # a user's async function
                        await waiting
                        if not current():
                            return

    # -- outputs -----------------------------------------------------------------
    def stamp(self, topic: str, headers: Any) -> Any:
        """``headers`` of an output to ``topic`` with the trace it goes on
        in (see the module docstring): the current record's span, or a
        ``send`` span of the output's own trace; unchanged when there is
        neither."""
        trace = self._trace
        own = _traceparent(headers or ())
        current = trace.get_current_span()
        here = current.get_span_context()
        if own is not None and own != _incoming.get():
            # another record's trace: it goes on through a span of its own,
            # linked to whatever made the output now
            span = self.tracer.start_span(
                f"send {self.topic_of(topic)}",
                context=self._parent(headers),
                kind=trace.SpanKind.PRODUCER,
                links=[trace.Link(here)] if here.is_valid else None,
                attributes={
                    "messaging.system": "kafka",
                    "messaging.operation.type": "send",
                    "messaging.operation.name": "send",
                    "messaging.destination.name": self.topic_of(topic),
                },
            )
            span.end()
            context = trace.set_span_in_context(span)
        elif here.is_valid:
            context = trace.set_span_in_context(current)
        else:
            return headers
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, context=context)
        ours = [(k, v.encode("latin-1")) for k, v in carrier.items()]
        # ours where the copied trace was (the other headers as they were)
        stamped: list[tuple[str, bytes | None]] = []
        for k, v in headers or ():
            if k not in TRACE_HEADERS:
                stamped.append((k, v))
            elif ours:
                stamped += ours
                ours = []
        return stamped + ours

    # -- commit cycles ------------------------------------------------------------
    def cycle(self, guarantee: str, records: int) -> Cycle:
        """The spans of one outbox cycle producing ``records`` records."""
        return Cycle(self, guarantee, records)

    # -- restores -----------------------------------------------------------------
    def restores(self) -> RestoreSpans:
        """A restore listener (:func:`seqkeeper.adapter.recovery.watch_restores`)
        making a span per recovery."""
        return RestoreSpans(self)

    # -- command handlers ---------------------------------------------------------
    def handlers(self, registry: Registry) -> Registry:
        """``registry`` with each handler's call in a ``handle`` span (an
        ``async def`` handler stays one)."""
        handlers = {at: self._handler(handler) for at, handler in registry.handlers.items()}
        return dataclasses.replace(registry, handlers=handlers)

    def _handler(self, handler: Any) -> Any:
        spans = self.handling
        call = type(handler).__call__
        if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call):

            @functools.wraps(handler)
            async def traced_async(state: Any, command: Command) -> Any:
                with spans(command):
                    return await handler(state, command)

            return traced_async

        @functools.wraps(handler)
        def traced(state: Any, command: Command) -> Any:
            with spans(command):
                return handler(state, command)

        return traced

    def handling(self, command: Command) -> AbstractContextManager[Any]:
        """The span of a handler's call on ``command``, current inside."""
        attributes: dict[str, Any] = {
            "seqkeeper.command.type": command.command_type,
            "seqkeeper.command.schema_version": command.schema_version,
            "messaging.message.id": command.message_id,
            "messaging.message.conversation_id": command.correlation_id,
            "seqkeeper.command.tenant": command.tenant_id,
        }
        if command.causation_id is not None:
            attributes["seqkeeper.command.causation_id"] = command.causation_id
        span: AbstractContextManager[Any] = self.tracer.start_as_current_span(
            f"handle {command.command_type}", attributes=attributes
        )
        return span


def _traceparent(headers: Iterable[tuple[str, bytes | None]]) -> bytes | None:
    """The last ``traceparent`` among ``headers`` (the one the propagator reads)."""
    found = None
    for k, v in headers:
        if k == "traceparent" and v is not None:
            found = bytes(v)
    return found


class Cycle:
    """One outbox cycle's spans: ``commit``, a root, from the take to the
    end of the guarantee's last step; each step a child."""

    __slots__ = ("tracing", "span")

    def __init__(self, tracing: Tracing, guarantee: str, records: int) -> None:
        from opentelemetry.context import Context

        self.tracing = tracing
        self.span = tracing.tracer.start_span(
            "commit",
            context=Context(),  # (a root: no record's span is its parent)
            attributes={"seqkeeper.guarantee": guarantee, "messaging.batch.message_count": records},
        )

    def step(self, name: str, **attributes: Any) -> AbstractContextManager[Any]:
        trace = self.tracing._trace
        span: AbstractContextManager[Any] = self.tracing.tracer.start_as_current_span(
            name, context=trace.set_span_in_context(self.span), attributes=attributes
        )
        return span

    def end(self, error: BaseException | None = None) -> None:
        if error is not None:
            trace = self.tracing._trace
            self.span.record_exception(error)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)))
        self.span.end()


class RestoreSpans:
    """A span per recovery of the state: ``restore``, from the rebalance
    that starts it to its end, with the changelog partitions and the
    records it replayed."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing
        self.span: Any = None
        self.first: dict[tuple[str, int], int] = {}

    def begin(self, now: float) -> None:
        from opentelemetry.context import Context

        if self.span is not None:  # (a rebalance cut the one before short)
            self.span.set_attribute("seqkeeper.restore.interrupted", True)
            self.span.end()
        self.first = {}
        self.span = self.tracing.tracer.start_span("restore", context=Context())

    def observe(self, now: float, positions: Mapping[tuple[str, int], tuple[int, int]]) -> None:
        for partition, (applied, _end) in positions.items():
            self.first.setdefault(partition, applied)

    def end(self, now: float, positions: Mapping[tuple[str, int], tuple[int, int]]) -> None:
        self.observe(now, positions)
        span, self.span = self.span, None
        if span is None:
            return
        replayed = sum(
            max(0, end - self.first.get(partition, end))
            for partition, (_applied, end) in positions.items()
        )
        span.set_attribute("seqkeeper.restore.partitions", len(positions))
        span.set_attribute("seqkeeper.restore.records", replayed)
        span.end()
