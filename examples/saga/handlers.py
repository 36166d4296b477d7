"""The command side of the order saga: stock per SKU and payments per
account, run by ``seqkeeper worker --topology commands --handlers
handlers:registry``. Each outcome, a refusal included, is an event (not a
``DomainError``): the saga reads the command worker's events, and each
event echoes the saga's ``step`` from the command's payload, which is the
sequence number the saga's worker orders its input by
(``SEQKEEPER_SEQ_FIELD=data.step``). The events name the saga by the
command's ``correlationId`` (``SEQKEEPER_KEY_FIELD=correlationId``)."""

from seqkeeper import Command, Event, Registry

registry = Registry()

#: Stock of each SKU before any reservation (others: none).
STOCK = {"book": 1000, "pen": 1000}
#: What each account holds before any payment.
BALANCE = 100


def _outcome(command: Command, **data):
    return {"order": command.correlation_id, "step": command.payload["step"], **data}


@registry.register("ReserveStock")
def reserve_stock(state, command):
    sku, order = command.partition_key, command.correlation_id
    quantity = command.payload["quantity"]
    stock = state or {"available": STOCK.get(sku, 0), "reserved": {}}
    if quantity > stock["available"]:
        event = _outcome(command, sku=sku, quantity=quantity, available=stock["available"])
        return stock, [Event("StockUnavailable", event)]
    available = stock["available"] - quantity
    reserved = {**stock["reserved"], order: quantity}
    event = _outcome(command, sku=sku, quantity=quantity, available=available)
    return {"available": available, "reserved": reserved}, [Event("StockReserved", event)]


@registry.register("ReleaseStock")
def release_stock(state, command):
    sku, order = command.partition_key, command.correlation_id
    stock = state or {"available": STOCK.get(sku, 0), "reserved": {}}
    reserved = dict(stock["reserved"])
    quantity = reserved.pop(order, 0)  # (nothing reserved: nothing to give back)
    available = stock["available"] + quantity
    event = _outcome(command, sku=sku, quantity=quantity, available=available)
    return {"available": available, "reserved": reserved}, [Event("StockReleased", event)]


@registry.register("TakePayment")
def take_payment(state, command):
    account = command.partition_key
    amount = command.payload["amount"]
    balance = BALANCE if state is None else state["balance"]
    if amount > balance:
        event = _outcome(command, account=account, amount=amount, balance=balance)
        return state, [Event("PaymentDeclined", event)]
    event = _outcome(command, account=account, amount=amount, balance=balance - amount)
    return {"balance": balance - amount}, [Event("PaymentTaken", event)]
