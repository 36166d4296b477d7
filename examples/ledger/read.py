"""Print what the processor produced, per account in sequence order, and
the balances.

    python read.py [--broker HOST:PORT] [--topic events.processed]
"""

import argparse
import asyncio
import json
import os
import time

from aiokafka import AIOKafkaConsumer

from seqkeeper.security import kafka_options


async def collect(
    bootstrap: str,
    topic: str,
    expect: int | None = None,
    quiet: float = 2.0,
    timeout: float = 120.0,
) -> list[dict]:
    """Every output on ``topic``, once each: until ``expect`` outputs came,
    or (without ``expect``) until none came for ``quiet`` seconds; at most
    ``timeout`` seconds."""
    # No consumer group: every partition from the beginning, nothing committed.
    # kafka_options(): TLS and SASL as the SEQKEEPER_SECURITY_* variables say.
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        **kafka_options(),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    outputs: dict[str, dict] = {}
    await consumer.start()
    try:
        start = last_new = time.monotonic()
        while time.monotonic() - start < timeout:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    doc = json.loads(record.value)
                    # After a crash, outputs may come again, byte-identical and with
                    # the same messageId: a consumer keeps the first.
                    if doc["messageId"] not in outputs:
                        outputs[doc["messageId"]] = doc
                        last_new = time.monotonic()
            if expect is not None and len(outputs) >= expect:
                break
            if expect is None and time.monotonic() - last_new >= quiet:
                break
    finally:
        await consumer.stop()
    return sorted(outputs.values(), key=lambda d: (d["key"], d["seq"]))


def describe(doc: dict) -> str:
    data = doc["data"]
    kind = doc.get("type", "")
    if kind == "PostingsMissing":
        what = f"seq {data['from']}-{data['to']} never came"
    else:
        what = f"{data['amount']:+d}"
    line = f"{doc['key']:<6} seq {doc['seq']:<2} {kind:<16} {what:<22} balance {data['balance']}"
    return line + (f" ({data['reason']})" if "reason" in data else "")


def balances(outputs: list[dict]) -> str:
    """``account balance`` per account (its last output's balance), with
    the postings it misses."""
    last: dict[str, dict] = {}
    missing: dict[str, list[str]] = {}
    for doc in outputs:
        last[doc["key"]] = doc
        if doc.get("type") == "PostingsMissing":
            gap = doc["data"]
            missing.setdefault(doc["key"], []).append(f"{gap['from']}-{gap['to']}")
    parts = []
    for account, doc in sorted(last.items()):
        part = f"{account} {doc['data']['balance']}"
        if account in missing:
            part += f" (missing seq {', '.join(missing[account])})"
        parts.append(part)
    return "balances: " + ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument(
        "--topic", default=os.environ.get("SEQKEEPER_PROCESSED_TOPIC", "events.processed")
    )
    args = parser.parse_args()
    if not args.broker:
        parser.error("give --broker or set KAFKA_BOOTSTRAP_SERVERS")
    outputs = asyncio.run(collect(args.broker, args.topic))
    for doc in outputs:
        print(describe(doc))
    print(balances(outputs))


if __name__ == "__main__":
    main()
