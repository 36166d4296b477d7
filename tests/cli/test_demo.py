"""The main job end to end (small), on the broker fixture."""

import asyncio

import orjson
import pytest
from typer.testing import CliRunner

from seqkeeper.cli import app
from seqkeeper.demo import DemoOptions, run_demo
from seqkeeper.topics import read_topic

pytestmark = pytest.mark.integration


def test_demo_passes_verification_with_every_gap_given_up(make_settings) -> None:
    settings = make_settings(gap_timeout=3.0)
    options = DemoOptions(messages=2000, keys=50, malformed=12, lost=6, quiet=True)
    assert run_demo(settings, options) == 0
    # The permanent gaps (lost messages that have a successor) were given up:
    # the demo only passes once nothing waits behind them.
    w = options.workload()
    delivered: dict[bytes, set[int]] = {}
    for key, value in w.records:
        try:
            doc = orjson.loads(value or b"")
            if isinstance(doc, dict) and str(doc.get("messageId", "")).startswith("key-"):
                delivered.setdefault(key or b"", set()).add(doc["seq"])
        except orjson.JSONDecodeError:
            continue
    gaps = sum(1 for seqs in delivered.values() for s in range(1, max(seqs)) if s not in seqs)
    assert gaps > 0
    ordered = asyncio.run(read_topic(settings.broker.bootstrap, settings.ordered.ordered_topic))
    markers = [r for r in ordered if b"seqkeeper.GapSkipped" in (r.value or b"")]
    assert 0 < len(markers) <= gaps
    covered = sum(
        orjson.loads(m.value)["data"]["to"] - orjson.loads(m.value)["data"]["from"] + 1
        for m in markers
    )
    assert covered == gaps
    # `seqkeeper verify` on the same topics, as a team would run it on theirs
    topics = [
        *(
            "--input-topic",
            settings.ordered.input_topic,
            "--ordered-topic",
            settings.ordered.ordered_topic,
        ),
        *(
            "--deduped-topic",
            settings.ordered.deduped_topic,
            "--dlq-topic",
            settings.ordered.dlq_topic,
        ),
        *("--late-topic", settings.ordered.late_topic),
    ]
    checked = CliRunner().invoke(
        app, ["verify", "-b", settings.broker.bootstrap, *topics, "--drained", "--json"]
    )
    assert checked.exit_code == 0, checked.output
    assert orjson.loads(checked.output)["ok"] is True
    wrong = [*topics[:3], f"{settings.ordered.ordered_topic}-nope", *topics[4:]]
    missing = CliRunner().invoke(app, ["verify", "-b", settings.broker.bootstrap, *wrong])
    assert missing.exit_code == 2 and "does not exist" in missing.output, missing.output


def test_cli_help_lists_the_commands() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("broker", "worker", "demo"):
        assert command in result.output


def test_command_demo_passes(make_settings) -> None:
    settings = make_settings()  # (names: unique command topics too)
    from seqkeeper.demo import run_command_demo

    assert run_command_demo(settings, commands=150, seed=2, quiet=True) == 0
