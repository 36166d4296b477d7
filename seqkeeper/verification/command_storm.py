"""A duplicate storm of inventory commands, and its verification against the
command, reply, event and dead-letter topics (demo and tests).

The expectation comes from the command topic alone: in partition order,
the first copy of each messageId is applied once by the same domain
handlers; later copies change nothing. Under at_least_once a copy may
dispatch its command's events and reply again (identical: counted as
re-dispatched); under exactly_once the topics are read read_committed and
a repeated event fails the verification (a reply is sent again to a copy
that asks after its command was answered).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson

from seqkeeper.fleet.poll import poll
from seqkeeper.processors.command import Command, DomainError, parse_command, reply_id, returned
from seqkeeper.processors.envelope import InvalidMessage
from seqkeeper.processors.inventory import registry
from seqkeeper.settings import Guarantee, Settings
from seqkeeper.topics import Record, TopicCache
from seqkeeper.verification.verify import Check, Checked


@dataclass
class Storm:
    distinct: int
    records: list[tuple[bytes | None, bytes | None]]
    poison: int
    #: distinct commands that ask for a reply (the storm's and a poison's):
    #: the distinct replies (under exactly_once a copy read before its
    #: command's transaction shares its reply)
    asking: int = 0


def storm(
    commands: int = 300,
    tenants: int = 2,
    skus: int = 5,
    max_copies: int = 5,
    reply_to: str = "commands.replies",
    seed: int = 1,
) -> Storm:
    """``commands`` distinct inventory commands, each delivered 1..max_copies
    times, shuffled across keys; plus poison records (not JSON, unknown
    type, key mismatch) and a few expired commands."""
    rng = random.Random(seed)
    docs = []
    for n in range(commands):
        sku = f"sku-{rng.randrange(skus)}"
        kind = rng.choices(["AddStock", "ReserveInventory", "ReleaseInventory"], [3, 4, 2])[0]
        doc: dict[str, Any] = {
            "messageId": f"cmd-{seed}-{n}",
            "commandType": kind,
            "schemaVersion": 1,
            "correlationId": f"corr-{n % 50}",
            "partitionKey": sku,
            "tenantId": f"tenant-{rng.randrange(tenants)}",
            "replyTo": reply_to,
            "payload": {"quantity": rng.randint(1, 5), "orderId": f"order-{rng.randrange(20)}"},
        }
        if n % 37 == 0:
            doc["expiresAt"] = "2020-01-01T00:00:00+00:00"
        docs.append(doc)
    records: list[tuple[bytes | None, bytes | None]] = []
    for doc in docs:
        value = orjson.dumps(doc)
        records += [(doc["partitionKey"].encode(), value)] * rng.randint(1, max_copies)
    rng.shuffle(records)
    poison: list[tuple[bytes | None, bytes | None]] = [
        (b"sku-0", b"{not json"),
        (b"sku-1", orjson.dumps({**docs[0], "messageId": "poison-type", "commandType": "X"})),
        (b"other", orjson.dumps({**docs[0], "messageId": "poison-key"})),
    ]
    for p in poison:
        records.insert(rng.randrange(len(records)), p)
    return Storm(commands, records, len(poison), commands + 1)  # (+ "poison-type")


@dataclass
class CommandReport(Checked):
    commands: int = 0
    copies: int = 0
    replies: int = 0
    events: int = 0
    dead_lettered: int = 0
    redispatched: int = 0
    #: of them, the repeated events and replies
    repeated: dict[str, int] = field(default_factory=dict)
    stock: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)


def exactly_once(settings: Settings) -> bool:
    """Whether ``settings`` run the worker under exactly_once (``auto`` is
    not known to: resolve it first, as the worker's start does)."""
    return settings.runtime.guarantee is Guarantee.EXACTLY_ONCE


async def verify_command_topics(
    settings: Settings, replies: str, cache: TopicCache | None = None
) -> CommandReport:
    """Read the command worker's topics to their exact ends and verify them
    (polling with one ``cache`` reads each record once); under exactly_once
    read_committed, and a repeated event fails."""
    once = exactly_once(settings)
    topics = cache or TopicCache(
        settings.broker.bootstrap, "read_committed" if once else "read_uncommitted"
    )
    return verify_commands(
        await topics.read(settings.commands.command_topic),
        await topics.read(replies),
        await topics.read(settings.commands.events_topic),
        await topics.read(settings.commands.command_dlq_topic),
        exactly_once=once,
    )


def wait_until_commands_verified(
    settings: Settings, replies: str, timeout: float, worker: Any = None, every: float = 1.0
) -> CommandReport:
    """Poll :func:`verify_command_topics` until it passes or ``timeout``
    runs out (``worker``: a WorkerProcess that must stay alive meanwhile)."""
    cache = TopicCache(
        settings.broker.bootstrap,
        "read_committed" if exactly_once(settings) else "read_uncommitted",
    )
    return asyncio.run(
        poll(
            lambda: verify_command_topics(settings, replies, cache),
            lambda report: report.ok,
            time.monotonic() + timeout,
            every,
            alive=worker.check_alive if worker is not None else None,
            timed_out=worker.dump if worker is not None else None,
        )
    )


def verify_commands(
    commands: list[Record],
    replies: list[Record],
    events: list[Record],
    dlq: list[Record],
    exactly_once: bool = False,
) -> CommandReport:
    """``exactly_once``: the records are what a read_committed consumer
    reads, and each event must be there once."""
    report = CommandReport(copies=len(commands), dead_lettered=len(dlq))
    first: dict[str, Command] = {}
    rejected: set[tuple[bytes | None, bytes | None]] = set()
    for rec in sorted(commands, key=lambda r: (r.partition, r.offset)):
        try:
            cmd = parse_command(rec.key, rec.value)
        except InvalidMessage:
            rejected.add((rec.key, rec.value))
            continue
        first.setdefault(reply_id(cmd), cmd)  # (per tenant and messageId)
    report.commands = len(first)
    # the reference: each command once, in partition order, same handlers
    state: dict[str, Any] = {}
    version: dict[str, int] = defaultdict(int)
    outcome: dict[str, bool] = {}
    for mid, cmd in first.items():
        handler = registry.handlers.get((cmd.command_type, cmd.schema_version))
        if handler is None:
            rejected.add((cmd.partition_key.encode(), cmd.value))
            outcome[mid] = False
            continue
        if cmd.expires_at is not None:
            outcome[mid] = False  # the storm's expiries are all in the past
            continue
        try:
            state[cmd.entity] = returned(handler(state.get(cmd.entity), cmd)).state
            version[cmd.entity] += 1
            outcome[mid] = True
        except DomainError:
            outcome[mid] = False
    report.stock = state
    checks = report.checks

    def identical(records: list[Record], name: str) -> dict[str, Any]:
        seen: dict[str, bytes | None] = {}
        changed = 0
        for r in records:
            mid = orjson.loads(r.value or b"{}").get("messageId")
            if mid in seen and seen[mid] != r.value:
                changed += 1
            seen.setdefault(mid, r.value)
        repeats = len(records) - len(seen)
        report.redispatched += repeats
        report.repeated[name] = repeats
        checks.append(Check(f"{name}: a repeat with other bytes", changed))
        if exactly_once and name == "events":  # a read_committed consumer sees each once
            checks.append(Check(f"{name}: repeated under exactly_once", repeats))
        return {m: orjson.loads(v or b"{}") for m, v in seen.items()}

    got_replies = identical(replies, "replies")
    got_events = identical(events, "events")
    report.replies, report.events = len(got_replies), len(got_events)
    missing = [m for m in first if m not in got_replies]
    checks.append(Check("commands without a reply", len(missing), ", ".join(missing[:3])))
    wrong = [m for m, ok in outcome.items() if m in got_replies and got_replies[m]["success"] != ok]
    checks.append(Check("replies with the wrong outcome", len(wrong), ", ".join(wrong[:3])))
    # final state per entity: the reply of its highest version
    final: dict[str, tuple[int, Any]] = {}
    for m, cmd in first.items():
        body = got_replies.get(m)
        if body and body["success"]:
            v = body.get("version", 0)
            if v > final.get(cmd.entity, (-1, None))[0]:
                final[cmd.entity] = (v, body["data"])
    differs = [e for e in state if final.get(e, (0, None))[1] != state[e]]
    checks.append(Check("entities whose state differs from the reference", len(differs)))
    negative = [e for e, (_, s) in final.items() if s and s["available"] < 0]
    checks.append(Check("entities with negative stock", len(negative)))
    versions = [e for e in state if final.get(e, (0, None))[0] != version[e]]
    checks.append(Check("entities whose version is not the applied commands", len(versions)))
    expected_events = sum(1 for ok in outcome.values() if ok)
    checks.append(Check("events missing", max(0, expected_events - len(got_events))))
    got = {(r.key, r.value) for r in dlq}
    checks.append(Check("dead letters missing", len(rejected - got), repr(list(rejected - got))))
    checks.append(
        Check("dead letters not expected", len(got - rejected), repr(list(got - rejected)))
    )
    return report
