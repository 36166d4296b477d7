"""The order saga end to end, with one command:

    python run.py

starts a broker (``seqkeeper broker``: the embedded one, or Apache Kafka
when KAFKA_HOME is set; none when KAFKA_BOOTSTRAP_SERVERS is set), the
command worker with this directory's handlers (``seqkeeper worker
--topology commands --handlers handlers:registry``), the saga's worker
(``seqkeeper worker --processor saga:step``), places the orders
(orders.py), prints how each ended, and stops everything. Exit 0 when
every order ended as expected.
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
import urllib.error
import urllib.request
from pathlib import Path

import orders

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


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    """Until the worker whose web server is at ``url`` answers ``GET /ready``
    with 200 (it joined its group and its state is restored): orders placed
    before then wait in the topic, and a slow start would eat into the time
    their outcomes are given."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url.rstrip('/')}/ready", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass  # (503 while it starts, or not listening yet)
        if proc.poll() is not None or time.monotonic() > deadline:
            text = log.read_text(errors="replace")
            sys.exit(f"{' '.join(proc.args[1:])} did not get ready; its output:\n{text[-3000:]}")
        time.sleep(0.5)


def main() -> int:
    events = os.environ.get("SEQKEEPER_INPUT_TOPIC", "saga.events")
    commands = os.environ.get("SEQKEEPER_COMMAND_TOPIC", "commands.in")
    outcomes = os.environ.get("SEQKEEPER_PROCESSED_TOPIC", "orders.outcomes")
    with (
        tempfile.TemporaryDirectory(prefix="seqkeeper-saga-") as tmp,
        contextlib.ExitStack() as running,
    ):
        logs = Path(tmp)
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            broker = running.enter_context(process([seqkeeper(), "broker"], logs / "broker.log"))
            ready = wait_for(r"KAFKA_BOOTSTRAP_SERVERS=(\S+)", logs / "broker.log", broker, 180)
            bootstrap = ready.group(1)
        print(f"broker at {bootstrap}")
        both = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SEQKEEPER_APP_ID": os.environ.get("SEQKEEPER_APP_ID", "saga"),
            "SEQKEEPER_COMMAND_TOPIC": commands,
        }
        command_env = {
            **both,
            # the handlers' events go to the saga's input
            "SEQKEEPER_EVENTS_TOPIC": events,
            "SEQKEEPER_DATA_DIR": str(logs / "commands"),
        }
        saga_env = {
            **both,
            "SEQKEEPER_INPUT_TOPIC": events,
            "SEQKEEPER_KEY_FIELD": "correlationId",  # the saga: the order
            "SEQKEEPER_SEQ_FIELD": "data.step",  # its steps, in order
            "SEQKEEPER_PROCESSOR_TOPICS": commands,  # where its commands may go
            "SEQKEEPER_PROCESSED_TOPIC": outcomes,
            "SEQKEEPER_DATA_DIR": str(logs / "saga"),
        }
        handlers = ["worker", "--topology", "commands", "--handlers", "handlers:registry"]
        command_worker = running.enter_context(
            process([seqkeeper(), *handlers], logs / "commands.log", command_env)
        )
        saga = running.enter_context(
            process(
                [seqkeeper(), "worker", "--processor", "saga:step"], logs / "saga.log", saga_env
            )
        )
        # printed once each worker has created its topics
        started = [(command_worker, logs / "commands.log"), (saga, logs / "saga.log")]
        for proc, log in started:
            web = wait_for(r"seqkeeper worker: broker .* web (http://\S+)", log, proc, 360)
            wait_ready(web.group(1), proc, log, 360)
        print("workers started: seqkeeper worker --topology commands --handlers handlers:registry")
        print("                 seqkeeper worker --processor saga:step")
        sent = asyncio.run(orders.place(bootstrap, events))
        print(f"placed {sent} orders on {events}; waiting for each to end ...")
        want = orders.expected()
        ended = asyncio.run(orders.outcomes(bootstrap, outcomes, expect=len(want)))
        for order_id, sku, quantity, account, amount in orders.ORDERS:
            print(f"  {order_id}  {quantity} x {sku:5}  {amount:>3} from {account:5}  "
                  f"{ended.get(order_id, '(not ended)')}")  # fmt: skip
        if ended != want:
            print(f"expected {want}; the saga's log ends:")
            print((logs / "saga.log").read_text(errors="replace")[-3000:])
            return 1
        print("stopping the workers and the broker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
