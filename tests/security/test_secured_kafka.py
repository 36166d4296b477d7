"""Every client over SASL_SSL with SCRAM-SHA-512, on Apache Kafka with the
StandardAuthorizer (tests/security/conftest.py): the worker processes a
workload and ``verify`` passes; a wrong password and an untrusted CA each
stop the worker and ``verify`` at once with one line saying what failed;
no log holds a password."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from seqkeeper.demo import publish, wait_until_verified
from seqkeeper.security import installed
from seqkeeper.settings import Settings
from seqkeeper.spark_sink.kafka_source import KafkaReader, read_kafka
from seqkeeper.topics import create_topics
from seqkeeper.verification.workload import generate
from seqkeeper.worker import WorkerProcess
from tests.secured_broker import SecuredKafkaBroker, make_tls_files

pytestmark = pytest.mark.integration

WRONG_PASSWORD = "not-the-admin-password-0451"


def run_cli(args: list[str], env: dict[str, str], log: Path) -> subprocess.CompletedProcess[str]:
    """``python -m seqkeeper ARGS``; its output is also kept in ``log``."""
    done = subprocess.run(
        [sys.executable, "-m", "seqkeeper", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log.write_text(done.stdout + done.stderr)
    return done


def verify_args(settings: Settings) -> list[str]:
    o = settings.ordered
    return [
        "verify",
        "-b",
        settings.broker.bootstrap,
        "--input-topic",
        o.input_topic,
        "--ordered-topic",
        o.ordered_topic,
        "--deduped-topic",
        o.deduped_topic,
        "--dlq-topic",
        o.dlq_topic,
        "--late-topic",
        o.late_topic,
    ]


def failed_worker(settings: Settings, log: Path) -> tuple[int, str, float]:
    """Run a worker that must fail: its exit code, log, and seconds taken."""
    started = time.monotonic()
    worker = WorkerProcess(settings, log).start()
    assert worker.proc is not None
    try:
        code = worker.proc.wait(90)
    finally:
        worker.stop()
    return code, worker.log(), time.monotonic() - started


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


def worker_error(settings: Settings, log: Path, code: int | None = 1) -> tuple[str, str]:
    """Run a worker that must fail fast (within 60 s, not the broker wait of
    30 s and more) with exit ``code`` (None: any but 0), no traceback and one
    ``error:`` line: that line, and the log."""
    got, text, took = failed_worker(settings, log)
    assert (got == code if code is not None else got != 0), (got, text[-3000:])
    assert took < 60, took
    assert "Traceback" not in text, text[-3000:]
    [line] = error_lines(text)
    return line, text


def worker_and_verify(settings: Settings, logs: Path, tag: str, env: dict[str, str]) -> None:
    """A worker processes a small workload over ``settings``' listener (exactly_once:
    the transactional producers connect too), then ``verify`` passes read_committed."""
    w = generate(messages=600, keys=12, malformed=3, seed=5)
    asyncio.run(create_topics(settings.broker.bootstrap, settings.topics(), 2))
    asyncio.run(publish(settings.broker.bootstrap, settings.ordered.input_topic, w.records))
    worker = WorkerProcess(settings, logs / f"worker{tag}.log").start()
    try:
        report = asyncio.run(wait_until_verified(settings, timeout=120, worker=worker))
        assert report.ok, [(c.name, c.count, c.detail) for c in report.failures()]
        assert report.ordered_records > 0
    finally:
        code = worker.stop()
    log = worker.log()
    assert code == 0, log[-3000:]
    assert "exactly_once" in log, log[-3000:]
    done = run_cli(
        [*verify_args(settings), "--isolation", "read_committed"], env, logs / f"verify{tag}.log"
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_the_worker_and_verify_over_sasl_ssl(
    secured_settings: Settings, secured_logs: Path
) -> None:
    worker_and_verify(secured_settings, secured_logs, "", dict(os.environ))


def test_a_wrong_password_fails_fast_with_one_line(
    secured_settings: Settings, secured_logs: Path
) -> None:
    settings = secured_settings.with_overrides(sasl_password=WRONG_PASSWORD)
    line, log = worker_error(settings, secured_logs / "worker-wrong-password.log")
    assert "authentication failed" in line, line
    assert settings.broker.bootstrap in line and "SCRAM-SHA-512" in line
    assert "retrying" not in log

    env = {**os.environ, **settings.to_env()}
    done = run_cli(verify_args(settings), env, secured_logs / "verify-wrong-password.log")
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()  # nothing else: no traceback, no warning
    assert line.startswith("error: ") and "authentication failed" in line, done.stderr


def test_an_untrusted_certificate_fails_fast_with_one_line(
    secured_settings: Settings, secured_logs: Path, tmp_path: Path
) -> None:
    other = make_tls_files(tmp_path / "other-ca")  # a CA that did not sign the broker's
    settings = secured_settings.with_overrides(ssl_cafile=str(other.ca))
    line, _ = worker_error(settings, secured_logs / "worker-untrusted.log")
    assert "certificate verify failed" in line, line

    env = {**os.environ, **settings.to_env()}
    done = run_cli(verify_args(settings), env, secured_logs / "verify-untrusted.log")
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "certificate verify failed" in line, done.stderr


def test_the_spark_source_over_sasl_ssl(
    spark: Any, secured_broker: SecuredKafkaBroker, secured_logs: Path
) -> None:
    """The Spark source takes the security as ``kafka.*`` options (not from
    the environment); the password is in no plan Spark shows."""
    admin = secured_broker.client_security()
    topic = f"spark-{uuid.uuid4().hex[:8]}"
    records = [(f"k{i % 5}".encode(), f"v{i}".encode()) for i in range(300)]
    with installed(admin):
        asyncio.run(create_topics(secured_broker.bootstrap, [topic], 2))
        asyncio.run(publish(secured_broker.bootstrap, topic, records))
    options = {
        "kafka.bootstrap.servers": secured_broker.bootstrap,
        "subscribe": topic,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.username": admin.username,
        "kafka.sasl.password": admin.password.reveal(),
        "kafka.ssl.cafile": admin.cafile,
    }
    df = read_kafka(spark, options)
    rows = df.select("key", "value").collect()
    assert sorted((r.key, r.value) for r in rows) == sorted(records)
    plans = df._jdf.queryExecution().toString() + str(df.explain(extended=True))
    (secured_logs / "spark-plan.log").write_text(plans)
    assert admin.password.reveal() not in plans
    # without the options, the source does not reach the SASL_SSL listener
    plain = {"kafka.bootstrap.servers": secured_broker.bootstrap, "subscribe": topic}
    with pytest.raises(Exception) as caught:
        KafkaReader(plain).partitions()
    assert admin.password.reveal() not in str(caught.value)
    # a JAAS config is refused, naming the accepted options
    # (Spark wraps the error: its text is ours, with no password)
    with pytest.raises(Exception, match="kafka.sasl.jaas.config is not supported") as refused:
        read_kafka(spark, {**options, "kafka.sasl.jaas.config": "x"}).collect()
    assert "kafka.sasl.username" in str(refused.value)
    assert admin.password.reveal() not in str(refused.value)


def test_no_log_holds_a_password(
    secured_broker: SecuredKafkaBroker, secured_logs: Path, audit_keys: tuple[str, str]
) -> None:
    """Runs last in this module: every log its tests wrote, and those of the
    modules before it (test_cli_tools_secured, test_mtls,
    test_sasl_mechanisms), and the broker's. Nor the client's private key
    (mTLS), whole or any line of it, nor an audit key (test_cli_tools_secured's
    rotation), whole or either half."""
    logs = sorted(p for p in secured_logs.rglob("*") if p.is_file())
    assert any(p.name == "kafka.log" for p in logs)
    passwords = [secured_broker.admin_password.reveal(), WRONG_PASSWORD]
    passwords += [part for key in audit_keys for part in (key, key[:22], key[22:])]
    assert secured_broker.tls is not None and secured_broker.tls.clients
    for client in secured_broker.tls.clients.values():
        key = client.key.read_text()
        passwords += [key, *(line for line in key.splitlines() if "PRIVATE KEY" not in line)]
    found = [
        (p.name, pw == WRONG_PASSWORD)
        for p in logs
        for pw in passwords
        if pw in p.read_text(errors="replace")
    ]
    assert not found, found
