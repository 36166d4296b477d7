"""examples/shop, black-box: a copy of the project outside the repository,
its handlers run by the installed ``seqkeeper worker --topology commands
--handlers orders:registry``, its async ``PlaceOrder`` calling the
project's stub payment service on loopback. Commands delivered shuffled
and twice get one reply each with the handlers' result (a declined card and
the business rules are failure replies); a payment call past the handler
timeout is retried and charges once; and ``python run.py`` does it all in
one command, printing the client's replies."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.demo import publish
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.examples.project import copy_example, one_command_env, script

pytestmark = pytest.mark.integration

CARD = "4242 4242 4242 4242"
DECLINED = "4000 0000 0000 0002"
SLOW = "4000 0000 0000 0259"  # answers after 5 s the first time
BOOK = {"sku": "book", "quantity": 2, "unitPrice": 15, "card": CARD}

#: Per order, its commands in the order they are sent: (messageId, type, payload).
COMMANDS = {
    "order-1": [
        ("order-1:place", "PlaceOrder", BOOK),
        ("order-1:again", "PlaceOrder", {**BOOK, "quantity": 5}),
        ("order-1:cancel", "CancelOrder", {}),
        ("order-1:archive", "ArchiveOrder", {}),  # the order ends
        ("order-1:replace", "PlaceOrder", {**BOOK, "quantity": 1}),  # a new order-1
    ],
    "order-2": [
        ("order-2:place", "PlaceOrder", {**BOOK, "card": DECLINED}),
        ("order-2:cancel", "CancelOrder", {}),
    ],
    "order-3": [("order-3:place", "PlaceOrder", {**BOOK, "quantity": 3, "card": SLOW})],
    "order-4": [("order-4:place", "PlaceOrder", {**BOOK, "quantity": 0})],
}


def charge_id(message_id: str) -> str:
    return "ch_" + hashlib.sha256(f"shop:{message_id}".encode()).hexdigest()[:12]


def placed(message_id: str, quantity: int, status: str = "placed") -> dict[str, Any]:
    return {"status": status, "sku": "book", "quantity": quantity, "amount": 15 * quantity,
            "chargeId": charge_id(message_id)}  # fmt: skip


#: Per command: the reply's success, message, data and version.
REPLIES = {
    "order-1:place": (True, "ok", placed("order-1:place", 2), 1),
    "order-1:again": (False, "order-1 is already placed", None, 1),
    "order-1:cancel": (True, "ok", placed("order-1:place", 2, "cancelled"), 2),
    "order-1:archive": (True, "ok", placed("order-1:place", 2, "cancelled"), 3),
    "order-1:replace": (True, "ok", placed("order-1:replace", 1), 1),
    "order-2:place": (False, "payment refused", {"error": "card declined"}, 0),
    "order-2:cancel": (False, "no order order-2", None, 0),
    "order-3:place": (True, "ok", placed("order-3:place", 3), 1),
    "order-4:place": (False, "quantity must be a positive integer", {"quantity": 0}, 0),
}

#: Per event messageId (``4:shop/<command messageId>:<n>``, tenant shop):
#: its type and data.
EVENTS = {
    "4:shop/order-1:place:1": ("OrderPlaced", placed("order-1:place", 2)),
    "4:shop/order-1:cancel:1": (
        "OrderCancelled", {"chargeId": charge_id("order-1:place"), "amount": 30}
    ),
    "4:shop/order-3:place:1": ("OrderPlaced", placed("order-3:place", 3)),
    "4:shop/order-1:archive:1": ("OrderArchived", {"chargeId": charge_id("order-1:place")}),
    "4:shop/order-1:replace:1": ("OrderPlaced", placed("order-1:replace", 1)),
}  # fmt: skip
#: The commands whose handler ended their order (the reply says ``ended``).
ENDED = {"order-1:archive"}


def records(reply_to: str, seed: int = 3) -> list[tuple[bytes, bytes]]:
    """Every command once or twice (the copy right after it or later),
    the orders interleaved at random, each order's in its own order."""
    rng = random.Random(seed)
    queues = {order: list(commands) for order, commands in COMMANDS.items()}
    out = []
    while queues:
        order = rng.choice(sorted(queues))
        message_id, kind, payload = queues[order].pop(0)
        if not queues[order]:
            del queues[order]
        doc = {"messageId": message_id, "commandType": kind, "schemaVersion": 1,
               "correlationId": f"corr-{message_id}", "partitionKey": order, "tenantId": "shop",
               "replyTo": reply_to, "payload": payload}  # fmt: skip
        record = (order.encode(), orjson.dumps(doc))
        out.append(record)
        if rng.random() < 0.5:
            out.insert(rng.randrange(len(out) - 1, len(out) + 1), record)
    return out


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """The example copied to a temporary directory, and its stub payment
    service running from there: (project, url)."""
    project = copy_example("shop", tmp_path / "shop")
    proc = subprocess.Popen(
        [sys.executable, "payments.py", "--port", "0"],
        cwd=project, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        started = re.match(r"payments at (\S+)", proc.stdout.readline())
        assert started, "the payment service did not start"
        yield project, started.group(1)
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_shop_answers_each_command_once(
    make_settings, names, payments, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, url = payments
    monkeypatch.setenv("PAYMENTS_URL", url)  # the worker's environment
    settings = make_settings(topology="commands", handlers="orders:registry", handler_timeout=2.0)
    bootstrap = settings.broker.bootstrap
    reply_to = f"{names['app_id']}.replies"
    asyncio.run(create_topics(bootstrap, [*settings.topics(), reply_to], 2))
    sent = records(reply_to)
    assert len(sent) > sum(map(len, COMMANDS.values())), "no command was sent twice"
    # a copy of order-1's first command after the order ended: its stored reply, no charge
    sent += [r for r in sent if orjson.loads(r[1])["messageId"] == "order-1:place"][:1]
    asyncio.run(publish(bootstrap, settings.commands.command_topic, sent))
    worker = WorkerProcess(settings, tmp_path / "worker.log", cwd=project).start()
    try:
        deadline = time.monotonic() + 120
        while True:
            replies = asyncio.run(read_topic(bootstrap, reply_to))
            if len({orjson.loads(r.value)["messageId"] for r in replies}) >= len(REPLIES):
                break
            worker.check_alive()
            assert time.monotonic() < deadline, (len(replies), worker.log()[-3000:])
            time.sleep(0.5)
        time.sleep(1.0)  # anything more would be wrong: give it the time to show
        replies = asyncio.run(read_topic(bootstrap, reply_to))
        events = asyncio.run(read_topic(bootstrap, settings.commands.events_topic))
        dead = asyncio.run(read_topic(bootstrap, settings.commands.command_dlq_topic))
    finally:
        assert worker.stop() == 0
    assert dead == []
    answered = once_each(replies)
    assert {reply["causationId"]: reply for reply in answered.values()} == {
        mid: {"messageId": f"4:shop/{mid}:reply", "correlationId": f"corr-{mid}", "causationId": mid,
              "success": ok, "message": message, "data": data, "version": version,
              **({"ended": True} if mid in ENDED else {})}
        for mid, (ok, message, data, version) in REPLIES.items()
    }  # fmt: skip
    assert {mid: (e["type"], e["data"]) for mid, e in once_each(events).items()} == EVENTS
    with urllib.request.urlopen(f"{url}/charges") as answer:
        charges = json.load(answer)
    # the slow call timed out (its answer takes 5 s) and was made again; the
    # service charged once
    assert charges == {
        "shop:order-1:place": {"chargeId": charge_id("order-1:place"), "amount": 30, "calls": 1},
        "shop:order-1:replace": {"chargeId": charge_id("order-1:replace"), "amount": 15, "calls": 1},
        "shop:order-3:place": {"chargeId": charge_id("order-3:place"), "amount": 45, "calls": 2},
    }


def once_each(records: list[Any]) -> dict[str, dict[str, Any]]:
    """The records' values by messageId; a messageId sent more than once
    must have been sent with the same bytes."""
    seen: dict[str, set[bytes]] = defaultdict(set)
    for r in records:
        seen[orjson.loads(r.value)["messageId"]].add(r.value)
    assert all(len(copies) == 1 for copies in seen.values()), "a message changed"
    return {mid: orjson.loads(next(iter(copies))) for mid, copies in seen.items()}


def test_the_shop_runs_with_one_command(broker, make_settings, tmp_path: Path) -> None:
    project = copy_example("shop", tmp_path / "shop")
    settings = make_settings(topology="commands", handlers="orders:registry")
    out = script(project, "run.py", env=one_command_env(broker, settings), timeout=400)
    book = placed("order-1:place", 2)
    replies = [line.removeprefix("  -> ") for line in out.splitlines() if line.startswith("  -> ")]
    assert replies == [
        f"ok, version 1: {json.dumps(book, sort_keys=True)}",
        f"ok, version 1: {json.dumps(book, sort_keys=True)}",
        'refused: payment refused {"error": "card declined"}',
        f"ok, version 1: {json.dumps(placed('order-3:place', 2), sort_keys=True)}",
        "refused: order-1 is already placed",
        f"ok, version 2: {json.dumps({**book, 'status': 'cancelled'}, sort_keys=True)}",
        "refused: no order order-9",
    ], out
    assert f"  shop:order-3:place: 30 ({charge_id('order-3:place')}, requests: 2)" in out, out
    assert "(signed commands only)" in out, out  # the worker trusted run.py's key alone
