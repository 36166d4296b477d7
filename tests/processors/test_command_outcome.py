"""The handler call split out of the command core: :func:`decide` given the
outcome of a run the shell made (an async handler's) decides exactly as
when it calls the same handler itself, and :func:`handler_to_call` names the
handler exactly when :func:`decide` would call it."""

from __future__ import annotations

import inspect
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.processors.command import (
    Command,
    DomainError,
    Entity,
    Event,
    Outgoing,
    Raised,
    Receipt,
    Registry,
    RetryPolicy,
    Returned,
    decide,
    handler_to_call,
    parse_command,
    returned,
    run,
    timed_out,
)

NOW = 1_000.0

#: What the handler does: return a new state and events, refuse (DomainError),
#: fail transiently, or return something that is no (state, events) pair.
behaviours = st.one_of(
    st.tuples(
        st.just("return"),
        st.one_of(
            st.none(), st.integers(-9, 9), st.dictionaries(st.text(max_size=3), st.integers(-9, 9))
        ),
        st.lists(st.sampled_from(["Done", "Moved"]), max_size=3),
    ),
    st.tuples(st.just("refuse"), st.text(max_size=10), st.one_of(st.none(), st.integers(-9, 9))),
    st.tuples(
        st.just("fail"), st.sampled_from([RuntimeError, ConnectionError, KeyError, TimeoutError])
    ),
    st.tuples(st.just("garbage"), st.sampled_from([None, 3, (1, 2, 3)])),
)


def make_handler(behaviour: tuple[Any, ...], calls: list[Any]) -> Any:
    def handler(state: Any, command: Command) -> tuple[Any, list[Event]]:
        calls.append(state)
        kind = behaviour[0]
        if kind == "return":
            return behaviour[1], [Event(t, {"n": n}) for n, t in enumerate(behaviour[2])]
        if kind == "refuse":
            raise DomainError(behaviour[1], behaviour[2])
        if kind == "fail":
            raise behaviour[1]("down")
        return behaviour[1]  # type: ignore[no-any-return]

    return handler


@st.composite
def situations(draw: st.DrawFn) -> dict[str, Any]:
    """A command, the entity and receipt it meets, and how it is offered."""
    mid = "m1"
    ctype = draw(st.sampled_from(["Known", "Known", "Known", "Unknown"]))
    doc: dict[str, Any] = {
        "messageId": mid,
        "commandType": ctype,
        "schemaVersion": draw(st.sampled_from([1, 1, 1, 2])),
        "correlationId": "c1",
        "partitionKey": "k",
        "tenantId": "t1",
        "replyTo": draw(st.sampled_from(["replies", None])),
        "payload": {},
    }
    version = draw(st.integers(0, 3))
    doc["expiresAt"] = draw(st.sampled_from([None, None, NOW + 1, NOW - 1]))
    doc["expectedVersion"] = draw(st.sampled_from([None, None, version, version + 1]))
    command = parse_command(b"k", orjson.dumps(doc))
    outbox: tuple[tuple[str, tuple[Outgoing, ...]], ...] = ()
    if draw(st.booleans()):
        outbox += (("other", (Outgoing(None, "k", "other:1", b"{}"),)),)
    if draw(st.integers(0, 5)) == 5:  # this command's messages still undispatched
        outbox += ((mid, (Outgoing("replies", "k", f"{mid}:reply", b"{}"),)),)
    entity = Entity(version, draw(st.one_of(st.none(), st.integers())), outbox)
    receipt = None
    if draw(st.integers(0, 2)) == 2:
        receipt = Receipt(
            mid,
            draw(st.sampled_from(["PROCESSING", "COMPLETED", "FAILED", "EXPIRED"])),
            command.entity,
            ctype,
            "c1",
            NOW - 10,
            NOW - 5,
            attempts=draw(st.integers(1, 3)),
            retry_at=NOW - 1,
            value=command.value,
        )
    return {
        "command": command,
        "entity": entity,
        "receipt": receipt,
        "retrying": draw(st.booleans()),
        "attempts": draw(st.integers(1, 4)),
    }


@settings(max_examples=400)
@given(situations(), behaviours)
def test_decide_on_a_given_outcome_equals_decide_calling_the_handler(
    situation: dict[str, Any], behaviour: tuple[Any, ...]
) -> None:
    calls: list[Any] = []
    registry = Registry()
    registry.register("Known")(make_handler(behaviour, calls))
    entity, receipt, command = situation["entity"], situation["receipt"], situation["command"]
    retrying = situation["retrying"]
    policy = RetryPolicy(attempts=situation["attempts"])
    origin = ("commands", 0, 7, 123)

    called = decide(registry, entity, receipt, command, NOW, policy, retrying, origin)
    decide_calls = len(calls)
    assert decide_calls in (0, 1)

    handler = handler_to_call(registry, entity, receipt, command, NOW, retrying)
    assert (handler is not None) == (decide_calls == 1)  # named exactly when decide calls it
    if handler is None:
        # nothing to run: an outcome given anyway is ignored
        ignored = decide(
            registry, entity, receipt, command, NOW, policy, retrying, origin, Raised(KeyError())
        )
        assert ignored == called and len(calls) == 0
        return
    assert handler is registry.handlers[("Known", 1)]
    outcome = run(handler, entity.state, command)  # the shell's run, made before deciding
    assert calls == [entity.state, entity.state]
    given_outcome = decide(
        registry, entity, receipt, command, NOW, policy, retrying, origin, outcome
    )
    assert len(calls) == 2  # decide did not call the handler again
    assert given_outcome == called
    kind = behaviour[0]
    if kind == "return":
        assert isinstance(outcome, Returned) and called.applied
        assert called.entity is not None and called.entity.version == entity.version + 1
    else:
        assert isinstance(outcome, Raised) and not called.applied
        assert called.receipt is not None
        transient = kind != "refuse"
        assert (called.receipt.status == "PROCESSING") == (
            transient and called.receipt.attempts < policy.attempts
        )


def test_a_timeout_is_a_transient_failure_naming_the_limit() -> None:
    registry = Registry()

    @registry.register("Known")
    def never_called(state: Any, command: Command) -> tuple[Any, list[Event]]:
        raise AssertionError("the outcome is given")

    command = parse_command(
        b"k",
        orjson.dumps(
            {
                "messageId": "m1",
                "commandType": "Known",
                "schemaVersion": 1,
                "correlationId": "c1",
                "partitionKey": "k",
                "tenantId": "t1",
                "replyTo": "replies",
                "payload": {},
            }
        ),
    )
    policy = RetryPolicy(attempts=2, base=1.0)
    late = timed_out(2.5)
    assert isinstance(late.error, TimeoutError) and str(late.error) == "handler ran past 2.5 s"
    first = decide(registry, Entity(), None, command, NOW, policy, outcome=late)
    assert first.receipt is not None and first.receipt.status == "PROCESSING"
    assert first.receipt.retry_at == NOW + 1.0
    assert first.receipt.error == "builtins.TimeoutError: handler ran past 2.5 s"
    last = decide(registry, Entity(), first.receipt, command, NOW + 1, policy, True, outcome=late)
    assert last.receipt is not None and last.receipt.status == "FAILED"
    assert last.dead_letter is not None
    reason, detail, cls = last.dead_letter
    assert reason == "handler-failed" and cls == "builtins.TimeoutError"
    assert (
        detail
        == "handler failed 2 times; last error: builtins.TimeoutError: handler ran past 2.5 s"
    )


def test_an_async_handler_called_without_its_outcome_fails_and_is_never_left_unawaited() -> None:
    registry = Registry()
    made: list[Any] = []

    async def handler(state: Any, command: Command) -> tuple[Any, list[Event]]:
        return 1, []

    @registry.register("Known")
    def undeclared(state: Any, command: Command) -> Any:  # an async handler in disguise
        made.append(handler(state, command))
        return made[-1]

    command = parse_command(
        b"k",
        orjson.dumps(
            {
                "messageId": "m1",
                "commandType": "Known",
                "schemaVersion": 1,
                "correlationId": "c1",
                "partitionKey": "k",
                "tenantId": "t1",
                "payload": {},
            }
        ),
    )
    d = decide(registry, Entity(), None, command, NOW, RetryPolicy(attempts=1))
    assert d.receipt is not None and d.receipt.status == "FAILED"
    assert "declare it async def" in (d.receipt.error or "")
    assert [inspect.getcoroutinestate(c) for c in made] == [inspect.CORO_CLOSED]
    assert returned((1, [])) == Returned(1, [])
    with pytest.raises(ValueError):
        returned((1, 2, 3))
