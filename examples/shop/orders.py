"""Order command handlers for seqkeeper: place an order (paying for it
through the payment service), cancel it, and archive a cancelled one (the
order ends: its state is deleted, and its id may be placed again).

Run them with ``seqkeeper worker --topology commands --handlers
orders:registry`` from this directory. Each handler gets the order's state
(``None`` for an order not seen yet) and the command, and returns the new
state and the events; seqkeeper stores both with the reply, once per
command messageId, however often the command is delivered.
"""

import os

import aiohttp

from seqkeeper import Command, DomainError, End, Event, Registry

registry = Registry()


def payments_url() -> str:
    return os.environ.get("PAYMENTS_URL", "http://127.0.0.1:8099")


@registry.register("PlaceOrder")
async def place_order(state, command: Command):
    """Payload ``{"sku", "quantity", "unitPrice", "card"}``: charges the
    card, then the order is placed."""
    if state is not None:
        raise DomainError(f"{command.partition_key} is already {state['status']}")
    order = command.payload
    if not isinstance(order.get("quantity"), int) or order["quantity"] < 1:
        raise DomainError(
            "quantity must be a positive integer", {"quantity": order.get("quantity")}
        )
    amount = order["quantity"] * order["unitPrice"]

    # The handler may run more than once for one command (seqkeeper retries a
    # call past SEQKEEPER_HANDLER_TIMEOUT, and keeps one result): the
    # idempotency key makes the payment service charge once all the same.
    charge = {
        "idempotencyKey": f"{command.tenant_id}:{command.message_id}",
        "amount": amount,
        "card": order["card"],
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{payments_url()}/charges", json=charge) as response,
    ):
        body = await response.json()
        if response.status == 402:
            raise DomainError("payment refused", body)  # a reply, not a retry
        response.raise_for_status()  # anything else unexpected: retried

    placed = {
        "status": "placed",
        "sku": order["sku"],
        "quantity": order["quantity"],
        "amount": amount,
        "chargeId": body["chargeId"],
    }
    return placed, [Event("OrderPlaced", placed)]


@registry.register("CancelOrder")
def cancel_order(state, command: Command):
    """A placed order is cancelled; its ``OrderCancelled`` event carries the
    charge for whoever refunds it."""
    if state is None:
        raise DomainError(f"no order {command.partition_key}")
    if state["status"] != "placed":
        raise DomainError(f"{command.partition_key} is already {state['status']}")
    cancelled = {**state, "status": "cancelled"}
    return cancelled, [
        Event("OrderCancelled", {"chargeId": state["chargeId"], "amount": state["amount"]})
    ]


@registry.register("ArchiveOrder")
def archive_order(state, command: Command):
    """A cancelled order is archived: returning ``End`` ends the order.
    seqkeeper deletes its state once the ``OrderArchived`` event and the
    reply (``ended: true``, data: the order as it was) are sent; a later
    ``PlaceOrder`` with the same id places a new order, at version 1."""
    if state is None:
        raise DomainError(f"no order {command.partition_key}")
    if state["status"] != "cancelled":
        raise DomainError(f"{command.partition_key} is {state['status']}, not cancelled")
    return End(state), [Event("OrderArchived", {"chargeId": state["chargeId"]})]
