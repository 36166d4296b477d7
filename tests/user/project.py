"""A user's project outside the seqkeeper package, written into a temporary
directory: its own command handlers, imported by the worker by name."""

from __future__ import annotations

from pathlib import Path

#: A ledger: deposits and withdrawals per account, never below zero.
HANDLERS = """
from seqkeeper import Command, DomainError, Event, Registry

registry = Registry()


def _amount(command: Command) -> int:
    amount = command.payload.get("amount") if isinstance(command.payload, dict) else None
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        raise DomainError(f"amount must be a positive integer, got {amount!r}")
    return amount


@registry.register("Deposit")
def deposit(state, command):
    balance = (state or {"balance": 0})["balance"] + _amount(command)
    return {"balance": balance}, [Event("Deposited", {"balance": balance})]


@registry.register("Withdraw")
def withdraw(state, command):
    balance = (state or {"balance": 0})["balance"]
    amount = _amount(command)
    if amount > balance:
        raise DomainError("insufficient funds", {"balance": balance})
    return {"balance": balance - amount}, [Event("Withdrawn", {"balance": balance - amount})]
"""


#: The project asking the ledger through seqkeeper's client:
#: ``python -m ledger.ask BOOTSTRAP COMMAND_TOPIC ACCOUNT AMOUNT`` withdraws
#: and prints the reply.
ASK = """
import json
import sys

from seqkeeper.client import SyncCommandClient

bootstrap, topic, account, amount = sys.argv[1:5]
with SyncCommandClient(bootstrap, command_topic=topic, client_id="ledger-ask", tenant="bank") as c:
    reply = c.request("Withdraw", account, {"amount": int(amount)}, timeout=60)
print(json.dumps({"success": reply.success, "message": reply.message, "data": reply.data}))
"""


#: An ordered processor: the balance per account from its postings (the
#: demo workload's ``data.amount``), in sequence order. Not deterministic on
#: purpose (a random nonce in every output): identical copies after a crash
#: show that stored outputs were produced again, not computed again.
#: ``apply`` is sync, ``apply_async`` the same as ``async def``; each takes
#: ``LEDGER_DELAY`` seconds (so a test can kill the worker mid-processing).
BALANCES = """
import asyncio
import os
import random
import time

DELAY = float(os.environ.get("LEDGER_DELAY", "0"))

from seqkeeper import GAP_SKIPPED, Message, Output


def _apply(state, message: Message):
    state = state or {"balance": 0, "last": 0}
    if message.type == GAP_SKIPPED:
        last = message.data["to"]
        return {**state, "last": last}, [Output({"skipped": message.data}, type="GapNoted")]
    balance = state["balance"] + message.data["amount"]
    out = {"balance": balance, "previous": state["last"], "nonce": random.random()}
    return {"balance": balance, "last": message.seq}, [out]


async def apply_async(state, message: Message):
    await asyncio.sleep(DELAY)
    return _apply(state, message)


def apply(state, message: Message):
    time.sleep(DELAY)
    return _apply(state, message)
"""


def write_project(root: Path) -> Path:
    """``root/ledger/`` with ``handlers.py`` (``registry``), ``ask.py`` and
    ``balances.py`` (an ordered processor); returns ``root``."""
    package = root / "ledger"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "handlers.py").write_text(HANDLERS)
    (package / "ask.py").write_text(ASK)
    (package / "balances.py").write_text(BALANCES)
    return root
