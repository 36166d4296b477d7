"""A sync ordered processor that blocks longer than the session timeout on
one message: it runs in a worker thread, so the worker keeps its
heartbeats and its partitions, other keys keep flowing, and the blocked
call counts as timed out (SEQKEEPER_HANDLER_TIMEOUT) and is retried once it
has returned."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest

from seqkeeper.demo import publish
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess

pytestmark = pytest.mark.integration

SESSION = 6.0  # the least a broker allows by default (group.min.session.timeout.ms)
SLEEP = 1.5 * SESSION

PROCESSOR = """
import os, pathlib, time

MARK = pathlib.Path(os.environ["SLOW_MARK"])


def fn(state, message):
    if message.key == "slow" and not MARK.exists():  # the first call on it only
        MARK.write_text("started")
        time.sleep(float(os.environ["SLOW_SLEEP"]))
        MARK.write_text("returned")
    return (state or 0) + 1, [message.key]
"""


def event(key: str) -> tuple[bytes, bytes]:
    return key.encode(), orjson.dumps({"messageId": f"{key}-1", "seq": 1, "type": "t"})


def test_a_blocking_sync_processor_costs_no_membership(
    make_settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "slow_processor.py").write_text(PROCESSOR)
    mark = tmp_path / "mark"
    monkeypatch.setenv("SLOW_MARK", str(mark))
    monkeypatch.setenv("SLOW_SLEEP", str(SLEEP))
    s = make_settings(
        processor="slow_processor:fn",
        session_timeout=SESSION,
        handler_timeout=1.0,
        command_retry_delay=0.2,
        timer_interval=0.2,
    )
    bootstrap, topic = s.broker.bootstrap, s.ordered.input_topic
    asyncio.run(create_topics(bootstrap, s.topics(), s.broker.partitions))
    worker = WorkerProcess(s, tmp_path / "worker.log", cwd=project).start()

    def outputs() -> list[str]:
        records = asyncio.run(read_topic(bootstrap, s.ordered.processed_topic))
        return [orjson.loads(r.value or b"")["data"] for r in records]

    def wait(done, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            worker.check_alive()
            assert time.monotonic() < deadline, (what, worker.log()[-3000:])
            time.sleep(0.1)

    try:
        worker.wait_ready()
        assignments = worker.log().count("looked at")  # one line per partition assigned
        assert assignments >= 1
        asyncio.run(publish(bootstrap, topic, [event("slow")]))
        wait(mark.exists, "the slow call started")
        others = [f"k{i}" for i in range(8)]
        asyncio.run(publish(bootstrap, topic, [event(k) for k in others]))
        wait(lambda: set(others) <= set(outputs()), "the other keys processed")
        # ... while the slow call still sleeps: the event loop was never blocked
        assert mark.read_text() == "started"
        wait(lambda: "slow" in outputs(), "the slow message, retried", timeout=SLEEP + 60)
        assert mark.read_text() == "returned"
        assert sorted(outputs()) == sorted([*others, "slow"])  # the dropped call's result too
        log = worker.log()
        assert "ran past SEQKEEPER_HANDLER_TIMEOUT (1 s)" in log
        time.sleep(SESSION)  # a lost session would show by now
        log = worker.log()
        assert log.count("looked at") == assignments, log[-3000:]  # never revoked or assigned
    finally:
        assert worker.stop() == 0
