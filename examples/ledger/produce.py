"""Send the example's postings to the input topic the way real producers
often do: shuffled, some twice, and one never.

    python produce.py [--broker HOST:PORT] [--topic events.in]
"""

import argparse
import asyncio
import json
import os
import random

from aiokafka import AIOKafkaProducer

from seqkeeper.security import kafka_options

#: The postings per account, in sequence order (seq 1, 2, ...).
POSTINGS = {
    "alice": [100, -30, -80, 50, -60],  # seq 3 would overdraw: rejected
    "bob": [20, 15, -10, 40, -5, 25],  # seq 4 is never sent: a gap
    "carol": [10, -25, 5],  # seq 2 would overdraw: rejected
}

#: Postings lost on the way: (account, seq).
LOST = {("bob", 4)}


def records(seed: int = 34) -> list[tuple[bytes, bytes]]:
    """(key, value) records of every posting not lost, a third of them
    twice, all shuffled."""
    rng = random.Random(seed)
    out = []
    for account, amounts in POSTINGS.items():
        for seq, amount in enumerate(amounts, 1):
            if (account, seq) in LOST:
                continue
            value = {
                "messageId": f"{account}:{seq}",
                "seq": seq,
                "type": "Posted",
                "data": {"amount": amount},
            }
            record = (account.encode(), json.dumps(value).encode())
            out += [record, record] if rng.random() < 1 / 3 else [record]
    rng.shuffle(out)
    return out


def expected_outputs() -> int:
    """How many outputs the processor produces: one per posting that
    arrives, and one per range given up (here, each lost posting is a range
    of its own)."""
    return sum(len(amounts) for amounts in POSTINGS.values())


async def send(bootstrap: str, topic: str) -> int:
    """Send the records; returns how many were sent."""
    sent = records()
    # kafka_options(): TLS and SASL as the SEQKEEPER_SECURITY_* variables say.
    async with AIOKafkaProducer(
        bootstrap_servers=bootstrap, **kafka_options(), acks="all"
    ) as producer:
        for key, value in sent:
            await producer.send_and_wait(topic, value, key=key)
    return len(sent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--topic", default=os.environ.get("SEQKEEPER_INPUT_TOPIC", "events.in"))
    args = parser.parse_args()
    if not args.broker:
        parser.error("give --broker or set KAFKA_BOOTSTRAP_SERVERS")
    n = asyncio.run(send(args.broker, args.topic))
    print(f"sent {n} records ({expected_outputs() - len(LOST)} postings) to {args.topic}")


if __name__ == "__main__":
    main()
