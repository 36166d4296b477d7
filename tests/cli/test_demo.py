"""The main job end to end (small), on the broker fixture."""

import pytest
from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.demo import DemoOptions, run_demo

pytestmark = pytest.mark.integration


def test_demo_passes_verification(make_settings) -> None:
    settings = make_settings(gap_timeout=3.0)
    assert (
        run_demo(settings, DemoOptions(messages=2000, keys=50, malformed=12, lost=6, quiet=True))
        == 0
    )


def test_cli_help_lists_the_commands() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("broker", "worker", "demo"):
        assert command in result.output
