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


def test_an_unknown_bench_section_is_one_line_before_any_broker(tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # (refused before it is asked)
    result = CliRunner().invoke(
        app, ["bench", "--broker", nobody, "--only", "latency", "--only", "latncy"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: no bench section latncy: the sections are throughput, latency, quix, "
        "guarantee, depth, restart, failover, spark, soak"
    ]


def test_the_latency_section_runs_with_the_throughput_rounds() -> None:
    from seqkeeper.bench.harness import sections

    assert sections({"latency"}) == {"latency", "throughput"}
    assert sections({"quix"}) == {"quix"} and sections(None) is None


def test_help_names_each_option_s_variable() -> None:
    # rich markup would swallow "[env ...]" as a tag: the variable must show
    result = CliRunner().invoke(app, ["worker", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    for variable in ("KAFKA_BOOTSTRAP_SERVERS", "SEQKEEPER_DATA_DIR", "SEQKEEPER_BROKER_WAIT"):
        assert f"[env {variable}" in result.output, variable


def test_verify_reads_the_worker_s_message_shape_a_bad_one_is_one_line() -> None:
    """``seqkeeper verify`` reads messages as the worker does: its key,
    sequence, messageId and codec settings (variables or flags), checked
    before it connects."""
    nobody = f"127.0.0.1:{free_port()}"
    shown = CliRunner().invoke(app, ["verify", "--help"], env={"COLUMNS": "400"})
    for variable in ("KEY_FIELD", "SEQ_FIELD", "SEQ_HEADER", "MESSAGE_ID_FIELD", "CODEC"):
        assert f"[env SEQKEEPER_{variable}" in shown.output, variable
    for args, env, named in (
        ([], {"SEQKEEPER_CODEC": "nope"}, "SEQKEEPER_CODEC='nope': expected module:attribute"),
        (["--codec", "no_such_module:Codec"], {}, "no module named 'no_such_module'"),
        (["--key-field", "account..id"], {}, "key-field='account..id': expected a dotted path"),
    ):
        result = CliRunner().invoke(app, ["verify", "-b", nobody, *args], env=env)
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: ") and named in result.output, result.output
        assert result.output.count("\n") == 1, result.output
