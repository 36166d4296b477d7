"""The example domain of the command worker: inventory per SKU.

An entity is one SKU of one tenant (``partitionKey`` = the SKU). State:
``{"available": n, "reserved": {orderId: quantity}}``. Invariant: stock is
never negative, and ``available + sum(reserved)`` equals all stock added —
whatever duplicates the transport delivers (the command handler applies
each command once).

Commands (schema version 1): ``AddStock {quantity}``,
``ReserveInventory {orderId, quantity}``, ``ReleaseInventory {orderId}``.
"""

from __future__ import annotations

from typing import Any

from seqkeeper.processors.command import Command, DomainError, Event, Registry

registry = Registry()


def _state(state: Any) -> dict[str, Any]:
    if state is None:
        return {"available": 0, "reserved": {}}
    return {"available": state["available"], "reserved": dict(state["reserved"])}


def _quantity(command: Command) -> int:
    q = command.payload.get("quantity") if isinstance(command.payload, dict) else None
    if isinstance(q, bool) or not isinstance(q, int) or q <= 0:
        raise DomainError(f"quantity must be a positive integer, got {q!r}")
    return q


def _order(command: Command) -> str:
    order = command.payload.get("orderId") if isinstance(command.payload, dict) else None
    if not isinstance(order, str) or not order:
        raise DomainError(f"orderId must be a non-empty string, got {order!r}")
    return order


@registry.register("AddStock")
def add_stock(state: Any, command: Command) -> tuple[Any, list[Event]]:
    s = _state(state)
    q = _quantity(command)
    s["available"] += q
    return s, [Event("StockAdded", {"sku": command.partition_key, "quantity": q})]


@registry.register("ReserveInventory")
def reserve(state: Any, command: Command) -> tuple[Any, list[Event]]:
    s = _state(state)
    q, order = _quantity(command), _order(command)
    if order in s["reserved"]:
        raise DomainError(f"order {order!r} already holds a reservation")
    if q > s["available"]:
        raise DomainError(
            f"insufficient stock: {q} requested, {s['available']} available",
            {"available": s["available"]},
        )
    s["available"] -= q
    s["reserved"][order] = q
    return s, [
        Event("InventoryReserved", {"sku": command.partition_key, "orderId": order, "quantity": q})
    ]


@registry.register("ReleaseInventory")
def release(state: Any, command: Command) -> tuple[Any, list[Event]]:
    s = _state(state)
    order = _order(command)
    if order not in s["reserved"]:
        raise DomainError(f"order {order!r} holds no reservation")
    q = s["reserved"].pop(order)
    s["available"] += q
    return s, [
        Event("InventoryReleased", {"sku": command.partition_key, "orderId": order, "quantity": q})
    ]
