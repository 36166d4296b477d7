"""``seqkeeper contracts``, black-box: the AsyncAPI document on stdout, as
JSON or YAML, with the topic names of the settings in effect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from seqkeeper.cli import app

ROOT = Path(__file__).resolve().parents[2]
#: the environment without any seqkeeper or Kafka setting
CLEAN = {
    k: v for k, v in os.environ.items() if not k.startswith(("SEQKEEPER_", "KAFKA_", "PYTHONPATH"))
}


def test_the_command_prints_the_committed_document_for_the_defaults(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "seqkeeper", "contracts"],
        cwd=tmp_path,
        env=CLEAN,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    committed = (ROOT / "schemas" / "asyncapi.json").read_text()
    assert done.stdout == committed
    assert json.loads(done.stdout)["asyncapi"] == "3.0.0"


def test_yaml_is_the_same_document_and_the_settings_name_the_topics() -> None:
    env = {"SEQKEEPER_INPUT_TOPIC": "orders.in", "SEQKEEPER_COMMAND_DLQ_TOPIC": "orders.cmd.dlq"}
    as_json = CliRunner().invoke(app, ["contracts"], env=env)
    as_yaml = CliRunner().invoke(app, ["contracts", "--format", "yaml"], env=env)
    assert as_json.exit_code == as_yaml.exit_code == 0, as_json.output + as_yaml.output
    document = json.loads(as_json.stdout)
    assert yaml.safe_load(as_yaml.stdout) == document
    assert document["channels"]["eventsIn"]["address"] == "orders.in"
    assert document["channels"]["commandsDlq"]["address"] == "orders.cmd.dlq"


def test_a_bad_setting_or_format_is_one_line() -> None:
    bad = CliRunner().invoke(app, ["contracts"], env={"SEQKEEPER_PARTITIONS": "many"})
    assert bad.exit_code == 2
    assert bad.stderr.count("\n") == 1 and "SEQKEEPER_PARTITIONS" in bad.stderr, bad.stderr
    assert bad.stdout == ""
    unknown = CliRunner().invoke(app, ["contracts", "--format", "xml"])
    assert unknown.exit_code == 2 and "xml" in unknown.output


def test_help_lists_it() -> None:
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert "contracts" in shown.output


def test_without_its_schemas_it_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import seqkeeper.contracts as contracts

    monkeypatch.setattr(contracts, "SCHEMAS", tmp_path)
    contracts.schema_files.cache_clear()
    try:
        done = CliRunner().invoke(app, ["contracts"])
    finally:
        contracts.schema_files.cache_clear()
    assert done.exit_code == 1
    assert done.stderr.startswith("error: no JSON Schemas in ") and done.stderr.count("\n") == 1
