"""A minimal Faust app on a batch source (run by test_batch_source.py):
writes each fetch's records as one JSON line (partition, offset, value, the
record's type), and acknowledges every record except those of partition 0
from offset HOLD on."""

from __future__ import annotations

import os
from typing import Any

import orjson

from seqkeeper.adapter.batches import ack_batch, batch_source, current
from seqkeeper.adapter.faust_app import App

env = os.environ.__getitem__
app = App(
    env("BATCH_APP"),
    broker="kafka://" + env("BATCH_BROKER"),
    store="memory://",
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
    broker_commit_interval=0.5,
)
source = app.topic(env("BATCH_TOPIC"), key_serializer="raw", value_serializer="raw")
hold = int(env("BATCH_HOLD"))


@app.agent(batch_source(app, source))
async def consume(stream: Any) -> None:
    async for fetched in stream:
        if not current(app, fetched):
            continue
        pairs = [
            (tp.partition, r.offset, r.value.decode(), type(r).__name__)
            for tp, records in fetched.partitions
            for r in records
        ]
        with open(env("BATCH_OUT"), "ab") as out:
            out.write(orjson.dumps(pairs) + b"\n")
        ack_batch(
            app,
            [
                (tp, [r for r in records if tp.partition != 0 or r.offset < hold])
                for tp, records in fetched.partitions
            ],
        )


if __name__ == "__main__":
    app.main()
