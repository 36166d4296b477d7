"""A trace through a real worker (``SEQKEEPER_TRACING=otel``) on a real broker:
producer -> seqkeeper -> consumer, with the right parents.

The test is the producer and the consumer (the SDK, an in-memory exporter);
the worker is a child process exporting its spans with the standard OTLP
exporter (``OTEL_TRACES_EXPORTER=otlp`` over http/protobuf) to a receiver
the test runs, so what is checked is what a collector would get.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from seqkeeper.broker import free_port
from seqkeeper.topics import Record, create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

pytestmark = pytest.mark.integration

PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(frozen=True)
class Received:
    """A span as the worker exported it (ids in hex)."""

    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


class Collector(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP receiver: the spans posted to ``/v1/traces``."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", free_port()), _Receive)

    def received(self) -> list[Received]:
        with self.lock:
            return list(self.spans)


class _Receive(http.server.BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        got = []
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for s in scope.spans:
                    attributes = {a.key: _value(a.value) for a in s.attributes}
                    got.append(
                        Received(
                            s.name,
                            s.kind,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            attributes,
                        )
                    )
        with self.server.lock:
            self.server.spans += got
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _value(v: Any) -> Any:
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # the worker's environment (WorkerProcess passes the test's on)
    host, port = server.server_address[:2]
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{host}:{port}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "seqkeeper-under-test")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def ours() -> tuple[Any, InMemorySpanExporter]:
    """The test's own tracer (producer and consumer), not the global one."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("the-test"), exporter


async def produce_traced(
    tracer: Any, bootstrap: str, topic: str, records: list[tuple[bytes, bytes, list[Any]]]
) -> list[Any]:
    """Each record sent inside a producer span whose context it carries;
    the spans, in order."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    spans = []
    try:
        for key, value, headers in records:
            with tracer.start_as_current_span(f"send {topic}", kind=SpanKind.PRODUCER) as span:
                carrier: dict[str, str] = {}
                PROPAGATOR.inject(carrier)
                traced = [*headers, *((k, v.encode()) for k, v in carrier.items())]
                await producer.send_and_wait(topic, value, key=key, partition=0, headers=traced)
            spans.append(span)
        await producer.flush()
    finally:
        await producer.stop()
    return spans


def consume_traced(tracer: Any, records: list[Record]) -> list[Any]:
    """A consumer's span per record, continuing the record's trace."""
    spans = []
    for r in records:
        carrier = {k: v.decode() for k, v in r.headers if k in ("traceparent", "tracestate")}
        context = PROPAGATOR.extract(carrier)
        with tracer.start_as_current_span(
            f"process {r.topic}", context=context, kind=SpanKind.CONSUMER
        ) as span:
            spans.append(span)
    return spans


def wait_for(what: Any, worker: WorkerProcess, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        worker.check_alive()
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.3)


def hexes(span: Any) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def named(record: Record) -> tuple[str, str]:
    """The trace and span ids a record's ``traceparent`` names."""
    _, trace_id, span_id, _ = (record.header("traceparent") or b"").decode().split("-")
    return trace_id, span_id


def check_the_cycles(spans: list[Received], broker: Broker) -> None:
    """The outbox cycles that carried the outputs are spans, with the steps
    of the broker's guarantee (auto: exactly_once where it has transactions)."""
    commits = [s for s in spans if s.name == "commit"]
    assert commits, [s.name for s in spans]
    steps = {s.name for s in spans if s.parent_id in {c.span_id for c in commits}}
    guarantees = {c.attributes["seqkeeper.guarantee"] for c in commits}
    if broker.is_tansu:
        assert guarantees == {"at_least_once"} and steps == {"flush", "produce", "confirm"}
    else:
        assert guarantees == {"exactly_once"} and steps == {"transaction"}


def test_a_trace_goes_from_the_producer_through_the_ordered_worker_to_a_consumer(
    make_settings: Any, broker: Broker, collector: Collector, ours: Any, tmp_path: Path
) -> None:
    tracer, exported = ours
    settings = make_settings(partitions=1, tracing="otel")
    bootstrap = settings.broker.bootstrap
    topic = settings.ordered.input_topic
    asyncio.run(create_topics(bootstrap, settings.topics(), 1))
    n = 5
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        inputs = [
            (b"acct-1", orjson.dumps({"messageId": f"m{s}", "seq": s, "type": "Posted"}), [])
            for s in range(1, n + 1)
        ]
        sent = asyncio.run(produce_traced(tracer, bootstrap, topic, inputs))
        ordered_topic = settings.ordered.ordered_topic

        def outputs() -> list[Record]:
            got = asyncio.run(read_topic(bootstrap, ordered_topic))
            return got if len(got) >= n else []

        ordered = wait_for(outputs, worker)

        def processed() -> list[Received]:
            got = [s for s in collector.received() if s.name == f"process {topic}"]
            names = {s.name for s in collector.received()}
            return got if len(got) >= n and {"commit", "restore"} <= names else []

        processing = wait_for(processed, worker)
    finally:
        assert worker.stop() == 0
    received = collector.received()
    assert len(ordered) == n and len(processing) == n
    by_parent = {s.parent_id: s for s in processing}
    consumed = consume_traced(tracer, ordered)
    for producer_span, record, consumer_span in zip(sent, ordered, consumed, strict=True):
        trace_id, producer_id = hexes(producer_span)
        # seqkeeper's span continues the producer's
        ours_ = by_parent[producer_id]
        assert ours_.trace_id == trace_id
        assert ours_.kind == 5  # (the protobuf's SPAN_KIND_CONSUMER)
        assert ours_.attributes["messaging.system"] == "kafka"
        assert ours_.attributes["messaging.destination.name"] == topic
        assert ours_.attributes["messaging.kafka.message.key"] == "acct-1"
        assert ours_.attributes["messaging.consumer.group.name"] == settings.group_id
        # the output names seqkeeper's span, and the consumer continues it
        assert named(record) == (trace_id, ours_.span_id)
        consumer_context = consumer_span.get_span_context()
        assert f"{consumer_context.trace_id:032x}" == trace_id
        assert f"{consumer_span.parent.span_id:016x}" == ours_.span_id
    check_the_cycles(received, broker)
    # the state's restore at the assignment (the changelog's one partition)
    restores = [s for s in received if s.name == "restore"]
    assert any(s.attributes.get("seqkeeper.restore.partitions") == 1 for s in restores), restores
    assert len(exported.get_finished_spans()) == 2 * n  # (the test's own: sent, consumed)


def test_a_command_s_handler_call_is_a_span_in_the_command_s_trace(
    make_settings: Any, collector: Collector, ours: Any, tmp_path: Path
) -> None:
    tracer, _ = ours
    settings = make_settings(partitions=1, topology="commands", tracing="otel")
    bootstrap = settings.broker.bootstrap
    commands = settings.commands
    asyncio.run(create_topics(bootstrap, settings.topics(), 1))
    reply_topic = f"{commands.command_topic}.replies"
    asyncio.run(create_topics(bootstrap, [reply_topic], 1))
    command = {
        "messageId": "m-1",
        "commandType": "AddStock",
        "schemaVersion": 1,
        "correlationId": "corr-1",
        "partitionKey": "sku-1",
        "tenantId": "t1",
        "replyTo": reply_topic,
        "payload": {"quantity": 5},
    }
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        [sent] = asyncio.run(
            produce_traced(
                tracer,
                bootstrap,
                commands.command_topic,
                [(b"sku-1", orjson.dumps(command), [("tenant", b"t1")])],
            )
        )
        replies = wait_for(lambda: asyncio.run(read_topic(bootstrap, reply_topic)), worker)

        def handled() -> list[Received]:
            return [s for s in collector.received() if s.name == "handle AddStock"]

        [handle] = wait_for(handled, worker)
    finally:
        assert worker.stop() == 0
    trace_id, producer_id = hexes(sent)
    [processing] = [s for s in collector.received() if s.parent_id == producer_id]
    assert processing.name == f"process {commands.command_topic}"
    assert (handle.trace_id, handle.parent_id) == (trace_id, processing.span_id)
    assert handle.attributes == {
        "seqkeeper.command.type": "AddStock",
        "seqkeeper.command.schema_version": 1,
        "messaging.message.id": "m-1",
        "messaging.message.conversation_id": "corr-1",
        "seqkeeper.command.tenant": "t1",
    }
    [reply] = replies
    assert named(reply) == (trace_id, processing.span_id)
