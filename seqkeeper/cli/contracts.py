"""``seqkeeper contracts``: the AsyncAPI 3.0 document of every topic the
workers read and write (:mod:`seqkeeper.contracts`, docs/contracts.md)."""

from __future__ import annotations

import importlib.util
from enum import StrEnum
from typing import Annotated

import typer

from seqkeeper.cli.errors import Failed, Usage
from seqkeeper.cli.options import settings_of


class Format(StrEnum):
    json = "json"
    yaml = "yaml"


def contracts(
    fmt: Annotated[
        Format, typer.Option("--format", help="json, or yaml (needs PyYAML).")
    ] = Format.json,
) -> None:
    """Print the AsyncAPI 3.0 document of every topic the workers read and
    write (keys, headers, payload schemas, which worker sends and which
    receives), with the topic names of the settings in effect. The
    defaults' document is schemas/asyncapi.json."""
    from seqkeeper.contracts import SchemasMissing, build, render

    settings = settings_of()  # a bad value is one clear line
    if fmt is Format.yaml and importlib.util.find_spec("yaml") is None:
        raise Usage(
            "--format yaml needs PyYAML: pip install pyyaml, or use --format json "
            "(JSON is YAML too)"
        )
    try:
        document = build(settings)
    except SchemasMissing as e:
        raise Failed(str(e)) from None
    typer.echo(render(document, fmt.value), nl=False)
