"""The benchmark harness works (a seconds-long smoke run); never a speed
threshold — performance is proven by `seqkeeper bench`, not by tests."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from seqkeeper.adapter.producer import BatchProducer
from seqkeeper.bench.measure import LATENCY_LINGER_MS, _latency_figure
from seqkeeper.bench.report import write
from seqkeeper.bench.rig import _paced, worker_fetch_wait_ms, workload
from seqkeeper.bench.sections.soak import SOAK_SEQS
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics, read_topic
from tests.bench.conftest import SESSION_TIMEOUT, TINY, Smoke
from tests.bench.conftest import figure as named

pytestmark = pytest.mark.integration


def test_workload_shape() -> None:
    records, distinct = workload(2_000, 100, late=0.2, window=50, dup=0.05)
    ids = [orjson.loads(v)["messageId"] for _, v in records]
    assert distinct == 2_000 == len(set(ids))
    assert 0.03 < (len(ids) - distinct) / distinct < 0.07  # about 5% duplicated
    late = 0
    last: dict[bytes | None, int] = {}
    for k, v in records:
        seq = orjson.loads(v)["seq"]
        late += seq < last.get(k, 0)
        last[k] = max(seq, last.get(k, 0))
    assert 0.05 < late / distinct < 0.3  # out of order within their key
    assert 150 < len(v) < 250  # ~200-byte JSON


def test_latency_figure_keeps_each_seconds_p99() -> None:
    # second 0: 1..100 ms, second 1: 101..200 ms, sent in a shuffled order
    measured = [(ms / 1000, (ms - 1) // 100 + 0.5) for ms in range(1, 201)]
    measured = measured[1::2] + measured[::2]
    figure = _latency_figure("latency p99", measured)
    assert figure.value == pytest.approx(199.0)  # of all 200
    assert figure.detail["p50"] == pytest.approx(101.0)
    assert figure.detail["p99 per second"] == pytest.approx([100.0, 200.0])


def test_paced_input_is_every_record_in_key_order_and_not_ahead_of_its_rate(broker) -> None:
    topic, n, rate, keys = f"paced-{uuid.uuid4().hex[:6]}", 400, 2_000.0, 7
    sent: dict[bytes, float] = {}

    async def main() -> float:
        await create_topics(broker.bootstrap, [topic], 3)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            t0, first = time.monotonic(), time.time()
            await _paced(BatchProducer(lambda: producer), topic, rate, n, keys, sent, t0, first)
            return time.monotonic() - t0
        finally:
            await producer.stop()

    took = asyncio.run(main())
    assert took >= (n - 1) / rate  # paced: the last record is not sent before it is due
    got = asyncio.run(read_topic(broker.bootstrap, topic))
    assert sorted(r.value for r in got) == sorted(sent) and len(sent) == n
    # each stamped with when it was due: 1 / rate apart, in send order
    stamps = sorted(sent.values())
    assert stamps[-1] - stamps[0] == pytest.approx((n - 1) / rate)
    seqs: dict[bytes | None, list[int]] = {}
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):
        seqs.setdefault(r.key, []).append(orjson.loads(r.value)["seq"])
    assert len(seqs) == keys
    assert all(s == list(range(1, len(s) + 1)) for s in seqs.values())  # in order per key


def test_smoke_run_writes_every_figure(broker, smoke: Smoke, tmp_path) -> None:
    bench, result = smoke
    assert result["failed"] == [], [f["detail"] for f in result["figures"] if not f["value"]]
    names = [f["name"] for f in result["figures"]]
    for expected in (
        "limit",
        "peer",
        "seqkeeper:",
        "seqkeeper, latency p99",
        "plain aiokafka, latency p99",
        "limit + write-ahead, latency p99",
        "buffered on one key",
        "restart to first output",
        "restart after kill -9 to first output of new input",
        "peak RSS",
        "Spark data source",
        "compaction",
        "failover, assignment to first new output",
        "failover, kill -9 to the survivor's assignment",
        "two workers, 1 standby replica",
        "CPU per standby changelog record applied",
    ):
        assert any(expected in n for n in names), expected
    # (the standbys' CPU per record is a difference of two pairs' CPU: at
    # this size it is noise, of either sign; the quix section's CPU per
    # record, over a tiny run's window, can be shorter than a CPU tick: 0)
    assert all(f["value"] > 0 for f in result["figures"] if "CPU per" not in f["name"])
    assert {r["name"] for r in result["ratios"]} >= {"seqkeeper / limit", "seqkeeper / peer"}
    # two rounds of limit and seqkeeper: the ratio is the median of the rounds'
    to_limit = next(r for r in result["ratios"] if r["name"] == "seqkeeper / limit")
    assert len(to_limit["detail"]["rounds"]) == 2
    # the limit's target is the broker's: Apache Kafka's higher than the embedded one's
    if broker.kind in ("kafka", "embedded"):
        assert to_limit["target"] == {"kafka": "≥ 0.75", "embedded": "≥ 0.5"}[broker.kind]
    assert to_limit["value"] == pytest.approx(sum(to_limit["detail"]["rounds"]) / 2)
    ours = next(f for f in result["figures"] if f["name"].startswith("seqkeeper:"))
    assert len(ours["detail"]["rounds"]) == 2 and ours["value"] in ours["detail"]["rounds"]
    # the peer runs once: its ratio is to the seqkeeper run right after it
    peer = next(f for f in result["figures"] if f["name"].startswith("peer:"))
    to_peer = next(r for r in result["ratios"] if r["name"] == "seqkeeper / peer")
    assert to_peer["detail"]["seqkeeper"] == ours["detail"]["rounds"][0]
    assert to_peer["value"] == pytest.approx(ours["detail"]["rounds"][0] / peer["value"])
    # every latency pipeline: the same input producer, the worker's fetch wait
    lat = next(f for f in result["figures"] if f["name"].startswith("seqkeeper, latency p99"))
    floor = next(f for f in result["figures"] if "plain aiokafka, latency" in f["name"])
    ahead = next(f for f in result["figures"] if "write-ahead, latency" in f["name"])
    wait = Settings.of(bootstrap="-").runtime.fetch_wait_ms()
    for figure in (lat, floor, ahead):
        assert len(figure["detail"]["rounds"]) == 2
        assert figure["detail"]["producer linger ms"] == LATENCY_LINGER_MS
        assert figure["detail"]["fetch max wait ms"] == wait
        assert 1 <= len(figure["detail"]["p99 per second"]) <= TINY.latency_seconds + 1
    # the write-ahead pipeline wrote its changelog: a record per message it passed on
    assert (
        len(asyncio.run(read_topic(broker.bootstrap, ahead["detail"]["changelog"])))
        > ahead["detail"]["n"]
    )
    # seqkeeper and the peer in the limit's unit: input records per second
    # (duplicates included), not distinct outputs per second
    per_output = len(bench.records) / bench.distinct
    assert per_output > 1
    for figure in (ours, peer):
        assert figure["value"] == pytest.approx(figure["detail"]["outputs per s"] * per_output)
    # buffer depth: timed from the start of the workload's publication, so
    # every ordered output of the workload is counted
    for depth in [f for f in result["figures"] if "buffered on one key" in f["name"]]:
        assert depth["detail"]["counted"] == TINY.messages
        assert len(depth["detail"]["rounds"]) == 2 and depth["value"] in depth["detail"]["rounds"]
    to_shallow = next(r for r in result["ratios"] if r["name"].endswith("/ 10 buffered"))
    assert len(to_shallow["detail"]["rounds"]) == 2
    # the soak: at each round's peak the state holds that round's keys only
    # (a key state, and per message a seen id, its FIFO entry and at most a
    # buffer entry), never the keys of the rounds before, locally or in the
    # compacted changelog
    soak = [r for r in result["ratios"] if r["name"].startswith("soak:")]
    assert len(soak) == 3
    rounds = soak[0]["detail"]["rounds"]
    assert len(rounds) == TINY.soak_rounds
    one_round = TINY.soak_keys * (1 + 3 * SOAK_SEQS)
    for r in rounds:
        assert TINY.soak_keys <= r["rocksdb"]["entries"] <= one_round, r
        assert TINY.soak_keys <= r["changelog"]["records"] <= one_round, r
    paths = write(result, tmp_path / "results")
    assert json.loads((tmp_path / "results" / "latest.json").read_text())["machine"]["cpus"] >= 1
    assert {p.name for p in paths} >= {"latest.json", "throughput.png", "latency_cdf.png"}


def test_restart_after_kill_9_replays_the_changelog_after_the_local_offsets(
    broker, smoke: Smoke
) -> None:
    """The kill -9 figure's detail: per partition, the restart replayed
    exactly the changelog records after the offset the local state held
    (read from the changelog here, not from the figure), and its phases
    come in their order; never a number of seconds."""
    _, result = smoke
    clean = named(result, "restart to first output")
    killed = named(result, "restart after kill -9 to first output of new input")
    assert "kill -9" not in clean["name"]
    d = killed["detail"]
    assert d["local state kept"], d["log"]
    topic = d["changelog"]
    offsets: dict[int, list[int]] = {p: [] for p in range(TINY.partitions)}
    for record in asyncio.run(read_topic(broker.bootstrap, topic)):
        offsets[record.partition].append(record.offset)
    assert set(d["partitions"]) == {str(p) for p in offsets}
    for p, part in d["partitions"].items():
        # the changelog as it was at the restart (the restarted worker writes more)
        records = [o for o in offsets[int(p)] if o < part["changelog end"]]
        assert part["changelog end"] == (records[-1] + 1 if records else 0)
        after = [o for o in records if o > part["local offset"]]
        assert part["count"] == part["tail"] == len(after), (p, part)
        if after:
            assert (part["first"], part["last"]) == (after[0], after[-1]), (p, part)
        else:
            assert part["local"] == part["local offset"], (p, part)
        assert part["recoveries"] == 1, (p, part)
    assert d["replayed the tail"] and d["replayed"] == d["tail"]
    ends = {int(p): part["changelog end"] for p, part in d["partitions"].items()}
    assert d["changelog records"] == sum(
        len([o for o in offsets[p] if o < ends[p]]) for p in offsets
    )
    assert set(d["looked at"]) == set(d["partitions"])
    assert d["read again after the restart, at least"] >= 0, d  # (at-least-once commits after)
    steps = d["phases s"]
    assert steps["assignments"] == 1
    order = ["joining", "joined", "synced", "assigned", "recovered", "scanned", "ready"]
    assert [steps[k] for k in order] == sorted(steps[k] for k in order), steps
    assert steps["ready"] <= steps["first output"] <= steps["first new output"], steps
    assert steps["first new output"] == killed["value"]


def test_failover_to_a_standby_replays_only_what_its_copy_lacked(broker, smoke: Smoke) -> None:
    """The failover figures' detail, read against the changelog: with a
    standby replica, each partition the survivor took over replayed the
    records after its copy's offset up to the changelog's end at the kill,
    and its copy held at least the state built before the input flowed
    (never the whole partition); without one, the whole partition. Never a
    number of seconds."""
    _, result = smoke
    for replicas in (1, 0):
        took = named(
            result,
            f"failover, assignment to first new output on every moved partition, {replicas} standby",
        )
        session = named(
            result, f"failover, kill -9 to the survivor's assignment, {replicas} standby"
        )
        d = took["detail"]
        assert 0 < len(d["moved partitions"]) < TINY.partitions, d
        assert set(d["partitions"]) == {str(p) for p in d["moved partitions"]}
        offsets: dict[int, list[int]] = {p: [] for p in range(TINY.partitions)}
        for record in asyncio.run(read_topic(broker.bootstrap, d["changelog"])):
            offsets[record.partition].append(record.offset)
        for p, part in d["partitions"].items():
            # the changelog as A left it (B writes more once it has the partition)
            end = part["changelog end at the kill"]
            records = [o for o in offsets[int(p)] if o < end]
            assert records and end == records[-1] + 1, (p, part)
            built = [o for o in records if o < part["changelog end before the flow"]]
            assert 0 < len(built) < len(records), (p, part)  # the flow wrote more
            assert part["recoveries"] >= 1, (p, part)
            if replicas:
                held = part["standby offset"]
                assert held >= built[-1], (p, part)  # the copy had the state built
                after = [o for o in records if o > held]
                assert part["replayed"] == len(after) < len(records) - len(built), (p, part)
                if after:
                    assert (part["first"], part["last"]) == (after[0], after[-1]), (p, part)
                else:
                    assert part["local"] == records[-1], (p, part)
            else:  # the whole partition; its first record (the state format
                # marker) can be local already: under load B may hold the
                # partition for a moment before the two settle, and mark it
                assert part["first"] in records[:2], (p, part)
                after = [o for o in records if o >= part["first"]]
                assert part["replayed"] == len(after), (p, part)
                assert part["last"] == records[-1], (p, part)
            assert part["re-emitted outputs before it"] >= 0
        assert d["replayed"] == sum(v["replayed"] for v in d["partitions"].values())
        if replicas:
            assert d["standby caught up before the flow"] is True, d
        steps = d["phases s"]
        assert 0 < steps["assigned"] <= steps["first new output, every partition"], steps
        assert session["value"] == steps["assigned"]
        assert session["detail"]["session timeout s"] == SESSION_TIMEOUT
        assert took["value"] == max(
            v["first new output s after assignment"] for v in d["partitions"].values()
        )


def test_standby_cost_counts_the_standby_records_each_worker_applied(smoke: Smoke) -> None:
    """The standby-cost pair: with a standby replica, the two workers'
    standbys applied every changelog record between them (each the other's
    partitions); without one, none. Never a rate."""
    _, result = smoke
    one = named(result, "two workers, 1 standby replica")["detail"]
    none = named(result, "two workers, 0 standby replicas")["detail"]
    assert one["counted"] == none["counted"] == TINY.messages
    # (each pair's own changelog, read once it stood still: how many records
    # the same workload writes depends on where the worker's batches end)
    assert one["changelog records"] > 0 and none["changelog records"] > 0
    assert one["standby records applied"] == one["changelog records"], one
    assert all(n > 0 for n in one["standby records applied per worker"]), one
    assert none["standby records applied"] == 0, none
    assert all(c > 0 for c in one["CPU s per worker"] + none["CPU s per worker"])


def test_a_latency_figure_records_the_fetch_wait_its_worker_resolves() -> None:
    s = Settings.of(bootstrap="-", fetch_max_wait="auto")
    assert worker_fetch_wait_ms(s.with_overrides(processing_guarantee="exactly_once")) == 500
    assert worker_fetch_wait_ms(s.with_overrides(processing_guarantee="at_least_once")) == 20
    assert worker_fetch_wait_ms(s.with_overrides(processing_guarantee="auto")) == "auto"
    assert worker_fetch_wait_ms(s.with_overrides(fetch_max_wait=0.1)) == 100
