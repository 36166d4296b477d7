"""`seqkeeper bench` exits non-zero when a section fails, after printing
the table with the failed section in it (a failure must not read as a pass)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from seqkeeper.broker import free_port
from seqkeeper.cli import app


def test_a_failed_section_fails_the_command(tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    result = CliRunner().invoke(
        app,
        ["bench", "--broker", nobody, "--smoke", "--only", "spark", "--out", str(tmp_path)],
    )
    assert result.exit_code == 1, result.output
    assert "spark: failed" in result.output
    assert "failed sections: spark" in result.output
    assert (tmp_path / "latest.json").exists()
