"""``seqkeeper settings``: every setting in effect, and where it comes from."""

from __future__ import annotations

from typing import Annotated

import typer

from seqkeeper.cli.options import settings_of


def show_settings(
    markdown: Annotated[
        bool, typer.Option(help="Print the README's configuration table instead.")
    ] = False,
) -> None:
    """Every setting: its variable, the value in effect and where it comes
    from (the environment or the default), a table per group."""
    from rich.console import Console
    from rich.table import Table

    from seqkeeper.settings import GROUPS, effective, markdown_table

    if markdown:
        typer.echo(markdown_table(), nl=False)
        return
    settings_of()  # a bad value is one clear line
    console = Console()
    rows = list(effective())
    for group, cls in GROUPS.items():
        table = Table(title=f"{group}: {(cls.__doc__ or '').strip()}", title_justify="left")
        for column in ("variable", "value", "from"):
            table.add_column(column)
        for v, text, source in rows:
            if v.group == group:
                table.add_row(v.env, v.with_unit(text) or "(empty)", source)
        console.print(table)
