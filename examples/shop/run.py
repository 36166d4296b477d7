"""The shop example end to end, with one command:

    python run.py

starts a broker (``seqkeeper broker``: the embedded one, or Apache Kafka
when KAFKA_HOME is set; none when KAFKA_BOOTSTRAP_SERVERS is set), the stub
payment service (payments.py), the worker with this directory's handlers
(``seqkeeper worker --topology commands --handlers orders:registry``),
sends the commands and prints the replies (client.py) and the charges, and
stops everything. The commands are signed: run.py makes a key pair, the
worker trusts its public key (SEQKEEPER_COMMAND_AUTH=jwt) and refuses an
unsigned command, or one signed for another tenant.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import client
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from seqkeeper.client import TokenSigner

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


def signing_key(folder: Path, key_id: str) -> tuple[Path, Path]:
    """A new EC P-256 key pair: the signer's private key, and the folder of
    the public keys the workers trust (``<kid>.pem``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    private = folder / "signer.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    private.chmod(0o600)
    trusted = folder / "trusted"
    trusted.mkdir()
    (trusted / f"{key_id}.pem").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, trusted


def main() -> int:
    topic = os.environ.get("SEQKEEPER_COMMAND_TOPIC", "commands.in")
    with (
        tempfile.TemporaryDirectory(prefix="seqkeeper-shop-") as tmp,
        contextlib.ExitStack() as running,
    ):
        logs = Path(tmp)
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            broker = running.enter_context(process([seqkeeper(), "broker"], logs / "broker.log"))
            ready = wait_for(r"KAFKA_BOOTSTRAP_SERVERS=(\S+)", logs / "broker.log", broker, 180)
            bootstrap = ready.group(1)
        print(f"broker at {bootstrap}")
        payments = running.enter_context(
            process([sys.executable, "payments.py", "--port", "0"], logs / "payments.log")
        )
        url = wait_for(r"payments at (\S+)", logs / "payments.log", payments, 30).group(1)
        print(f"stub payment service at {url}")
        private, trusted = signing_key(logs, "shop-1")
        env = {
            # shorter than the slow card's answer (5 s), so that call is retried
            "SEQKEEPER_HANDLER_TIMEOUT": "2",
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SEQKEEPER_DATA_DIR": str(logs / "data"),
            "PAYMENTS_URL": url,
            # only commands signed by a trusted key, for their own tenant
            "SEQKEEPER_COMMAND_AUTH": "jwt",
            "SEQKEEPER_JWT_KEYS": str(trusted),
        }
        command = [seqkeeper(), "worker", "--topology", "commands", "--handlers", "orders:registry"]
        worker = running.enter_context(process(command, logs / "worker.log", env))
        # printed once the worker has created its topics; it reads them from the start
        wait_for("seqkeeper worker: broker", logs / "worker.log", worker, 360)
        print(f"worker started: {' '.join(['seqkeeper', *command[1:]])} (signed commands only)\n")
        try:
            client.run(bootstrap, topic, signer=TokenSigner.from_file(private, "shop-1"))
        except TimeoutError as e:
            print(f"{e}; the worker's log ends:")
            print((logs / "worker.log").read_text(errors="replace")[-3000:])
            return 1
        with urllib.request.urlopen(f"{url}/charges") as answer:
            charges = json.load(answer)
        print("\ncharges (each once, whatever the retries):")
        for key, charge in sorted(charges.items()):
            print(
                f"  {key}: {charge['amount']} ({charge['chargeId']}, requests: {charge['calls']})"
            )
        print("stopping the worker, the payment service and the broker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
