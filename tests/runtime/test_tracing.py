"""Tracing (seqkeeper.runtime.tracing) with the SDK's in-memory exporter: the
spans the runtime makes around the topologies, their parents, and the
``traceparent`` the outputs carry; and nothing of it while tracing is off."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from seqkeeper.processors.command import Command, Event, Registry
from seqkeeper.runtime.tracing import Tracing, _span_processors
from seqkeeper.settings import SettingError, Settings
from seqkeeper.state.command_records import CommandStore
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.stores import Stores
from seqkeeper.topologies.command_worker import CommandTopology
from seqkeeper.topologies.ordered import OrderedTopology
from tests.runtime import test_task, test_task_exactly_once
from tests.topologies.test_commands import cmd

#: Two producers' traces, each with the id of the span that sent the record.
TRACE_A, SPAN_A = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACE_B, SPAN_B = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def traceparent(trace_id: str, span_id: str) -> bytes:
    return f"00-{trace_id}-{span_id}-01".encode()


def named(span: Any) -> bytes:
    """The ``traceparent`` that names ``span`` (sampled)."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}".encode()


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> Tracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider, group="app", topic_of=lambda role: f"events.{role}")


def record(offset: int, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> Any:
    return SimpleNamespace(offset=offset, key=key, value=value, headers=headers, timestamp=1000)


def process(tracing: Tracing, topology: Any, records: list[Any], topic: str = "events.in") -> None:
    partition = SimpleNamespace(partition=0)
    asyncio.run(
        tracing.process(topic, [(partition, records)], 1.0, topology.on_records, lambda: True)
    )


def by_name(spans: Any, name: str) -> list[ReadableSpan]:
    found = [s for s in spans if s.name == name]
    assert found, (name, [s.name for s in spans])
    return found


def test_a_record_s_span_continues_its_trace_and_its_outputs_name_it(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    topology = OrderedTopology(Settings.of(bootstrap="unused"), Stores(MemoryStore()))
    topology.on_assigned({0})
    topology.stamp = tracing.stamp

    def event(seq: int) -> bytes:
        return orjson.dumps({"messageId": f"m{seq}", "seq": seq, "type": "t"})

    process(
        tracing,
        topology,
        [
            # seq 2 first: buffered, released by seq 1 from another trace
            record(0, b"k", event(2), [("traceparent", traceparent(TRACE_A, SPAN_A)), ("x", b"2")]),
            record(1, b"k", event(1), [("x", b"1"), ("traceparent", traceparent(TRACE_B, SPAN_B))]),
            record(2, b"k", event(3), [("x", b"3")]),  # no trace: a root
        ],
    )
    spans = exporter.get_finished_spans()
    first, second, third = by_name(spans, "process events.in")
    assert [s.kind for s in (first, second, third)] == [SpanKind.CONSUMER] * 3
    assert f"{first.context.trace_id:032x}" == TRACE_A
    assert first.parent is not None and f"{first.parent.span_id:016x}" == SPAN_A
    assert f"{second.context.trace_id:032x}" == TRACE_B
    assert second.parent is not None and f"{second.parent.span_id:016x}" == SPAN_B
    assert third.parent is None and third.context.trace_id not in (
        int(TRACE_A, 16),
        int(TRACE_B, 16),
    )
    assert dict(first.attributes or {}) == {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.operation": "process",
        "messaging.destination.name": "events.in",
        "messaging.destination.partition.id": "0",
        "messaging.kafka.offset": 0,
        "messaging.consumer.group.name": "app",
        "messaging.kafka.message.key": "k",
    }
    # seq 2, released while seq 1 was processed, goes on in its own trace
    # (A) through a send span linked to the span that released it
    [send] = by_name(spans, "send events.ordered")
    assert send.kind is SpanKind.PRODUCER
    assert f"{send.context.trace_id:032x}" == TRACE_A
    assert send.parent is not None and f"{send.parent.span_id:016x}" == SPAN_A
    assert [link.context.span_id for link in send.links] == [second.context.span_id]

    outputs = [
        (topic, orjson.loads(value or b"")["seq"], list(headers or []))
        for topic, _, value, headers in topology.take().records
    ]
    assert outputs == [
        ("deduped", 2, [("traceparent", named(first)), ("x", b"2")]),
        ("deduped", 1, [("x", b"1"), ("traceparent", named(second))]),
        ("ordered", 1, [("x", b"1"), ("traceparent", named(second))]),
        ("ordered", 2, [("traceparent", named(send)), ("x", b"2")]),
        ("deduped", 3, [("x", b"3"), ("traceparent", named(third))]),
        ("ordered", 3, [("x", b"3"), ("traceparent", named(third))]),
    ]


def test_an_output_outside_any_span_goes_on_in_its_own_trace(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    """A gap timeout (a timer tick, no record's span) releases a message:
    it carries a send span of its producer's trace; one with no trace is
    left as it is."""
    given = [("traceparent", traceparent(TRACE_A, SPAN_A)), ("tracestate", b"congo=t61")]
    assert tracing.stamp("ordered", [("x", b"1")]) == [("x", b"1")]
    assert tracing.stamp("ordered", None) is None
    stamped = tracing.stamp("ordered", given)
    [send] = exporter.get_finished_spans()
    assert send.parent is not None and f"{send.parent.span_id:016x}" == SPAN_A
    assert send.links == ()  # (nothing made it inside a span)
    assert stamped == [("traceparent", named(send)), ("tracestate", b"congo=t61")]


@pytest.mark.parametrize("is_async", [False, True])
def test_a_processor_s_outputs_name_the_span_of_their_input(
    tracing: Tracing, exporter: InMemorySpanExporter, is_async: bool
) -> None:
    def count(state: Any, message: Any) -> tuple[Any, list[Any]]:
        n = (state or 0) + 1
        return n, [{"n": n}]

    async def count_async(state: Any, message: Any) -> tuple[Any, list[Any]]:
        await asyncio.sleep(0)
        return count(state, message)

    settings = Settings.of(bootstrap="unused", processor="x:fn")
    topology = OrderedTopology(settings, Stores(MemoryStore()), count_async if is_async else count)
    topology.on_assigned({0})
    topology.stamp = tracing.stamp

    def event(key: str) -> bytes:
        return orjson.dumps({"messageId": f"{key}-1", "seq": 1, "type": "t"})

    a, b = traceparent(TRACE_A, SPAN_A), traceparent(TRACE_B, SPAN_B)
    process(
        tracing,
        topology,
        [
            record(0, b"a", event("a"), [("traceparent", a)]),
            record(1, b"b", event("b"), [("traceparent", b)]),
        ],
    )
    first, second = by_name(exporter.get_finished_spans(), "process events.in")
    processed = {
        key: dict(headers or [])["traceparent"]
        for topic, key, _, headers in topology.take().records
        if topic == "processed"
    }
    assert processed == {b"a": named(first), b"b": named(second)}


header_values = st.one_of(
    st.none(),
    st.binary(max_size=60),
    st.sampled_from([traceparent(TRACE_A, SPAN_A), traceparent(TRACE_B, SPAN_B)]),
)


@settings(max_examples=200, deadline=None)
@given(
    headers=st.lists(
        st.tuples(st.sampled_from(["traceparent", "tracestate", "x", "y"]), header_values),
        max_size=6,
    ),
    inside=st.booleans(),
)
def test_stamping_keeps_every_other_header_and_leaves_one_trace(
    headers: list[tuple[str, bytes | None]], inside: bool
) -> None:
    """Whatever a record's headers hold (null, garbage, several traces),
    an output's other headers stay as they were, in order, and it carries
    exactly one valid ``traceparent``: the current span's when its trace is
    the record's, else a span continuing its own; untouched outside any
    span when it has no trace."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider)
    given_trace = [v for k, v in headers if k == "traceparent" and v is not None]
    current: list[Any] = []
    if inside:
        with tracing.processing("in", 0, record(0, b"k", b"{}", headers)) as span:
            current.append(span)
            stamped = tracing.stamp("ordered", headers)
    else:
        stamped = tracing.stamp("ordered", headers)
    others = [(k, v) for k, v in headers if k not in ("traceparent", "tracestate")]
    assert [(k, v) for k, v in stamped or () if k not in ("traceparent", "tracestate")] == others
    if not inside and not given_trace:
        assert stamped == headers
        return
    ours = [v for k, v in stamped or () if k == "traceparent"]
    assert len(ours) == 1 and ours[0] is not None
    sends = [s for s in exporter.get_finished_spans() if s.name == "send ordered"]
    # the record's own trace: the current span; none outside a span: a send span
    expected = named(current[0]) if inside else named(sends[0])
    assert ours[0] == expected


def test_the_command_handler_s_span_has_the_command_s_type_and_ids(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    ran: list[str] = []
    registry = Registry()

    @registry.register("Reserve")
    def reserve(state: Any, command: Command) -> tuple[Any, list[Event]]:
        ran.append("sync")
        return {"n": 1}, [Event("Reserved", {})]

    @registry.register("Release")
    async def release(state: Any, command: Command) -> tuple[Any, list[Event]]:
        ran.append("async")
        await asyncio.sleep(0)
        return None, [Event("Released", {})]

    settings = Settings.of(bootstrap="unused", topology="commands")
    for threads in (False, True):  # inline, as a test driver; in threads, as the worker
        exporter.clear()
        topology = CommandTopology(
            settings, CommandStore(MemoryStore()), tracing.handlers(registry), threads=threads
        )
        topology.on_assigned({0})
        topology.stamp = tracing.stamp
        trace = [("traceparent", traceparent(TRACE_A, SPAN_A))]
        (k1, v1), (k2, v2) = cmd("m1", "Reserve", {}), cmd("m2", "Release", {})
        process(
            tracing,
            topology,
            [record(0, k1, v1, [("tenant", b"t1"), *trace]), record(1, k2, v2, trace)],
            topic="commands.in",
        )
        spans = exporter.get_finished_spans()
        first, second = by_name(spans, "process commands.in")
        [reserved] = by_name(spans, "handle Reserve")
        [released] = by_name(spans, "handle Release")
        for handled, parent in ((reserved, first), (released, second)):
            assert handled.parent is not None and handled.parent.span_id == parent.context.span_id
            assert handled.context.trace_id == int(TRACE_A, 16)
        assert dict(reserved.attributes or {}) == {
            "seqkeeper.command.type": "Reserve",
            "seqkeeper.command.schema_version": 1,
            "messaging.message.id": "m1",
            "messaging.message.conversation_id": "c-m1",
            "seqkeeper.command.tenant": "t1",
        }
        out = {
            orjson.loads(value or b"")["messageId"]: dict(headers or [])["traceparent"]
            for _, _, value, headers in topology.take().records
        }
        assert out == {
            "2:t1/m1:1": named(first),
            "2:t1/m1:reply": named(first),
            "2:t1/m2:1": named(second),
            "2:t1/m2:reply": named(second),
        }
    assert ran == ["sync", "async"] * 2


def test_a_failing_handler_s_span_says_so(tracing: Tracing, exporter: InMemorySpanExporter) -> None:
    registry = Registry()

    @registry.register("Reserve")
    def reserve(state: Any, command: Command) -> tuple[Any, list[Event]]:
        raise ConnectionError("flaky")

    topology = CommandTopology(
        Settings.of(bootstrap="unused", topology="commands"),
        CommandStore(MemoryStore()),
        tracing.handlers(registry),
    )
    topology.on_assigned({0})
    key, value = cmd("m1", "Reserve", {})
    process(tracing, topology, [record(0, key, value, [])], topic="commands.in")
    [handled] = by_name(exporter.get_finished_spans(), "handle Reserve")
    assert handled.status.is_ok is False
    assert [e.name for e in handled.events] == ["exception"]


def test_an_outbox_cycle_is_a_commit_span_with_its_steps(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    async def at_least_once() -> None:
        task, topology, broker = test_task.setup()
        task.tracing = tracing
        broker.auto = True
        await task.cycle()  # nothing to commit: no span
        test_task.emit(topology, 3)
        await task.cycle()

    asyncio.run(at_least_once())
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["flush", "produce", "confirm", "commit"]
    commit = spans[-1]
    assert commit.parent is None
    assert dict(commit.attributes or {}) == {
        "seqkeeper.guarantee": "at_least_once",
        "messaging.batch.message_count": 3,
    }
    assert all(
        s.parent is not None and s.parent.span_id == commit.context.span_id for s in spans[:-1]
    )

    exporter.clear()

    async def exactly_once() -> None:
        task, topology, _, transactions = test_task_exactly_once.make()
        task.tracing = tracing
        transactions.auto = True
        topology.step(0, 1)
        topology.step(1, 2)
        await task.cycle()

    asyncio.run(exactly_once())
    spans = exporter.get_finished_spans()
    *transactions, commit = spans
    assert commit.name == "commit" and commit.attributes is not None
    assert commit.attributes["seqkeeper.guarantee"] == "exactly_once"
    assert sorted(
        (s.name, (s.attributes or {})["seqkeeper.input.partition"]) for s in transactions
    ) == [("transaction", 0), ("transaction", 1)]


def test_a_failed_cycle_s_span_says_so(tracing: Tracing, exporter: InMemorySpanExporter) -> None:
    async def main() -> None:
        task, topology, broker = test_task.setup(producer=test_task.RefusingProducer)
        task.tracing = tracing
        broker.auto = True
        test_task.emit(topology, 1)
        with pytest.raises(RuntimeError):
            await task.cycle()

    asyncio.run(main())
    commit = by_name(exporter.get_finished_spans(), "commit")[0]
    assert commit.status.is_ok is False
    assert "refused" in (commit.status.description or "")


def test_a_restore_is_a_span_with_what_it_replayed(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    restores = tracing.restores()
    restores.begin(0.0)
    restores.begin(1.0)  # a rebalance cut the first short
    restores.observe(1.5, {("changelog", 0): (10, 50), ("changelog", 1): (0, 0)})
    restores.end(2.0, {("changelog", 0): (50, 50), ("changelog", 1): (0, 0)})
    cut, done = exporter.get_finished_spans()
    assert (cut.name, dict(cut.attributes or {})) == (
        "restore",
        {"seqkeeper.restore.interrupted": True},
    )
    assert (done.name, dict(done.attributes or {})) == (
        "restore",
        {"seqkeeper.restore.partitions": 2, "seqkeeper.restore.records": 40},
    )


def test_the_exporters_are_the_standard_environment_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,none")
    [console] = _span_processors()
    assert type(console.span_exporter).__name__ == "ConsoleSpanExporter"
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    [otlp] = _span_processors()
    exporter = otlp.span_exporter
    assert type(exporter).__module__ == "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    otlp.shutdown()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "jaeger")
    with pytest.raises(SettingError, match="OTEL_TRACES_EXPORTER=jaeger: no span exporter"):
        _span_processors()


#: What a worker process imports before it runs (seqkeeper.worker.run_worker's).
IMPORTS_OFF = """
import sys
from seqkeeper.runtime import tracing
from seqkeeper.runtime.wiring import build_app
from seqkeeper.settings import Settings
import seqkeeper.worker, seqkeeper.topologies.command_worker, seqkeeper.topologies.ordered
assert tracing.start(Settings.of(bootstrap="unused")) is None
assert tracing.start(Settings.of(bootstrap="unused", tracing="otel")) is None  # OTEL_SDK_DISABLED
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def test_tracing_off_imports_no_opentelemetry() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_OFF],
        capture_output=True,
        text=True,
        env={"OTEL_SDK_DISABLED": "true", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


#: ``seqkeeper worker``, with the SDK hidden as if the extra were not installed
#: (``{hide}``: the line that hides it, or nothing).
WORKER = """
import sys
{hide}
from seqkeeper.cli import main
sys.argv = ["seqkeeper", "worker", "-b", "127.0.0.1:9"]
main()
"""


@pytest.mark.parametrize(
    ("hide", "exporter", "line"),
    [
        (
            True,
            "otlp",
            "error: SEQKEEPER_TRACING=otel needs the OpenTelemetry SDK: "
            "pip install 'seqkeeper[otel]'",
        ),
        (
            False,
            "jaeger",
            "error: OTEL_TRACES_EXPORTER=jaeger: no span exporter 'jaeger' is "
            "installed (installed: console, otlp, otlp_proto_grpc, otlp_proto_http, or none)",
        ),
    ],
)
def test_a_worker_that_cannot_trace_says_why_in_one_line(
    hide: bool, exporter: str, line: str, tmp_path: Path
) -> None:
    """Before any broker is asked (the address is a closed port)."""
    program = WORKER.format(hide='sys.modules["opentelemetry"] = None' if hide else "")
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "SEQKEEPER_TRACING": "otel",
            "OTEL_TRACES_EXPORTER": exporter,
        },
        timeout=120,
    )
    assert (done.returncode, done.stderr.strip()) == (2, line)
