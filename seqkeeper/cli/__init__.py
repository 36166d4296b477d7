"""The ``seqkeeper`` command line (``seqkeeper = "seqkeeper.cli:main"``):
the app and its registration (:mod:`~seqkeeper.cli.main`), a module per
group of commands, what they share (:mod:`~seqkeeper.cli.options`), and
how every one of them fails (:mod:`~seqkeeper.cli.errors`)."""

from seqkeeper.cli.compact import reseal_summary
from seqkeeper.cli.main import app, main
from seqkeeper.cli.options import check_connection

__all__ = ["app", "check_connection", "main", "reseal_summary"]
