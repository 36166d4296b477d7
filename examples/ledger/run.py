"""The ledger example end to end, with one command:

    python run.py

starts a broker (``seqkeeper broker``: the embedded one, or Apache Kafka
when KAFKA_HOME is set; none when KAFKA_BOOTSTRAP_SERVERS is set), the
worker with this directory's processor (``seqkeeper worker --processor
balances:post``), sends the postings (produce.py), prints the outputs
(read.py) and stops everything. Exit 0 when every output came.
"""

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import produce
import read

HERE = Path(__file__).resolve().parent


def seqkeeper() -> str:
    """The ``seqkeeper`` command of this Python's environment, else PATH's."""
    beside = Path(sys.executable).parent / "seqkeeper"
    found = str(beside) if beside.exists() else shutil.which("seqkeeper")
    if not found:
        sys.exit("seqkeeper is not installed: run this with the Python that has it")
    return found


@contextlib.contextmanager
def process(args: list[str], log: Path, env: dict[str, str] | None = None):
    """``args`` running in this directory, output to ``log``; stopped on
    exit like Ctrl-C would (SIGTERM: the worker commits and closes its state)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=HERE, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for(pattern: str, log: Path, proc: subprocess.Popen, timeout: float) -> re.Match:
    """The first match of ``pattern`` in ``log``; exits if ``proc`` ends first."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace")
        if match := re.search(pattern, text):
            return match
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"{' '.join(proc.args[1:])} did not get ready; its output:\n{text[-3000:]}")
        time.sleep(0.2)


def main() -> int:
    input_topic = os.environ.get("SEQKEEPER_INPUT_TOPIC", "events.in")
    processed_topic = os.environ.get("SEQKEEPER_PROCESSED_TOPIC", "events.processed")
    with (
        tempfile.TemporaryDirectory(prefix="seqkeeper-ledger-") as tmp,
        contextlib.ExitStack() as running,
    ):
        logs = Path(tmp)
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            broker = running.enter_context(process([seqkeeper(), "broker"], logs / "broker.log"))
            ready = wait_for(r"KAFKA_BOOTSTRAP_SERVERS=(\S+)", logs / "broker.log", broker, 180)
            bootstrap = ready.group(1)
        print(f"broker at {bootstrap}")
        env = {
            # so that bob's missing posting is given up soon (default 5 s)
            "SEQKEEPER_GAP_TIMEOUT": "3",
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SEQKEEPER_DATA_DIR": str(logs / "data"),
        }
        worker = running.enter_context(
            process(
                [seqkeeper(), "worker", "--processor", "balances:post"], logs / "worker.log", env
            )
        )
        # printed once the worker has created its topics; it reads them from the start
        wait_for("seqkeeper worker: broker", logs / "worker.log", worker, 360)
        print("worker started: seqkeeper worker --processor balances:post")
        sent = asyncio.run(produce.send(bootstrap, input_topic))
        print(f"sent {sent} records to {input_topic}: shuffled, a third twice, bob's seq 4 never")
        print(f"waiting for the outputs on {processed_topic} (bob's gap takes the gap timeout) ...")
        expected = produce.expected_outputs()
        outputs = asyncio.run(read.collect(bootstrap, processed_topic, expect=expected))
        for doc in outputs:
            print("  " + read.describe(doc))
        print(read.balances(outputs))
        if len(outputs) < expected:
            print(f"only {len(outputs)} of {expected} outputs; the worker's log ends:")
            print((logs / "worker.log").read_text(errors="replace")[-3000:])
            return 1
        print("stopping the worker and the broker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
