"""The modern peer: what a Quix Streams user would write for the bench's
job, from Quix's own documentation — one StreamingDataFrame over the input,
per-key RocksDB state (changelogged by Quix) that drops a messageId already
seen, keeps the highest seq and a count, and produces each accepted message.

``python -m seqkeeper.bench.quix`` with BENCH_BROKER, BENCH_IN, BENCH_OUT,
BENCH_APP (the consumer group), BENCH_DATA (the state directory),
BENCH_GUARANTEE (``at-least-once`` or ``exactly-once``) and
BENCH_COMMIT_INTERVAL (seconds) in the environment. quixstreams comes with
the ``bench`` extra (``pip install 'seqkeeper[bench]'``)."""

from __future__ import annotations

import os
from typing import Any


def accept(value: dict[str, Any], state: Any) -> bool:
    """Whether the message is new for its key: the idiomatic per-key state
    of a Quix app (its ``State`` is scoped to the message's key)."""
    seen = f"seen:{value['messageId']}"
    if state.get(seen):
        return False
    state.set(seen, True)
    state.set("seq", max(state.get("seq", 0), int(value["seq"])))
    state.set("count", state.get("count", 0) + 1)
    return True


def main() -> None:
    from quixstreams import Application

    env = os.environ.get
    app = Application(
        broker_address=env("BENCH_BROKER", "localhost:9092"),
        consumer_group=env("BENCH_APP", "bench-quix"),
        auto_offset_reset="earliest",
        processing_guarantee=env("BENCH_GUARANTEE", "at-least-once"),  # type: ignore[arg-type]
        commit_interval=float(env("BENCH_COMMIT_INTERVAL", "1.0")),
        state_dir=env("BENCH_DATA", "./bench-quix-state"),
        loglevel="WARNING",
    )
    source = app.topic(env("BENCH_IN", "in"), key_deserializer="bytes", value_deserializer="json")
    sink = app.topic(env("BENCH_OUT", "out"), key_serializer="bytes", value_serializer="json")
    sdf = app.dataframe(source)
    sdf = sdf.filter(accept, stateful=True)
    sdf.to_topic(sink)
    app.run()


if __name__ == "__main__":
    main()
