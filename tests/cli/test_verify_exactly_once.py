"""``seqkeeper verify --isolation ... --exactly-once`` through the installed
command, on topics written here: a correct output whose records are repeated
byte-identically passes the plain verification (re-emissions are counted,
not failures) and fails the exactly-once one, naming the counts; on a broker
with transactions, the writes of an aborted transaction are seen by
read_uncommitted only."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.demo import publish
from seqkeeper.settings import Settings
from seqkeeper.topics import Record, create_topics
from seqkeeper.verification.workload import generate
from tests.cli.test_verify import expected_outputs
from tests.conftest import Broker

SCRIPT = str(Path(sys.executable).parent / "seqkeeper")
#: (key, value, headers) as a producer sends them
Out = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]


def verify(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``seqkeeper verify`` on ``settings``' topics, the installed script."""
    o = settings.ordered
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SEQKEEPER_", "KAFKA_"))}
    return subprocess.run(
        [
            SCRIPT,
            "verify",
            "--broker",
            settings.broker.bootstrap,
            *("--input-topic", o.input_topic, "--ordered-topic", o.ordered_topic),
            *("--deduped-topic", o.deduped_topic, "--dlq-topic", o.dlq_topic),
            *("--late-topic", o.late_topic),
            *args,
        ],
        env={**environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def report_of(result: subprocess.CompletedProcess[str]) -> dict:
    return orjson.loads(result.stdout)


def failing(doc: dict) -> dict[str, tuple[int, str]]:
    return {c["name"]: (c["count"], c["detail"]) for c in doc["checks"] if c["count"]}


def sent(records: Sequence[Record]) -> list[Out]:
    return [(r.key, r.value, r.headers) for r in records]


async def produce(
    bootstrap: str,
    by_topic: dict[str, list[Out]],
    transactional_id: str | None = None,
    abort: bool = False,
) -> None:
    """Send ``by_topic``'s records; with ``transactional_id``, in one
    transaction, committed or (``abort``) aborted."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, transactional_id=transactional_id
    )
    await producer.start()
    try:
        if transactional_id:
            await producer.begin_transaction()
        futures = [
            await producer.send(topic, v, key=k, headers=list(h) or None)
            for topic, records in by_topic.items()
            for k, v, h in records
        ]
        await asyncio.gather(*futures)
        if transactional_id:
            await (producer.abort_transaction() if abort else producer.commit_transaction())
    finally:
        await producer.stop()


@pytest.fixture
def topics(make_settings: Callable[..., Settings]) -> tuple[Settings, list[Out], list, list, list]:
    """Settings with created topics (one partition: the order is the
    publish order), the input published, and the correct outputs (not
    published): ordered, deduped, dead letters."""
    settings = make_settings(partitions=1)
    asyncio.run(
        create_topics(settings.broker.bootstrap, settings.topics(), settings.broker.partitions)
    )
    w = generate(messages=300, keys=10, malformed=6, seed=11)
    inputs = [Record("in", 0, i, k, v, (), 0) for i, (k, v) in enumerate(w.records)]
    ordered, deduped, dlq = expected_outputs(inputs)
    assert ordered and deduped and dlq  # (each output is checked)
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, w.records))
    return settings, sent(inputs), sent(ordered), sent(deduped), sent(dlq)


def outputs(settings: Settings, ordered: list[Out], deduped: list[Out], dlq: list[Out]) -> dict:
    o = settings.ordered
    return {o.ordered_topic: ordered, o.deduped_topic: deduped, o.dlq_topic: dlq}


def test_identical_repeats_pass_verify_and_fail_exactly_once(topics) -> None:
    settings, _, ordered, deduped, dlq = topics
    bootstrap = settings.broker.bootstrap
    asyncio.run(produce(bootstrap, outputs(settings, ordered, deduped, dlq)))
    clean = verify(settings, "--exactly-once")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "PASSED" in clean.stdout and "read_committed, exactly-once" in clean.stdout
    # re-emitted, byte-identical: 3 ordered, 2 deduped, 1 dead letter
    asyncio.run(produce(bootstrap, outputs(settings, ordered[5:8], deduped[:2], dlq[-1:])))
    plain = verify(settings, "--json")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    doc = report_of(plain)
    assert doc["ok"] is True and doc["isolation"] == "read_committed"  # (the default)
    assert doc["reemitted"] == {"ordered": 3, "deduped": 2, "dlq": 1}
    assert failing(doc) == {}
    strict = verify(settings, "--exactly-once", "--json")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    doc = report_of(strict)
    assert doc["ok"] is False
    assert failing(doc) == {"exactly-once: re-emitted": (6, "ordered 3, deduped 2, dlq 1")}
    table = verify(settings, "--exactly-once")
    assert table.returncode == 1, table.stdout + table.stderr
    assert "exactly-once: re-emitted" in table.stdout
    assert "ordered 3, deduped 2, dlq 1" in table.stdout and "FAILED" in table.stdout


def test_the_isolation_is_a_choice() -> None:
    wrong = verify(Settings.of(bootstrap="127.0.0.1:1"), "--isolation", "read_uncommited")
    assert wrong.returncode == 2
    assert "read_uncommitted" in wrong.stderr and "read_committed" in wrong.stderr


def test_read_committed_sees_every_plain_write(broker: Broker, topics) -> None:
    """Plain (non-transactional) writes are committed: read_committed reads
    the same report as read_uncommitted, on either broker (the embedded
    broker's ListOffsets is short: the fetch's last stable offset is not)."""
    settings, _, ordered, deduped, dlq = topics
    asyncio.run(produce(settings.broker.bootstrap, outputs(settings, ordered, deduped, dlq)))
    committed = verify(settings, "--isolation", "read_committed", "--exactly-once", "--json")
    uncommitted = verify(settings, "--isolation", "read_uncommitted", "--json")
    assert uncommitted.returncode == 0, uncommitted.stdout + uncommitted.stderr
    assert committed.returncode == 0, failing(report_of(committed))
    a, b = report_of(committed), report_of(uncommitted)
    assert a["isolation"] == "read_committed"
    for field in ("input_records", "ordered_records", "deduped_records", "dead_lettered"):
        assert a[field] == b[field], field


def test_aborted_writes_are_seen_by_read_uncommitted_only(broker: Broker, topics) -> None:
    """A transactional writer's outputs, committed, then a repeat of some of
    them and one more record in a transaction that is aborted."""
    if broker.is_tansu:
        pytest.skip("the embedded broker has no transactions")
    settings, _, ordered, deduped, dlq = topics
    bootstrap = settings.broker.bootstrap
    tid = f"verify-test-{uuid.uuid4().hex[:8]}"
    # the last ordered record is written only in the aborted transaction
    committed = outputs(settings, ordered[:-1], deduped, dlq)
    asyncio.run(produce(bootstrap, committed, tid))
    aborted = outputs(settings, ordered[-4:], deduped[:3], dlq[:1])
    asyncio.run(produce(bootstrap, aborted, tid, abort=True))
    # read_committed: no repeat, but the aborted record is missing
    rc = verify(settings, "--isolation", "read_committed", "--exactly-once", "--json")
    assert rc.returncode == 1
    doc = report_of(rc)
    assert doc["reemitted"] == {"ordered": 0, "deduped": 0, "dlq": 0}
    assert set(failing(doc)) == {"ordered: lost"}, failing(doc)
    assert failing(doc)["ordered: lost"][0] == 1
    # read_committed is the default: the aborted writes are not read
    default = verify(settings, "--exactly-once", "--json")
    assert report_of(default)["isolation"] == "read_committed"
    assert set(failing(report_of(default))) == {"ordered: lost"}, failing(report_of(default))
    # read_uncommitted, asked for: the aborted writes count, as re-emissions and output
    ru = verify(settings, "--isolation", "read_uncommitted", "--json")
    assert ru.returncode == 0, failing(report_of(ru))
    assert report_of(ru)["reemitted"] == {"ordered": 3, "deduped": 3, "dlq": 1}
    strict = verify(settings, "--isolation", "read_uncommitted", "--exactly-once", "--json")
    assert strict.returncode == 1
    assert failing(report_of(strict)) == {
        "exactly-once: re-emitted": (7, "ordered 3, deduped 3, dlq 1")
    }
    # the missing record committed: read_committed passes exactly-once
    asyncio.run(produce(bootstrap, outputs(settings, ordered[-1:], [], []), tid))
    done = verify(settings, "--isolation", "read_committed", "--exactly-once", "--json")
    assert done.returncode == 0, failing(report_of(done))
    assert report_of(done)["reemitted"] == {"ordered": 0, "deduped": 0, "dlq": 0}
