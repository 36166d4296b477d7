"""``python -m seqkeeper.settings``: print the README's configuration table."""

from seqkeeper.settings.markdown import markdown_table

print(markdown_table(), end="")
