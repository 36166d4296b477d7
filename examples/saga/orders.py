"""Place the example's orders (``OrderPlaced`` on the saga's input topic)
and print how each ended.

    python orders.py [--broker HOST:PORT] [--topic saga.events] [--outcomes orders.outcomes]
"""

import argparse
import asyncio
import json
import os
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from seqkeeper.security import kafka_options

#: The orders: (id, sku, quantity, account, amount). Each account holds 100
#: (handlers.py): order-2's payment is declined and its stock released; no
#: "globe" is in stock.
ORDERS = [
    ("order-1", "book", 2, "alice", 30),
    ("order-2", "pen", 5, "bob", 250),
    ("order-3", "globe", 1, "carol", 40),
    ("order-4", "pen", 1, "dave", 3),
]


def placed(order_id: str, sku: str, quantity: int, account: str, amount: int) -> bytes:
    """The saga's first input: step 1 of the order (its ``correlationId``)."""
    doc = {
        "messageId": f"{order_id}:placed",
        "type": "OrderPlaced",
        "correlationId": order_id,
        "data": {"step": 1, "sku": sku, "quantity": quantity, "account": account,
                 "amount": amount},
    }  # fmt: skip
    return json.dumps(doc).encode()


def expected(orders=ORDERS) -> dict[str, str]:
    """How each order ends: completed, or cancelled (and why)."""
    from handlers import BALANCE, STOCK

    out = {}
    for order_id, sku, quantity, _, amount in orders:
        if quantity > STOCK.get(sku, 0):
            out[order_id] = "cancelled: out of stock"
        elif amount > BALANCE:
            out[order_id] = "cancelled: payment declined"
        else:
            out[order_id] = "completed"
    return out


async def place(bootstrap: str, topic: str, orders=ORDERS) -> int:
    """Send one ``OrderPlaced`` per order; how many were sent."""
    # kafka_options(): TLS and SASL as the SEQKEEPER_SECURITY_* variables say.
    async with AIOKafkaProducer(
        bootstrap_servers=bootstrap, **kafka_options(), acks="all"
    ) as producer:
        for order in orders:
            await producer.send_and_wait(topic, placed(*order), key=order[0].encode())
    return len(orders)


async def outcomes(bootstrap: str, topic: str, expect: int, timeout: float = 120.0) -> dict:
    """How the orders ended (by order id), from the saga's outcomes on
    ``topic``: until ``expect`` orders ended, at most ``timeout`` seconds."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        **kafka_options(),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",  # (exactly_once: only committed outcomes)
    )
    ended: dict[str, str] = {}
    await consumer.start()
    try:
        start = time.monotonic()
        while len(ended) < expect and time.monotonic() - start < timeout:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    data = json.loads(record.value)["data"]
                    reason = data.get("reason")
                    ended[data["order"]] = data["status"] + (f": {reason}" if reason else "")
    finally:
        await consumer.stop()
    return ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--topic", default="saga.events")
    parser.add_argument("--outcomes", default="orders.outcomes")
    args = parser.parse_args()
    if not args.broker:
        parser.error("--broker (or KAFKA_BOOTSTRAP_SERVERS) is required")
    print(f"placed {asyncio.run(place(args.broker, args.topic))} orders on {args.topic}")
    for order, how in sorted(
        asyncio.run(outcomes(args.broker, args.outcomes, len(ORDERS))).items()
    ):
        print(f"  {order}  {how}")


if __name__ == "__main__":
    main()
