"""A worker at log level WARNING must not build a record for every debug
call of aiokafka and Faust (Faust's spinner set the root logger to DEBUG)."""

from __future__ import annotations

import logging

from seqkeeper.runtime.wiring import build_app
from seqkeeper.settings import Settings
from seqkeeper.topologies.ordered import wiring
from seqkeeper.worker import faust_worker


def test_warning_level_keeps_debug_off(tmp_path) -> None:
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        settings = Settings.of(
            bootstrap="127.0.0.1:1", data_dir=tmp_path, log_level="warning", web_port=6067
        )
        worker = faust_worker(build_app(settings, wiring(settings))[0], settings)
        worker._setup_logging()
        assert not logging.getLogger("aiokafka.conn").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("seqkeeper.ordered").isEnabledFor(logging.WARNING)
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
