"""The main job end to end (small), on the broker fixture."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.demo import DemoOptions, run_demo
from seqkeeper.settings import Settings

pytestmark = pytest.mark.integration


def test_demo_passes_verification(broker, names, tmp_path: Path) -> None:
    settings = Settings(
        broker=broker.bootstrap,
        data_dir=tmp_path / "data",
        partitions=2,
        session_timeout=6.0,
        gap_timeout=3.0,
        **names,
    )
    assert (
        run_demo(settings, DemoOptions(messages=2000, keys=50, malformed=12, lost=6, quiet=True))
        == 0
    )


def test_cli_help_lists_the_commands() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("broker", "worker", "demo"):
        assert command in result.output
