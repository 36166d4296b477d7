"""``seqkeeper broker``: a broker for trying seqkeeper out."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from seqkeeper.broker import EmbeddedBroker
from seqkeeper.cli.errors import Usage
from seqkeeper.cli.options import flag


def broker(
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 0,
    kafka_home: Annotated[Optional[Path], flag("kafka_home")] = None,
    host: Annotated[
        str,
        typer.Option(
            help="Interface to listen on: 127.0.0.1, this machine only; 0.0.0.0, every "
            "interface. The listener is PLAINTEXT without authentication: whoever reaches "
            "it reads and writes every topic."
        ),
    ] = "127.0.0.1",
    advertised_host: Annotated[
        Optional[str],
        typer.Option(
            help="Host the broker tells clients to connect to "
            "(default: --host; for 0.0.0.0, this machine's name)."
        ),
    ] = None,
) -> None:
    """Run a broker in the foreground: the embedded one (Tansu, memory only),
    or a fresh single-node Apache Kafka from KAFKA_HOME."""
    from seqkeeper.broker import (
        KafkaBroker,
        LocalBroker,
        kafka_home_from_env,
        listen_here,
    )

    try:
        listen_here(host, port)
    except OSError as e:
        raise Usage(
            f"--host {host} --port {port}: cannot listen there ({e.strerror}); "
            "give an address of this machine (127.0.0.1, or 0.0.0.0 for every interface) "
            "and a free port (0 picks one)"
        ) from None
    home = kafka_home or kafka_home_from_env()
    local: LocalBroker = (
        KafkaBroker(home, port=port or None, host=host, advertised=advertised_host)
        if home
        else EmbeddedBroker(port=port or None, host=host, advertised=advertised_host)
    )
    try:  # (a broker that does not start, BrokerError: one line, exit 1)
        if home:
            typer.echo(f"starting Apache Kafka from {home} ...")
        with local as b:
            typer.echo(f"{b.kind} ready: KAFKA_BOOTSTRAP_SERVERS={b.bootstrap}")
            typer.echo(
                "Ctrl-C stops it (its data is "
                + (
                    "in a temporary directory and is deleted)."
                    if home
                    else "in memory and is lost)."
                )
            )
            while True:
                time.sleep(0.5)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (see _graceful_sigterm): the with-block
        pass  # has stopped the broker
