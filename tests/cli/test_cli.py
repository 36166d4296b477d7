"""The command line without a broker: what help shows, and exit codes."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from seqkeeper.broker import free_port
from seqkeeper.cli import app


def test_a_failed_bench_section_fails_the_command(tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    result = CliRunner().invoke(
        app,
        ["bench", "--broker", nobody, "--smoke", "--only", "spark", "--out", str(tmp_path)],
    )
    assert result.exit_code == 1, result.output
    assert "spark: failed" in result.output
    assert "failed sections: spark" in result.output
    assert (tmp_path / "latest.json").exists()


def test_help_names_each_option_s_variable() -> None:
    # rich markup would swallow "[env ...]" as a tag: the variable must show
    result = CliRunner().invoke(app, ["worker", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    for variable in ("KAFKA_BOOTSTRAP_SERVERS", "SEQKEEPER_DATA_DIR", "SEQKEEPER_BROKER_WAIT"):
        assert f"[env {variable}" in result.output, variable
