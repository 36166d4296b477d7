"""A minimal Faust app on a batch source (run by test_batch_source.py):
writes each fetched list's (partition, offset) pairs as one JSON line, and
acknowledges every record except those of partition 0 from offset HOLD on."""

from __future__ import annotations

import os
from typing import Any

import orjson

from state.faust_glue import App, ack_batch, batch_source, current

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
    async for messages in stream:
        if not current(app, messages):
            continue
        with open(env("BATCH_OUT"), "ab") as out:
            out.write(orjson.dumps([(m.partition, m.offset) for m in messages]) + b"\n")
        ack_batch(app, [m for m in messages if m.partition != 0 or m.offset < hold])


if __name__ == "__main__":
    app.main()
