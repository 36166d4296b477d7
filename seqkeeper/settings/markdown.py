"""The README's configuration table, rendered from the declarations
(``python -m seqkeeper.settings``, ``seqkeeper settings --markdown``)."""

from __future__ import annotations

from seqkeeper.settings.catalog import GROUPS, VARS


def markdown_table() -> str:
    """The README's configuration table: a row per group, then its variables."""
    lines = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for group, cls in GROUPS.items():
        lines.append(f"| **{group}** | | *{(cls.__doc__ or '').strip()}* |")
        for v in VARS.values():
            if v.group != group:
                continue
            default = v.with_unit(f"`{v.default}`") if v.default else "(empty)"
            lines.append(f"| `{v.env}` | {default} | {v.help} |")
    return "\n".join(lines) + "\n"
