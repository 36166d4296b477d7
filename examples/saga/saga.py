"""The order saga (a process manager): ``seqkeeper worker --processor
saga:step``, reading the orders placed and the command worker's events on
one topic, keyed by the order (``SEQKEEPER_KEY_FIELD=correlationId``), in
step order (``SEQKEEPER_SEQ_FIELD=data.step``).

    OrderPlaced      -> ReserveStock
    StockReserved    -> TakePayment
    PaymentTaken     -> OrderCompleted
    PaymentDeclined  -> ReleaseStock (compensation)
    StockReleased    -> OrderCancelled
    StockUnavailable -> OrderCancelled

Each command is an output to the command topic (allowed by
``SEQKEEPER_PROCESSOR_TOPICS``) stored with the saga's state and sent
once, with an id that stays the same however often the step runs
(:func:`seqkeeper.command_message`); the command worker applies each once.
The outcome goes to the processed topic.
"""

import os
import time

from seqkeeper import GAP_SKIPPED, Output, command_message

#: The command worker's topic (its setting, in the environment of both workers).
COMMANDS = os.environ.get("SEQKEEPER_COMMAND_TOPIC", "commands.in")
TENANT = "shop"


def _command(message, name, command_type, key, payload, step):
    return command_message(
        message, name, command_type, key, {**payload, "step": step},
        tenant_id=TENANT, topic=COMMANDS,
    )  # fmt: skip


def _outcome(order, status, reason=None):
    data = {"order": order["id"], "status": status}
    if reason:
        data["reason"] = reason
    kind = "OrderCompleted" if status == "completed" else "OrderCancelled"
    return Output(data, type=kind)


def step(state, message):
    time.sleep(float(os.environ.get("SAGA_DELAY", "0")))  # (a test's kill lands mid-saga)
    kind, data = message.type, message.data
    if kind == GAP_SKIPPED:  # (steps come one after the other: no gap is expected)
        return state, []
    if kind == "OrderPlaced":
        order = {
            "id": message.key,
            **{k: data[k] for k in ("sku", "quantity", "account", "amount")},
        }
        reserve = _command(message, "reserve", "ReserveStock", order["sku"],
                           {"quantity": order["quantity"]}, 2)  # fmt: skip
        return {"order": order, "status": "reserving"}, [reserve]
    order, status = state["order"], state["status"]
    if kind == "StockReserved" and status == "reserving":
        pay = _command(message, "pay", "TakePayment", order["account"],
                       {"amount": order["amount"]}, 3)  # fmt: skip
        return {"order": order, "status": "paying"}, [pay]
    if kind == "StockUnavailable" and status == "reserving":
        return {"order": order, "status": "cancelled"}, [
            _outcome(order, "cancelled", "out of stock")
        ]
    if kind == "PaymentTaken" and status == "paying":
        return {"order": order, "status": "completed"}, [_outcome(order, "completed")]
    if kind == "PaymentDeclined" and status == "paying":
        release = _command(message, "release", "ReleaseStock", order["sku"], {}, 4)
        return {"order": order, "status": "releasing"}, [release]
    if kind == "StockReleased" and status == "releasing":
        return {"order": order, "status": "cancelled"}, [
            _outcome(order, "cancelled", "payment declined")
        ]
    return state, []  # (not this saga's next step: nothing to do)
