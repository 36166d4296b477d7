"""tests/kafka_tools: the commands of one Kafka tool run in one JVM as
they would one by one through its script: each runs (one that exits 0, as
after ``--version``, ends only its own run), and one that fails fails the
batch with its output."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from seqkeeper.broker import kafka_home_from_env
from tests import kafka_tools
from tests.kafka_tools import main_class, run_commands


def test_the_main_class_is_read_from_the_tools_script(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "kafka-acls.sh"
    script.write_text('#!/bin/bash\nexec $(dirname $0)/kafka-run-class.sh org.x.AclCommand "$@"\n')
    assert main_class(tmp_path, "kafka-acls.sh") == "org.x.AclCommand"
    script.write_text("#!/bin/bash\nexec java -jar x.jar\n")
    with pytest.raises(ValueError, match="does not call kafka-run-class.sh"):
        main_class(tmp_path, "kafka-acls.sh")


@pytest.fixture(params=["batch", "one by one"])
def kafka_home(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The distribution of KAFKA_HOME; each command in one JVM, or (a Java
    runtime without the compiler module) through its script."""
    home = kafka_home_from_env()
    if home is None:
        pytest.skip("KAFKA_HOME is not set: the tools are Apache Kafka's")
    if request.param == "one by one":
        monkeypatch.setattr(kafka_tools, "_runs_source", lambda java: False)
    else:
        assert kafka_tools._runs_source(kafka_tools._java())
    yield home


def test_each_command_runs_and_a_failure_fails_the_batch(kafka_home: Path) -> None:
    version = ["kafka-acls.sh", "--version"]  # (prints it and exits 0)
    run_commands(kafka_home, [version, version, version])
    missing = ["kafka-acls.sh", "--bootstrap-server", "127.0.0.1:1", "--list"]
    missing += ["--command-config", str(kafka_home / "no-such-file.properties")]
    with pytest.raises(AssertionError, match="no-such-file"):
        run_commands(kafka_home, [version, missing, version])
