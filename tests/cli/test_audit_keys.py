"""The audit key on the command line: from a file, both ways at once
refused, a missing file one line; no key in any output."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seqkeeper.cli import app, reseal_summary
from seqkeeper.settings import VARS
from seqkeeper.spark_sink.crypto import Sealer
from seqkeeper.spark_sink.reseal import ResealReport
from tests.spark_sink import small_store

KEY_ENV = VARS["audit_key"].env
KEY_FILE_ENV = VARS["audit_key_file"].env
DECRYPT_ENV = VARS["audit_decrypt_keys"].env
NEW, OLD = b"n" * 32, b"o" * 32
FIELDS = ("email",)


def b64(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def clean(**env: str) -> dict[str, str]:
    """``env`` over no audit settings at all (CliRunner's env adds to os.environ)."""
    unset = {v.env: "" for v in VARS.values() if v.group == "spark"}
    return {**unset, "COLUMNS": "200", **env}


def stream(warehouse: Path, **env: str):
    return CliRunner().invoke(
        app,
        ["store", "stream", f"{small_store.CATEGORY}-1", "--warehouse", str(warehouse)],
        env=clean(**env),
    )


def test_the_key_file_opens_the_store(tmp_path: Path) -> None:
    warehouse = tmp_path / "w"
    small_store.build(warehouse, [Sealer(OLD, FIELDS), Sealer(NEW, FIELDS)])
    (tmp_path / "key").write_text(b64(NEW) + "\n")
    done = stream(warehouse, **{KEY_FILE_ENV: str(tmp_path / "key"), DECRYPT_ENV: b64(OLD)})
    assert done.exit_code == 0, done.output
    assert "user1@example.com" in done.output and "user7@example.com" in done.output
    # the old key dropped too early: a clear error naming what is missing
    early = stream(warehouse, **{KEY_FILE_ENV: str(tmp_path / "key")})
    assert early.exit_code == 2
    assert DECRYPT_ENV in early.output and "Traceback" not in early.output


@pytest.mark.parametrize("command", [["store", "stream", "acct-1"], ["compact", "-b", "x:1"]])
def test_both_key_and_key_file_is_an_error_naming_both(tmp_path: Path, command) -> None:
    (tmp_path / "key").write_text(b64(NEW))
    done = CliRunner().invoke(
        app,
        [*command, "--warehouse", str(tmp_path)],
        env=clean(**{KEY_ENV: b64(OLD), KEY_FILE_ENV: str(tmp_path / "key")}),
    )
    assert done.exit_code == 2
    assert f"both {KEY_ENV} and {KEY_FILE_ENV} are set" in done.output
    assert b64(OLD) not in done.output and b64(NEW) not in done.output


def test_a_missing_key_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    done = stream(tmp_path, **{KEY_FILE_ENV: str(missing)})
    assert done.exit_code == 2
    (line,) = done.output.strip().splitlines()
    assert line.startswith(f"error: {KEY_FILE_ENV}='{missing}': cannot read it")


def test_reseal_needs_a_key(tmp_path: Path) -> None:
    done = CliRunner().invoke(
        app, ["compact", "-b", "x:1", "--warehouse", str(tmp_path), "--reseal"], env=clean()
    )
    assert done.exit_code == 2 and "--reseal" in done.output and DECRYPT_ENV in done.output


def test_the_reseal_summary_says_when_old_keys_can_go() -> None:
    sealer = Sealer(NEW)
    text, code = reseal_summary(ResealReport(files=3, rewritten=2, resealed=40), sealer)
    assert code == 0 and "40 values moved" in text and "can be dropped" in text
    left = ResealReport(files=3, rewritten=1, resealed=4, first_error="cannot decrypt: wrong key")
    left.left["a9583b0a"] = 5
    text, code = reseal_summary(left, sealer)
    assert code == 1 and "5 values could not be opened" in text and "a9583b0a: 5" in text


def test_settings_and_help_show_no_key(tmp_path: Path) -> None:
    env = clean(**{KEY_ENV: b64(NEW), DECRYPT_ENV: b64(OLD)})
    shown = CliRunner().invoke(app, ["settings"], env=env)
    assert shown.exit_code == 0, shown.output
    assert b64(NEW) not in shown.output and b64(OLD) not in shown.output
    helped = CliRunner().invoke(app, ["compact", "--help"], env=env)
    assert helped.exit_code == 0 and "--reseal" in helped.output
    assert b64(NEW) not in helped.output and b64(OLD) not in helped.output
