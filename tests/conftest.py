"""Shared fixtures. The broker is real, never a mock; in order of choice:
``KAFKA_BOOTSTRAP_SERVERS`` if set, else a fresh Apache Kafka started from
the distribution in ``KAFKA_HOME``, else a testcontainers Kafka if a Docker
engine answers within a second, else the embedded broker (Tansu)."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from seqkeeper.broker import EmbeddedBroker, KafkaBroker, LocalBroker, kafka_home_from_env
from seqkeeper.settings import EXAMPLE_HANDLERS, Settings
from tests.jvm_archive import ARCHIVE_OPTIONS, JVM_OPTIONS, SPARK_ARCHIVE, kafka_options

#: The JVMs the tests start (Spark sessions, ``seqkeeper compact``'s Spark,
#: Apache Kafka brokers) live minutes and run small jobs: most of their CPU
#: went to the optimizing JIT compiler and G1's threads, on two cores shared
#: by the test processes. The client compiler alone and the serial collector
#: cut that CPU by about a third; and Spark's JVMs (Kafka's too, with
#: ``KAFKA_HOME``) map the classes they load from the archives ``make test``
#: builds (tests/jvm_archive.py) instead of reading them from the jars,
#: which takes a third to a half of a start's CPU off. What the tests check
#: does not change (a variable already set is kept:
#: the bench, run by users, is not affected).
os.environ.setdefault("KAFKA_JVM_PERFORMANCE_OPTS", kafka_options(kafka_home_from_env()))
os.environ.setdefault(
    "SPARK_SUBMIT_OPTS",
    f"{JVM_OPTIONS} {ARCHIVE_OPTIONS}" if SPARK_ARCHIVE.exists() else JVM_OPTIONS,
)


@dataclass(frozen=True)
class Broker:
    bootstrap: str
    kind: str  # "external", "kafka" (KAFKA_HOME), "testcontainers" or "embedded"
    #: The broker process when this test run started it (it can be frozen).
    local: LocalBroker | None = None

    @property
    def is_tansu(self) -> bool:
        return self.kind == "embedded"


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=1).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield Broker(external, "external")
        return
    home = kafka_home_from_env()
    if home:
        with KafkaBroker(
            home, log_path=Path(tempfile.gettempdir()) / f"seqkeeper-test-kafka-{os.getpid()}.log"
        ) as kafka:
            yield Broker(kafka.bootstrap, "kafka", kafka)
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:4.1.0").with_kraft() as kafka:
            yield Broker(kafka.get_bootstrap_server(), "testcontainers")
        return
    with EmbeddedBroker() as embedded:
        yield Broker(embedded.bootstrap, "embedded", embedded)


@pytest.fixture
def make_settings(broker: Broker, names: dict[str, str], tmp_path: Path) -> Callable[..., Settings]:
    """Worker settings on the test broker with unique names; overrides by keyword."""

    def make(**overrides: object) -> Settings:
        base = Settings.of(
            bootstrap=broker.bootstrap,
            data_dir=tmp_path / "data",
            partitions=2,
            session_timeout=6.0,  # the embedded broker joins a group in half of it
            gap_timeout=120.0,
            handlers=EXAMPLE_HANDLERS,  # (read by the commands topology only)
            **names,
        )
        return base.with_overrides(**overrides)

    return make


@pytest.fixture
def names() -> Iterator[dict[str, str]]:
    """Unique topic names and app id, so tests share one broker safely."""
    tag = uuid.uuid4().hex[:8]
    yield {
        "app_id": f"app-{tag}",
        "input_topic": f"in-{tag}",
        "ordered_topic": f"ordered-{tag}",
        "deduped_topic": f"deduped-{tag}",
        "dlq_topic": f"dlq-{tag}",
        "late_topic": f"late-{tag}",
        "processed_topic": f"processed-{tag}",
        "command_topic": f"cmd-{tag}",
        "events_topic": f"ev-{tag}",
        "command_dlq_topic": f"cdlq-{tag}",
    }


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One Spark session (local[2]) for the whole test run."""
    import os
    import sys

    from pyspark.sql import SparkSession

    # Spark's Python workers must run this interpreter (it has our packages).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("seqkeeper-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    yield session
    session.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that talks to the test broker is an integration test, so
    ``-m integration`` selects exactly the broker-dependent ones (the CI's
    Apache Kafka pass)."""
    for item in items:
        if "broker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
    if hasattr(config, "workerinput"):  # an xdist worker: see pytest_xdist_make_scheduler
        # stable: a file's tests keep their order (and, but for a file
        # mixing unit and broker tests, stay together)
        items.sort(key=_longest_first)


#: Test files whose tests share one costly session fixture, run by one xdist
#: worker so that it is set up once (the bench's smoke run: every section).
SHARED_SESSION_DIRS = ("tests/bench/",)

#: The Spark session (a JVM of its own, started by the first test that asks
#: for the ``spark`` fixture in a process) is shared by this folder's files
#: that ask for it: one worker runs them all, so one session serves them.
SPARK_DIR = "tests/spark_sink/"


def _asks_for_spark(path: Path) -> bool:
    """Whether a test function of the file at ``path`` takes ``spark``."""
    import ast

    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test")
        and any(arg.arg == "spark" for arg in node.args.args)
        for node in ast.walk(ast.parse(path.read_text()))
    )


#: Files that take minutes though they hold few tests (one long run each):
#: they start first, so the run does not end waiting on one of them alone.
LONG_FILES = (
    "tests/bench/",
    "tests/verification/test_chaos.py",
    "tests/spark_sink/test_erasure_store.py",
    "tests/integration/test_committed_readers.py",
    "tests/spark_sink/test_rest_catalog.py",
    "tests/spark_sink/test_follow.py",
    "tests/spark_sink/test_iceberg.py",
    "tests/security/test_cli_tools_secured.py",
    "tests/security/test_roles.py",
    "tests/spark_sink/test_kill.py",
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n`` (pytest-xdist): a file's tests run on one worker, so a
    file's module fixtures (a secured broker, a worker) start once, and
    :data:`SHARED_SESSION_DIRS` run together, as do the files of
    :data:`SPARK_DIR` that use the in-process Spark session; in the order the workers
    collected them (:func:`pytest_collection_modifyitems`), not xdist's
    (most tests first)."""
    from xdist.scheduler import LoadScopeScheduling

    root = Path(config.rootpath)
    spark = {
        str(path.relative_to(root))
        for path in (root / SPARK_DIR).glob("test_*.py")
        if _asks_for_spark(path)
    }

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path in spark:
                return SPARK_DIR
            return next((d for d in SHARED_SESSION_DIRS if path.startswith(d)), path)

    config.option.loadscopereorder = False
    return ByFile(config, log)


def _longest_first(item: pytest.Item) -> tuple[int, bool]:
    """:data:`LONG_FILES` first, then the files of broker tests."""
    path = item.nodeid.split("::", 1)[0]
    long = next((i for i, f in enumerate(LONG_FILES) if path.startswith(f)), len(LONG_FILES))
    return long, item.get_closest_marker("integration") is None
