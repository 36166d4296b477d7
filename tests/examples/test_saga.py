"""examples/saga, black-box: a copy of the project outside the repository,
its command handlers run by the installed ``seqkeeper worker --topology
commands --handlers handlers:registry`` and its saga by ``seqkeeper worker
--processor saga:step``, the saga's worker killed with ``kill -9`` in the
middle of the sagas and started again. Each order ends once, as its rules
say (completed; cancelled when out of stock; cancelled and its stock
released when the payment is declined), each command is sent and applied
once (one messageId per step, one event per command), and the stock and
balances show each reservation, payment and release took effect once; and
``python run.py`` does it in one command."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from seqkeeper.demo import publish
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker
from tests.examples.project import copy_example, one_command_env, script

pytestmark = pytest.mark.integration

ORDERS = 30
STOCK = 1000  # of book and pen (handlers.py); no globe
BALANCE = 100  # of each account


def order(i: int) -> dict[str, Any]:
    sku = "globe" if i % 7 == 0 else ("book" if i % 2 else "pen")
    amount = 250 if i % 5 == 0 else 10 + i
    return {"sku": sku, "quantity": 1 + i % 3, "account": f"acct-{i}", "amount": amount}


def ending(o: dict[str, Any]) -> tuple[str, list[str]]:
    """How an order ends, and the commands its saga sends, in order."""
    if o["sku"] == "globe":
        return "cancelled: out of stock", ["ReserveStock"]
    if o["amount"] > BALANCE:
        return "cancelled: payment declined", ["ReserveStock", "TakePayment", "ReleaseStock"]
    return "completed", ["ReserveStock", "TakePayment"]


def placed(i: int) -> tuple[bytes, bytes]:
    doc = {"messageId": f"order-{i}:placed", "type": "OrderPlaced",
           "correlationId": f"order-{i}", "data": {"step": 1, **order(i)}}  # fmt: skip
    return f"order-{i}".encode(), orjson.dumps(doc)


def by_id(records: list[Any]) -> dict[str, list[bytes]]:
    seen: dict[str, list[bytes]] = defaultdict(list)
    for r in records:
        seen[orjson.loads(r.value)["messageId"]].append(r.value)
    return seen


def test_each_saga_completes_or_compensates_once_across_kill_9(
    make_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broker: Broker
) -> None:
    monkeypatch.setenv("SAGA_DELAY", "0.02")
    project = copy_example("saga", tmp_path / "saga")
    base = make_settings()
    events, commands_topic = base.commands.events_topic, base.commands.command_topic
    commands = make_settings(
        topology="commands", handlers="handlers:registry", data_dir=tmp_path / "commands"
    )
    saga = make_settings(
        input_topic=events,
        key_field="correlationId",
        seq_field="data.step",
        processor="saga:step",
        processor_topics=commands_topic,
        data_dir=tmp_path / "saga",
    )
    bootstrap = base.broker.bootstrap
    asyncio.run(create_topics(bootstrap, [*commands.topics(), *saga.topics()], 2))
    isolation = "read_uncommitted" if broker.is_tansu else "read_committed"
    outcomes = saga.ordered.processed_topic

    def read(topic: str) -> list[Any]:
        return asyncio.run(read_topic(bootstrap, topic, isolation=isolation))

    command_worker = WorkerProcess(commands, tmp_path / "commands.log", cwd=project).start()
    first = WorkerProcess(saga, tmp_path / "saga-1.log", cwd=project).start()
    second = None
    try:
        asyncio.run(publish(bootstrap, events, [placed(i) for i in range(1, ORDERS + 1)]))
        deadline = time.monotonic() + 120
        # (uncommitted commands count: the kill lands mid-saga)
        while len(by_id(asyncio.run(read_topic(bootstrap, commands_topic)))) < 20:
            first.check_alive()
            command_worker.check_alive()
            assert time.monotonic() < deadline, first.log()[-3000:]
            time.sleep(0.05)
        first.kill()
        second = WorkerProcess(saga, tmp_path / "saga-2.log", cwd=project).start()
        deadline = time.monotonic() + 180
        while len(by_id(read(outcomes))) < ORDERS:
            second.check_alive()
            command_worker.check_alive()
            assert time.monotonic() < deadline, (len(by_id(read(outcomes))), second.log()[-3000:])
            time.sleep(0.5)
        time.sleep(2.0)  # anything more would be wrong: give it the time to show
        ended, sent, applied = read(outcomes), read(commands_topic), read(events)
        dead = read(saga.ordered.dlq_topic) + read(commands.commands.command_dlq_topic)
    finally:
        if second is not None:
            assert second.stop() == 0
        assert command_worker.stop() == 0
    assert dead == []
    expected = {f"order-{i}": ending(order(i)) for i in range(1, ORDERS + 1)}

    # each order ended once, as its rules say
    endings: dict[str, list[str]] = defaultdict(list)
    for copies in by_id(ended).values():
        assert len(set(copies)) == 1, "an outcome changed after the crash"
        if not broker.is_tansu:
            assert len(copies) == 1, "an outcome seen twice, read_committed"
        data = orjson.loads(copies[0])["data"]
        reason = data.get("reason")
        endings[data["order"]].append(data["status"] + (f": {reason}" if reason else ""))
    assert endings == {o: [how] for o, (how, _) in expected.items()}

    # each step's command sent once (one messageId; copies byte-identical)
    sent_by: dict[str, list[str]] = defaultdict(list)
    for copies in by_id(sent).values():
        assert len(set(copies)) == 1
        if not broker.is_tansu:
            assert len(copies) == 1, "a command seen twice, read_committed"
        doc = orjson.loads(copies[0])
        sent_by[doc["correlationId"]].append(doc["commandType"])
    assert {o: sorted(c) for o, c in sent_by.items()} == {
        o: sorted(c) for o, (_, c) in expected.items()
    }

    # each command applied once: one event each; the stock and balances
    # after the last event show each reservation, payment and release once
    events_by: dict[str, list[str]] = defaultdict(list)
    last: dict[str, tuple[int, dict[str, Any]]] = {}
    for copies in by_id(applied).values():
        doc = orjson.loads(copies[0])
        if doc["type"] == "OrderPlaced":
            continue
        events_by[doc["correlationId"]].append(doc["type"])
        if doc["entity"] not in last or last[doc["entity"]][0] < doc["version"]:
            last[doc["entity"]] = (doc["version"], doc["data"])
    assert sum(len(e) for e in events_by.values()) == sum(len(c) for _, c in expected.values())
    for o, (how, _) in expected.items():
        want = {
            "completed": ["PaymentTaken", "StockReserved"],
            "cancelled: out of stock": ["StockUnavailable"],
            "cancelled: payment declined": ["PaymentDeclined", "StockReleased", "StockReserved"],
        }[how]
        assert sorted(events_by[o]) == want, o
    for sku in ("book", "pen"):
        taken = sum(
            order(i)["quantity"]
            for i in range(1, ORDERS + 1)
            if order(i)["sku"] == sku and expected[f"order-{i}"][0] == "completed"
        )
        assert last[sku][1]["available"] == STOCK - taken, sku
    for i in range(1, ORDERS + 1):
        o = order(i)
        if expected[f"order-{i}"][0] == "completed":
            assert last[o["account"]][1]["balance"] == BALANCE - o["amount"]


def test_the_saga_runs_with_one_command(broker: Broker, make_settings: Any, tmp_path: Path) -> None:
    project = copy_example("saga", tmp_path / "saga")
    out = script(project, "run.py", env=one_command_env(broker, make_settings()), timeout=400)
    assert "order-1  2 x book    30 from alice  completed" in out, out
    assert "order-2  5 x pen    250 from bob    cancelled: payment declined" in out, out
    assert "order-3  1 x globe   40 from carol  cancelled: out of stock" in out, out
    assert "order-4  1 x pen      3 from dave   completed" in out, out
