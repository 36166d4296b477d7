"""A receipt recovered from an outbox entry (processors/command.py,
``recovered_receipt``) says what the receipt the crash cut would have said:
status, error, reply and correlationId always (an entry holding nothing, a
quiet command's, with the command or the receipt before); the command type,
receive time and attempts as far as the command, the receipt before, or the
messages tell."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.command import (
    Command,
    DomainError,
    Entity,
    Event,
    Receipt,
    Registry,
    RetryPolicy,
    decide,
    recovered_receipt,
)
from tests.processors.test_command import command

registry = Registry()


@registry.register("Add")
def add(state: Any, cmd: Command) -> tuple[Any, list[Event]]:
    return (state or 0) + 1, [Event("Added", n) for n in range(cmd.payload["events"])]


@registry.register("Refuse")
def refuse(state: Any, cmd: Command) -> tuple[Any, list[Event]]:
    raise DomainError("refused", {"why": "a rule"})


@registry.register("Flaky")
def flaky(state: Any, cmd: Command) -> tuple[Any, list[Event]]:
    raise ConnectionError("away")


KINDS = {
    "Add": {},
    "Refuse": {},
    "Flaky": {},  # its last attempt: FAILED and dead-lettered
    "Teleport": {},  # no handler: dead-lettered
    "Late": {"expiresAt": 1_000},
    "Conflict": {"expectedVersion": 7},
}


@given(
    st.sampled_from(sorted(KINDS)),
    st.booleans(),
    st.integers(0, 2),
    st.integers(0, 3),
    st.sampled_from(["known", "command", "neither"]),
)
def test_a_recovered_receipt_says_what_the_lost_one_said(
    kind: str, reply: bool, events: int, tried: int, given_: str
) -> None:
    extra: dict[str, Any] = dict(KINDS[kind])
    if not reply:
        extra["replyTo"] = None
    ctype = "Add" if kind in ("Late", "Conflict") else kind
    cmd = command("m1", ctype, "sku", {"events": events}, **extra)
    before = None
    if tried and kind != "Teleport":  # earlier attempts failed transiently
        before = Receipt(
            "m1", "PROCESSING", cmd.entity, ctype, cmd.correlation_id, 5.0, 6.0, tried, "x"
        )
    retry = RetryPolicy(attempts=tried + 1)
    d = decide(registry, Entity(), before, cmd, 10.0, retry, retrying=before is not None)
    assert d.receipt is not None
    if d.entity is None or d.entity.pending("m1") is None:
        assert not d.dispatch  # nothing to dispatch: no outbox entry, the receipt alone
        return
    lost = d.receipt
    messages = d.entity.pending("m1")
    assert messages is not None
    if not messages and not (given_ == "command" or (given_ == "known" and before is not None)):
        # a quiet command's entry alone tells no correlationId: the shell
        # waits for the command's copy (CommandTopology.confirm)
        return
    found = recovered_receipt(
        cmd.entity,
        "m1",
        messages,
        20.0,
        before if given_ == "known" else None,
        cmd if given_ == "command" else None,
    )
    assert (found.status, found.error, found.reply) == (lost.status, lost.error, lost.reply)
    assert (found.message_id, found.entity, found.correlation_id) == ("m1", cmd.entity, "corr-m1")
    assert (found.dispatched, found.updated_at) == (False, 20.0)
    known = given_ == "known" and before is not None
    told = known or given_ == "command" or d.dead_letter is not None
    assert found.command_type == (ctype if told else "")
    if known:
        assert found.received_at == lost.received_at
    ran = lost.status == "COMPLETED" or d.dead_letter is not None  # (the messages tell the count)
    if (known or before is None) and ran:  # and the attempts before are known
        assert found.attempts == lost.attempts
