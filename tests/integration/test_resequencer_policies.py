"""The Resequencer's policies through a real worker and broker: gap timeout
with GapSkipped markers, late arrivals, conflicts, overflow, metrics."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from jsonschema import Draft202012Validator

from seqkeeper.broker import free_port
from seqkeeper.demo import publish
from seqkeeper.processors.dead_letter import REASON, schema_document
from seqkeeper.settings import Settings
from seqkeeper.topics import Record, create_topics, read_topic
from seqkeeper.worker import WorkerProcess

pytestmark = pytest.mark.integration

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def event(key: str, seq: int, mid: str | None = None) -> tuple[bytes, bytes]:
    value = {"messageId": mid or f"{key}-{seq}", "seq": seq, "type": "t", "data": {"n": seq}}
    return key.encode(), orjson.dumps(value)


def wait_for(
    settings: Settings,
    topic: str,
    done: Callable[[list[Record]], bool],
    worker: WorkerProcess,
    timeout: float = 60,
) -> list[Record]:
    deadline = time.monotonic() + timeout
    while True:
        records = asyncio.run(read_topic(settings.broker.bootstrap, topic))
        if done(records):
            return records
        worker.check_alive()
        assert time.monotonic() < deadline, (
            topic,
            [r.value for r in records],
            worker.log()[-2000:],
        )
        time.sleep(0.3)


def seqs(records: list[Record], key: str) -> list[object]:
    out: list[object] = []
    for r in records:
        if r.key != key.encode():
            continue
        doc = orjson.loads(r.value or b"")
        out.append(
            tuple(doc["data"].values()) if doc["type"] == "seqkeeper.GapSkipped" else doc["seq"]
        )
    return out


def start(make_settings, tmp_path: Path, **policy: object) -> tuple[Settings, WorkerProcess]:
    s = make_settings(timer_interval=0.2, web_port=free_port(), **policy)
    asyncio.run(create_topics(s.broker.bootstrap, s.topics(), s.broker.partitions))
    return s, WorkerProcess(s, tmp_path / "worker.log").start()


def test_gap_timeout_late_arrival_conflict_and_overflow_skip(make_settings, tmp_path) -> None:
    s, worker = start(
        make_settings,
        tmp_path,
        gap_timeout=1.0,
        max_buffered_per_key=2,
        overflow_policy="skip",
        late_policy="late-topic",
    )
    try:
        asyncio.run(
            publish(
                s.broker.bootstrap,
                s.ordered.input_topic,
                [
                    event("gap", 1),
                    event("gap", 2),
                    event("gap", 4),
                    event("gap", 5),  # 3 is missing
                    event("full", 1),
                    event("full", 3),
                    event("full", 4),
                    event("full", 5),  # 2 missing, buffer of 2
                    event("conflict", 1),
                    event("conflict", 1, "another-id"),
                ],
            )
        )
        ordered = wait_for(s, s.ordered.ordered_topic, lambda r: len(seqs(r, "gap")) == 5, worker)
        assert seqs(ordered, "gap") == [1, 2, (3, 3), 4, 5]
        # overflow: 5 arrives with 3 and 4 buffered -> the gap 2..2 is given up at once
        assert seqs(ordered, "full") == [1, (2, 2), 3, 4, 5]
        assert seqs(ordered, "conflict") == [1]
        dlq = wait_for(s, s.ordered.dlq_topic, lambda r: len(r) >= 1, worker)
        assert [(r.key, r.header(REASON)) for r in dlq] == [(b"conflict", b"sequence-conflict")]
        schema = json.loads((SCHEMAS / "dead-letter-headers.schema.json").read_text())
        Draft202012Validator(schema).validate(schema_document(dlq[0].headers))
        # the given-up sequence arrives after all: routed to the late topic
        asyncio.run(publish(s.broker.bootstrap, s.ordered.input_topic, [event("gap", 3)]))
        late = wait_for(s, s.ordered.late_topic, lambda r: len(r) == 1, worker)
        assert late[0].header(REASON) == b"late-arrival" and late[0].value == event("gap", 3)[1]
        assert late[0].header("kafka_dlt-original-topic") == s.ordered.input_topic.encode()
        metrics = urllib.request.urlopen(
            f"http://127.0.0.1:{s.runtime.web_port}/metrics", timeout=10
        ).read()
        assert b"seqkeeper_gap_timeouts_total 1.0" in metrics
        assert b"seqkeeper_gaps_skipped_on_overflow_total 1.0" in metrics
        assert b'seqkeeper_late_arrivals_total{route="late"} 1.0' in metrics
        assert b'seqkeeper_dead_lettered_total{reason="sequence-conflict"} 1.0' in metrics
        assert b"seqkeeper_duplicates_dropped_total 0.0" in metrics
        assert b"seqkeeper_messages_buffered 0.0" in metrics
        # all processed: the lag gauge follows on the worker's next timer tick
        deadline = time.monotonic() + 10
        while True:
            metrics = urllib.request.urlopen(
                f"http://127.0.0.1:{s.runtime.web_port}/metrics", timeout=10
            ).read()
            lags = [
                line for line in metrics.splitlines() if line.startswith(b"seqkeeper_consumer_lag{")
            ]
            if lags and all(line.endswith(b" 0.0") for line in lags):
                break
            assert time.monotonic() < deadline, lags
            time.sleep(0.2)
    finally:
        assert worker.stop() == 0


def test_overflow_dlq_and_late_drop(make_settings, tmp_path) -> None:
    s, worker = start(
        make_settings,
        tmp_path,
        gap_timeout=3600.0,
        max_buffered_per_key=2,
        overflow_policy="dlq",
        late_policy="drop",
        first_seq="first-seen",
    )
    try:
        asyncio.run(
            publish(
                s.broker.bootstrap,
                s.ordered.input_topic,
                [
                    event("k", 10),
                    event("k", 12),
                    event("k", 13),
                    event("k", 14),  # 11 missing
                ],
            )
        )
        dlq = wait_for(s, s.ordered.dlq_topic, lambda r: len(r) == 1, worker)
        assert dlq[0].header(REASON) == b"buffer-overflow" and dlq[0].value == event("k", 14)[1]
        asyncio.run(
            publish(s.broker.bootstrap, s.ordered.input_topic, [event("k", 11), event("k", 14)])
        )
        ordered = wait_for(s, s.ordered.ordered_topic, lambda r: len(r) == 5, worker)
        assert seqs(ordered, "k") == [10, 11, 12, 13, 14]  # first-seen: the key starts at 10
    finally:
        assert worker.stop() == 0
