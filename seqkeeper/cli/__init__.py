"""The ``seqkeeper`` command line (``seqkeeper = "seqkeeper.cli:main"``)."""

from seqkeeper.cli.main import app, check_connection, main, reseal_summary

__all__ = ["app", "check_connection", "main", "reseal_summary"]
