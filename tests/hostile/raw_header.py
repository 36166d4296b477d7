"""Produce one record whose header name is not UTF-8: ``python
tests/hostile/raw_header.py BOOTSTRAP TOPIC KEY VALUE``, run with
``AIOKAFKA_NO_EXTENSIONS=1`` (aiokafka's Python record builder writes the
bytes a name's ``encode`` gives; Java's producer cannot send such a name, a
producer in another language can)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from aiokafka import AIOKafkaProducer

#: The name's bytes: not UTF-8.
NAME = b"\xff\xfe"


class RawName(str):
    def encode(self, *args: Any, **kwargs: Any) -> bytes:  # type: ignore[override]
        return NAME


async def main(bootstrap: str, topic: str, key: str, value: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        headers = [(RawName("x"), b"v")]
        sent = await producer.send(
            topic, value.encode(), key=key.encode(), headers=headers, partition=0
        )
        await sent
    finally:
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
