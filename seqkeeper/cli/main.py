"""The ``seqkeeper`` command line: the app and its commands."""

from __future__ import annotations

import signal

from seqkeeper.cli.acls import acls
from seqkeeper.cli.bench import bench
from seqkeeper.cli.broker import broker
from seqkeeper.cli.command_client import inspect, send
from seqkeeper.cli.compact import compact, replay
from seqkeeper.cli.contracts import contracts
from seqkeeper.cli.errors import Commands
from seqkeeper.cli.settings_table import show_settings
from seqkeeper.cli.store import keygen, store_app
from seqkeeper.cli.verification import chaos, demo, verify
from seqkeeper.cli.worker import worker

app = Commands(
    help="seqkeeper: ordered, deduplicated, trustworthy Kafka topics.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


# A new command: a function in its group's module, registered here (in the
# order ``--help`` lists them); Commands maps its failures (errors.py).
app.command()(broker)
app.command(name="settings")(show_settings)
app.command()(contracts)
app.command()(worker)
app.command()(acls)
app.command()(compact)
app.command()(replay)
app.command()(verify)
app.command()(chaos)
app.command()(bench)
app.command()(keygen)
app.add_typer(store_app, name="store")
app.command()(send)
app.command()(inspect)
app.command()(demo)


def _graceful_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt, so ``with`` blocks (the embedded
    broker, temporary directories, child workers) clean up as on Ctrl-C."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main() -> None:
    _graceful_sigterm()
    app()  # (every command's failures: one line and its code, errors.py)
