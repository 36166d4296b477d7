"""The peer baseline: what a Faust user would write — one agent, per-event
reads and writes of two RocksDB tables (seen ids, next sequence), a send per
event. ``python -m bench.peer worker`` with BENCH_BROKER, BENCH_IN, BENCH_OUT,
BENCH_APP, BENCH_DATA, BENCH_PARTITIONS in the environment."""

from __future__ import annotations

import os
from typing import Any

import faust
import orjson

env = os.environ.get
app = faust.App(
    env("BENCH_APP", "bench-peer"),
    broker="kafka://" + env("BENCH_BROKER", "localhost:9092"),
    store="rocksdb://",
    datadir=env("BENCH_DATA", "./bench-peer-data"),
    topic_partitions=int(env("BENCH_PARTITIONS", "4")),
    web_port=int(env("BENCH_WEB_PORT", "6066")),
    web_bind="127.0.0.1",  # (Faust's default is every interface)
    consumer_auto_offset_reset="earliest",
)
source = app.topic(env("BENCH_IN", "in"), key_serializer="raw", value_serializer="raw")
sink = app.topic(env("BENCH_OUT", "out"), key_serializer="raw", value_serializer="raw")
seen = app.Table("seen", default=bool, partitions=int(env("BENCH_PARTITIONS", "4")))
next_seq = app.Table("next", default=int, partitions=int(env("BENCH_PARTITIONS", "4")))


@app.agent(source)
async def dedup(stream: Any) -> None:
    async for event in stream.events():
        doc = orjson.loads(event.value)
        mid, key = doc["messageId"], event.key.decode()
        if seen[mid]:
            continue
        seen[mid] = True
        next_seq[key] = max(next_seq[key], doc["seq"] + 1)
        await sink.send(key=event.key, value=event.value)


if __name__ == "__main__":
    app.main()
