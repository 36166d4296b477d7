"""A value codec that cannot be used is one line and exit 2, before any
broker or Spark: a user's codec without ``encode``, Avro without its
schema, a schema that cannot hold a gap marker, fastavro missing."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from seqkeeper import security
from seqkeeper.broker import free_port
from seqkeeper.cli import app
from seqkeeper.plugins import codec_of
from seqkeeper.settings import Settings
from seqkeeper.state.value_codecs import AvroCodec

PROJECT = Path(__file__).resolve().parent.parent / "fixtures" / "codec_project"
MARKER_SCHEMA = {
    "type": "record",
    "name": "Envelope",
    "fields": [
        {"name": "messageId", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "type", "type": "string", "default": ""},
        {
            "name": "data",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Gap",
                    "fields": [{"name": "from", "type": "long"}, {"name": "to", "type": "long"}],
                },
            ],
            "default": None,
        },
    ],
}


def one_line(args: list[str], env: dict[str, str], named: str) -> None:
    # (in this process: ``worker`` installs its client security as the
    # process default before it loads the codec; restored after, for the
    # tests this process runs next)
    with security.installed(security.current()):
        result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and named in result.output, result.output
    assert result.output.count("\n") == 1, result.output


@pytest.fixture
def schemas(tmp_path: Path) -> dict[str, str]:
    fits, lacks, broken = tmp_path / "fits.avsc", tmp_path / "lacks.avsc", tmp_path / "bad.avsc"
    fits.write_bytes(orjson.dumps(MARKER_SCHEMA))
    # (no type, no data: a marker would lose them)
    lacks.write_bytes(orjson.dumps({**MARKER_SCHEMA, "fields": MARKER_SCHEMA["fields"][:2]}))
    broken.write_text('{"type": "record", "name": "R", "fields": [{"name": "x", "type": "nope"}]}')
    return {"fits": str(fits), "lacks": str(lacks), "bad": str(broken)}


@pytest.mark.parametrize("command", ["verify", "worker", "compact"])
def test_a_codec_that_cannot_be_used_is_one_line(
    command: str, schemas: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(PROJECT)  # (the user's project: its codec is importable from there)
    nobody = ["-b", f"127.0.0.1:{free_port()}"]
    cases = [
        (
            {"SEQKEEPER_CODEC": "shopcodec.codec:DecodeOnly"},
            "SEQKEEPER_CODEC='shopcodec.codec:DecodeOnly': has no encode(document) -> bytes",
        ),
        ({"SEQKEEPER_CODEC": "avro"}, "SEQKEEPER_CODEC='avro' needs SEQKEEPER_AVRO_SCHEMA"),
        (
            {"SEQKEEPER_CODEC": "avro", "SEQKEEPER_AVRO_SCHEMA": "/no/such.avsc"},
            "SEQKEEPER_AVRO_SCHEMA='/no/such.avsc': cannot read it",
        ),
        (
            {"SEQKEEPER_CODEC": "avro", "SEQKEEPER_AVRO_SCHEMA": schemas["bad"]},
            "not an Avro schema",
        ),
        (
            {"SEQKEEPER_CODEC": "avro", "SEQKEEPER_AVRO_SCHEMA": schemas["lacks"]},
            "SEQKEEPER_CODEC='avro': cannot write a gap marker and read it back",
        ),
        (
            {"SEQKEEPER_CODEC": "avro", "SEQKEEPER_AVRO_SCHEMA_ID": "x"},
            "SEQKEEPER_AVRO_SCHEMA_ID='x': expected a whole number",
        ),
        ({"SEQKEEPER_AVRO_SCHEMA_ID": str(2**31)}, "expected a schema id from 0 to 2147483647"),
    ]
    for env, named in cases:
        one_line([command, *nobody], env, named)
    monkeypatch.setitem(sys.modules, "fastavro", None)  # (as if not installed)
    env = {"SEQKEEPER_CODEC": "avro", "SEQKEEPER_AVRO_SCHEMA": schemas["fits"]}
    one_line([command, *nobody], env, "needs fastavro: pip install 'seqkeeper[avro]'")


def test_the_settings_name_the_codec(schemas: dict[str, str], monkeypatch) -> None:
    assert codec_of(Settings.of(bootstrap="x:1").ordered) is None  # JSON: orjson directly
    settings = Settings.of(bootstrap="x:1", codec="avro", avro_schema=schemas["fits"])
    plain = codec_of(settings.ordered)
    assert isinstance(plain, AvroCodec) and plain.schema_id is None
    framed = codec_of(settings.with_overrides(avro_schema_id=42).ordered)
    assert isinstance(framed, AvroCodec) and framed.encode({"messageId": "m", "seq": 1})[:5] == (
        b"\x00\x00\x00\x00\x2a"
    )
    monkeypatch.chdir(PROJECT)
    user = codec_of(Settings.of(bootstrap="x:1", codec="shopcodec.codec:PrefixedBase64").ordered)
    assert type(user).__name__ == "PrefixedBase64"
    assert Settings.of(bootstrap="x:1", avro_schema_id=7).to_env()["SEQKEEPER_AVRO_SCHEMA_ID"] == (
        "7"
    )
    assert Settings.of(bootstrap="x:1").to_env()["SEQKEEPER_AVRO_SCHEMA_ID"] == ""
