"""Run the long-running Faust worker of the ordered/deduplicated topology."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from seqkeeper.broker import EmbeddedBroker, free_port
from seqkeeper.settings import Settings


@contextlib.contextmanager
def broker_for(settings: Settings) -> Iterator[Settings]:
    """``settings`` with a broker: the configured one, or a fresh embedded one."""
    if settings.broker:
        yield settings
        return
    with EmbeddedBroker() as broker:
        print(f"embedded broker (Tansu, memory only) at {broker.bootstrap}", flush=True)
        yield settings.with_overrides(broker=broker.bootstrap)


def run_worker(settings: Settings) -> None:
    """Run the worker in the foreground until SIGINT/SIGTERM (graceful stop)."""
    import faust

    from topologies.ordered import build_app

    with broker_for(settings) as settings:
        if settings.web_port == 0:
            settings = settings.with_overrides(web_port=free_port())
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        app = build_app(settings)
        print(
            f"seqkeeper worker: broker {settings.broker}, data {settings.data_dir}, "
            f"web http://127.0.0.1:{settings.web_port}/",
            flush=True,
        )
        worker = faust.Worker(app, loglevel=settings.log_level, quiet=True, stdout=sys.stdout)
        try:
            worker.execute_from_commandline()
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
