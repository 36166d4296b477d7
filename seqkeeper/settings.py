"""Worker settings: every option in one place, with default, unit and variable.

Each field is set, in order of precedence, by a CLI flag, by the environment
variable named in its comment, or by the default shown.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass(frozen=True)
class Settings:
    #: Kafka bootstrap servers, ``host:port[,host:port]``. Empty: start the
    #: embedded broker. Env ``KAFKA_BOOTSTRAP_SERVERS``.
    broker: str = field(default_factory=lambda: _env("KAFKA_BOOTSTRAP_SERVERS", ""))
    #: Faust application id: consumer group and changelog topic prefix.
    #: Env ``SEQKEEPER_APP_ID``.
    app_id: str = field(default_factory=lambda: _env("SEQKEEPER_APP_ID", "seqkeeper"))
    #: Input topic. Env ``SEQKEEPER_INPUT_TOPIC``.
    input_topic: str = field(default_factory=lambda: _env("SEQKEEPER_INPUT_TOPIC", "events.in"))
    #: Ordered output topic. Env ``SEQKEEPER_ORDERED_TOPIC``.
    ordered_topic: str = field(
        default_factory=lambda: _env("SEQKEEPER_ORDERED_TOPIC", "events.ordered")
    )
    #: Deduplicated (arrival order) output topic. Env ``SEQKEEPER_DEDUPED_TOPIC``.
    deduped_topic: str = field(
        default_factory=lambda: _env("SEQKEEPER_DEDUPED_TOPIC", "events.deduped")
    )
    #: Dead-letter topic. Env ``SEQKEEPER_DLQ_TOPIC``.
    dlq_topic: str = field(default_factory=lambda: _env("SEQKEEPER_DLQ_TOPIC", "events.dlq"))
    #: Partitions of the input, output and changelog topics (created when
    #: missing). Env ``SEQKEEPER_PARTITIONS``.
    partitions: int = field(default_factory=lambda: int(_env("SEQKEEPER_PARTITIONS", "4")))
    #: Replication factor of topics the worker creates. Env ``SEQKEEPER_REPLICATION``.
    replication: int = field(default_factory=lambda: int(_env("SEQKEEPER_REPLICATION", "1")))
    #: Directory of the RocksDB tables. Env ``SEQKEEPER_DATA_DIR``.
    data_dir: Path = field(
        default_factory=lambda: Path(_env("SEQKEEPER_DATA_DIR", "./seqkeeper-data"))
    )
    #: Web (health, later metrics) port; 0 picks a free port, so several
    #: workers can share a machine. Env ``SEQKEEPER_WEB_PORT``.
    web_port: int = field(default_factory=lambda: int(_env("SEQKEEPER_WEB_PORT", "0")))
    #: Web bind address (``0.0.0.0`` in a container). Env ``SEQKEEPER_WEB_HOST``.
    web_host: str = field(default_factory=lambda: _env("SEQKEEPER_WEB_HOST", "127.0.0.1"))
    #: Consumer group session timeout in seconds: how long a dead worker keeps
    #: its partitions. The embedded broker also waits half of it before it
    #: completes a group join. Env ``SEQKEEPER_SESSION_TIMEOUT``.
    session_timeout: float = field(
        default_factory=lambda: float(_env("SEQKEEPER_SESSION_TIMEOUT", "10"))
    )
    #: Log level of the worker. Env ``SEQKEEPER_LOG_LEVEL``.
    log_level: str = field(default_factory=lambda: _env("SEQKEEPER_LOG_LEVEL", "warning"))

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given non-``None`` fields replaced (CLI flags)."""
        names = {f.name for f in fields(self)}
        unknown = set(overrides) - names
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})
