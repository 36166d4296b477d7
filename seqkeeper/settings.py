"""Worker settings: every option in one place, with default, unit and variable.

Each field is set, in order of precedence, by a CLI flag, by the environment
variable named in its comment, or by the default shown.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from seqkeeper.processors.deduplicator import Retention
from seqkeeper.processors.resequencer import Policy
from seqkeeper.wait import parse_seconds


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass(frozen=True)
class Settings:
    #: Kafka bootstrap servers, ``host:port[,host:port]``. Empty: start the
    #: embedded broker. Env ``KAFKA_BOOTSTRAP_SERVERS``.
    broker: str = field(default_factory=lambda: _env("KAFKA_BOOTSTRAP_SERVERS", ""))
    #: An Apache Kafka distribution directory (3.7+ or 4.x). When no broker
    #: is given, commands that start one (``worker``, ``demo``, ``chaos``,
    #: ``bench``, ``broker``) start a fresh single-node Kafka from it instead
    #: of the embedded broker. Env ``KAFKA_HOME``.
    kafka_home: str = field(default_factory=lambda: _env("KAFKA_HOME", ""))
    #: Seconds the worker waits at start for the broker it is given to
    #: answer (a line per attempt, 0.5 s between attempts doubling to 10 s),
    #: before it exits with code 1; ``inf``: no limit. Once it runs, a lost
    #: broker is retried without limit. Env ``SEQKEEPER_BROKER_WAIT``.
    broker_wait: float = field(
        default_factory=lambda: parse_seconds(
            "SEQKEEPER_BROKER_WAIT", _env("SEQKEEPER_BROKER_WAIT", "300")
        )
    )
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

    #: Topic for late arrivals when ``late_policy`` is ``late-topic``.
    #: Env ``SEQKEEPER_LATE_TOPIC``.
    late_topic: str = field(default_factory=lambda: _env("SEQKEEPER_LATE_TOPIC", "events.late"))
    #: First sequence of a key: ``one`` (1) or ``first-seen`` (the first
    #: sequence the worker sees for the key). Env ``SEQKEEPER_FIRST_SEQ``.
    first_seq: str = field(default_factory=lambda: _env("SEQKEEPER_FIRST_SEQ", "one"))
    #: Seconds a gap may block buffered messages before it is given up (a
    #: GapSkipped marker is emitted). Env ``SEQKEEPER_GAP_TIMEOUT``.
    gap_timeout: float = field(default_factory=lambda: float(_env("SEQKEEPER_GAP_TIMEOUT", "5")))
    #: Buffered messages per key. Env ``SEQKEEPER_MAX_BUFFERED_PER_KEY``.
    max_buffered_per_key: int = field(
        default_factory=lambda: int(_env("SEQKEEPER_MAX_BUFFERED_PER_KEY", "10000"))
    )
    #: Buffered messages over all keys of a worker. Env ``SEQKEEPER_MAX_BUFFERED``.
    max_buffered_total: int = field(
        default_factory=lambda: int(_env("SEQKEEPER_MAX_BUFFERED", "1000000"))
    )
    #: On a full buffer: ``skip`` the gap early, or ``dlq`` the message.
    #: Env ``SEQKEEPER_OVERFLOW_POLICY``.
    overflow_policy: str = field(default_factory=lambda: _env("SEQKEEPER_OVERFLOW_POLICY", "skip"))
    #: A late arrival (its sequence was given up): ``dlq``, ``drop`` or
    #: ``late-topic``. Env ``SEQKEEPER_LATE_POLICY``.
    late_policy: str = field(default_factory=lambda: _env("SEQKEEPER_LATE_POLICY", "dlq"))
    #: Seconds a seen messageId is remembered (default 7 days).
    #: Env ``SEQKEEPER_SEEN_MAX_AGE``.
    seen_max_age: float = field(
        default_factory=lambda: float(_env("SEQKEEPER_SEEN_MAX_AGE", str(7 * 24 * 3600)))
    )
    #: Seen messageIds remembered per key. Env ``SEQKEEPER_SEEN_MAX_PER_KEY``.
    seen_max_per_key: int = field(
        default_factory=lambda: int(_env("SEQKEEPER_SEEN_MAX_PER_KEY", "100000"))
    )
    #: Event time for gap timeouts and seen-id ages: the dotted path of a
    #: field of the value (``metadata.timestamp``: epoch milliseconds or
    #: ISO-8601 with offset). Empty (default): the Kafka record timestamp.
    #: Env ``SEQKEEPER_EVENT_TIME_FIELD``.
    event_time_field: str = field(default_factory=lambda: _env("SEQKEEPER_EVENT_TIME_FIELD", ""))
    #: Which topology the worker runs: ``ordered`` (Resequencer + Idempotent
    #: Receiver) or ``commands`` (command handler + outbox; its app id gets
    #: the suffix ``-commands``). Env ``SEQKEEPER_TOPOLOGY``.
    topology: str = field(default_factory=lambda: _env("SEQKEEPER_TOPOLOGY", "ordered"))
    #: Command topic. Env ``SEQKEEPER_COMMAND_TOPIC``.
    command_topic: str = field(
        default_factory=lambda: _env("SEQKEEPER_COMMAND_TOPIC", "commands.in")
    )
    #: Domain events emitted by command handlers. Env ``SEQKEEPER_EVENTS_TOPIC``.
    events_topic: str = field(
        default_factory=lambda: _env("SEQKEEPER_EVENTS_TOPIC", "commands.events")
    )
    #: Dead letters of the command topic. Env ``SEQKEEPER_COMMAND_DLQ_TOPIC``.
    command_dlq_topic: str = field(
        default_factory=lambda: _env("SEQKEEPER_COMMAND_DLQ_TOPIC", "commands.dlq")
    )
    #: Handler attempts before a command is dead-lettered (transient errors).
    #: Env ``SEQKEEPER_COMMAND_ATTEMPTS``.
    command_attempts: int = field(
        default_factory=lambda: int(_env("SEQKEEPER_COMMAND_ATTEMPTS", "5"))
    )
    #: First retry delay in seconds, doubled per attempt up to 30 s.
    #: Env ``SEQKEEPER_COMMAND_RETRY_DELAY``.
    command_retry_delay: float = field(
        default_factory=lambda: float(_env("SEQKEEPER_COMMAND_RETRY_DELAY", "0.5"))
    )
    #: Seconds a dispatched command's receipt (dedup marker) is kept
    #: (default 7 days). Env ``SEQKEEPER_RECEIPT_MAX_AGE``.
    receipt_max_age: float = field(
        default_factory=lambda: float(_env("SEQKEEPER_RECEIPT_MAX_AGE", str(7 * 24 * 3600)))
    )
    #: Seconds between gap-timeout checks. Env ``SEQKEEPER_TIMER_INTERVAL``.
    timer_interval: float = field(
        default_factory=lambda: float(_env("SEQKEEPER_TIMER_INTERVAL", "0.5"))
    )
    #: Seconds the outbox waits after the first output before it produces,
    #: so one cycle carries many records (latency vs. batch size).
    #: Env ``SEQKEEPER_OUTBOX_LINGER``.
    outbox_linger: float = field(
        default_factory=lambda: float(_env("SEQKEEPER_OUTBOX_LINGER", "0.005"))
    )
    #: Input records handed to the topology per fetch at most (one list),
    #: and outputs queued before the topology waits for an outbox cycle:
    #: bounds a worker's memory when it starts behind a large backlog.
    #: Env ``SEQKEEPER_MAX_POLL_RECORDS``, ``SEQKEEPER_OUTBOX_MAX``.
    max_poll_records: int = field(
        default_factory=lambda: int(_env("SEQKEEPER_MAX_POLL_RECORDS", "2000"))
    )
    outbox_max: int = field(default_factory=lambda: int(_env("SEQKEEPER_OUTBOX_MAX", "20000")))
    #: Longest a fetch waits at the broker for records, in seconds (an
    #: upper bound on the latency it adds; Faust's own is 1.5 s).
    #: Env ``SEQKEEPER_FETCH_MAX_WAIT``.
    fetch_max_wait: float = field(
        default_factory=lambda: float(_env("SEQKEEPER_FETCH_MAX_WAIT", "0.02"))
    )
    #: Static group membership: a name unique to this worker and stable
    #: across its restarts (e.g. the pod name). A restart then takes the
    #: worker's place without a rebalance; a worker that stops keeps its
    #: partitions until its session times out. Empty (default): dynamic
    #: membership. Env ``SEQKEEPER_INSTANCE_ID``.
    instance_id: str = field(default_factory=lambda: _env("SEQKEEPER_INSTANCE_ID", ""))
    #: Seconds between input offset commits (each runs an outbox cycle
    #: first). After a crash, the input since the last commit is processed
    #: again and its outputs re-emitted (identical). Faust's default is 2.8.
    #: Env ``SEQKEEPER_COMMIT_INTERVAL``.
    commit_interval: float = field(
        default_factory=lambda: float(_env("SEQKEEPER_COMMIT_INTERVAL", "1.0"))
    )
    #: The worker's garbage-collector thresholds (``gc.set_threshold``),
    #: three integers. CPython's default (700, 10, 10) cost this worker a
    #: fifth of its CPU time: every message leaves objects that live until
    #: the next outbox cycle, so young collections ran every few dozen
    #: messages and full ones (200 ms pauses) every second.
    #: Env ``SEQKEEPER_GC_THRESHOLD``.
    gc_threshold: str = field(default_factory=lambda: _env("SEQKEEPER_GC_THRESHOLD", "5000,20,50"))
    #: Seconds a thread of the worker runs before CPython asks it to hand
    #: the interpreter lock to another thread that waits (``sys.
    #: setswitchinterval``; CPython's default 0.005). The worker's main thread
    #: and Faust's consumer thread take turns; at 0.05 the worker used ~5 %
    #: less CPU time per message (alternating runs). Env
    #: ``SEQKEEPER_SWITCH_INTERVAL``.
    switch_interval: float = field(
        default_factory=lambda: float(_env("SEQKEEPER_SWITCH_INTERVAL", "0.05"))
    )
    #: RocksDB memory per table partition, in MiB: the write buffer (two of
    #: them at most) and the block cache. Faust's defaults (64 MiB x 3 and
    #: a 2 GiB cache per partition) let a worker grow far beyond its state.
    #: Env ``SEQKEEPER_ROCKSDB_WRITE_BUFFER_MB``, ``SEQKEEPER_ROCKSDB_CACHE_MB``.
    rocksdb_write_buffer_mb: int = field(
        default_factory=lambda: int(_env("SEQKEEPER_ROCKSDB_WRITE_BUFFER_MB", "8"))
    )
    rocksdb_cache_mb: int = field(
        default_factory=lambda: int(_env("SEQKEEPER_ROCKSDB_CACHE_MB", "16"))
    )

    def rocksdb_options(self) -> dict[str, int]:
        """Options of every table's RocksDB (Faust's ``Table(options=...)``)."""
        mib = 1024 * 1024
        return {
            "write_buffer_size": self.rocksdb_write_buffer_mb * mib,
            "max_write_buffer_number": 2,
            "target_file_size_base": self.rocksdb_write_buffer_mb * mib,
            "block_cache_size": self.rocksdb_cache_mb * mib,
            "block_cache_compressed_size": 0,
            # bits per key (Faust's default 3: ~15 % false positives); most
            # seen-id lookups are misses, which a filter answers alone
            "bloom_filter_size": 10,
        }

    def gc_thresholds(self) -> tuple[int, int, int]:
        """:attr:`gc_threshold` parsed (a first value of 0 turns automatic
        collection off)."""
        parts = self.gc_threshold.split(",")
        try:
            values = tuple(int(part) for part in parts)
        except ValueError:
            values = ()
        if len(values) != 3 or min(values) < 0:
            raise ValueError(
                "gc threshold must be three non-negative integers such as "
                f"'5000,20,50', got {self.gc_threshold!r}"
            )
        first, second, third = values
        return first, second, third

    def switch_seconds(self) -> float:
        """:attr:`switch_interval`, checked (positive)."""
        if not self.switch_interval > 0:
            raise ValueError(
                f"switch interval must be a positive number of seconds, got {self.switch_interval!r}"
            )
        return float(self.switch_interval)

    def fetch_wait_ms(self) -> int:
        """:attr:`fetch_max_wait` in whole milliseconds (as Kafka clients
        take it), checked (not negative)."""
        if not self.fetch_max_wait >= 0:
            raise ValueError(
                "fetch max wait must be a non-negative number of seconds, "
                f"got {self.fetch_max_wait!r}"
            )
        return round(self.fetch_max_wait * 1000)

    def resequencer_policy(self) -> Policy:
        if self.first_seq not in ("one", "first-seen"):
            raise ValueError(f"first_seq must be 'one' or 'first-seen', got {self.first_seq!r}")
        if self.overflow_policy not in ("skip", "dlq"):
            raise ValueError(
                f"overflow policy must be 'skip' or 'dlq', got {self.overflow_policy!r}"
            )
        if self.late_policy not in ("dlq", "drop", "late-topic"):
            raise ValueError(
                f"late policy must be 'dlq', 'drop' or 'late-topic', got {self.late_policy!r}"
            )
        return Policy(
            first_seq=self.first_seq,  # type: ignore[arg-type]
            gap_timeout=self.gap_timeout,
            max_buffered_per_key=self.max_buffered_per_key,
            max_buffered_total=self.max_buffered_total,
            overflow=self.overflow_policy,  # type: ignore[arg-type]
            late=self.late_policy,  # type: ignore[arg-type]
        )

    def time_field(self) -> tuple[str, ...]:
        """:attr:`event_time_field` as a path (empty: not configured)."""
        path = tuple(self.event_time_field.split(".")) if self.event_time_field else ()
        if any(not part for part in path):
            raise ValueError(f"event time field: bad path {self.event_time_field!r}")
        return path

    def retention(self) -> Retention:
        return Retention(max_age=self.seen_max_age, max_per_key=self.seen_max_per_key)

    @property
    def group_id(self) -> str:
        """The Faust app id (consumer group, changelog prefix) of the topology."""
        return f"{self.app_id}-commands" if self.topology == "commands" else self.app_id

    def topics(self) -> list[str]:
        """Every topic the worker reads or writes (created when missing)."""
        if self.topology == "commands":
            return [self.command_topic, self.events_topic, self.command_dlq_topic]
        if self.topology != "ordered":
            raise ValueError(f"topology must be 'ordered' or 'commands', got {self.topology!r}")
        return [
            self.input_topic,
            self.ordered_topic,
            self.deduped_topic,
            self.dlq_topic,
            self.late_topic,
        ]

    def to_env(self) -> dict[str, str]:
        """These settings as the environment variables that set them."""
        names = {
            "broker": "KAFKA_BOOTSTRAP_SERVERS",
            "kafka_home": "KAFKA_HOME",
            "max_buffered_total": "SEQKEEPER_MAX_BUFFERED",
            "dlq_topic": "SEQKEEPER_DLQ_TOPIC",
            "replication": "SEQKEEPER_REPLICATION",
        }
        return {
            names.get(f.name, f"SEQKEEPER_{f.name.upper()}"): str(getattr(self, f.name))
            for f in fields(self)
        }

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given non-``None`` fields replaced (CLI flags)."""
        names = {f.name for f in fields(self)}
        unknown = set(overrides) - names
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})
