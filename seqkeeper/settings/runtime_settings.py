"""The ``runtime`` group: the worker process (identity, state, commits,
resources) and the processing guarantee it runs."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from seqkeeper.settings.variables import (
    Group,
    SettingError,
    bearer_token,
    choice,
    env_of,
    gc_thresholds,
    integer,
    non_negative_integer,
    non_negative_seconds,
    number,
    positive_integer,
    positive_seconds,
    seconds,
    var,
)

#: What ``Settings.topics`` and friends accept as a topology.
TOPOLOGIES = ("ordered", "commands")


class Guarantee(enum.StrEnum):
    """The processing guarantee a worker runs: one choice, made once
    (``SEQKEEPER_PROCESSING_GUARANTEE``, ``auto`` resolved against the broker
    at the worker's start); its values are the setting's strings."""

    #: the write-ahead outbox: state, then outputs, then input offsets
    AT_LEAST_ONCE = "at_least_once"
    #: Kafka transactions: state, outputs and input offsets together
    EXACTLY_ONCE = "exactly_once"


#: ``SEQKEEPER_FETCH_MAX_WAIT=auto`` where the worker runs exactly-once:
#: Kafka's own default (``fetch.max.wait.ms``).
HELD_FETCH_WAIT = 0.5
#: ``SEQKEEPER_FETCH_MAX_WAIT=auto`` otherwise.
SHORT_FETCH_WAIT = 0.02


def auto_fetch_wait(guarantee: Guarantee) -> float:
    """What ``SEQKEEPER_FETCH_MAX_WAIT=auto`` is for a worker that runs
    ``guarantee``, in seconds. A broker that runs transactions (the only
    ones a worker runs exactly-once on) answers a fetch held for records
    as soon as some arrive, as Apache Kafka does: a long wait costs no
    latency there, and each fetch of an idle worker costs both it and the
    broker CPU. The embedded broker (no transactions) holds a fetch to the
    end of its wait even when records arrive meanwhile: a short wait
    bounds the latency that adds."""
    return HELD_FETCH_WAIT if guarantee is Guarantee.EXACTLY_ONCE else SHORT_FETCH_WAIT


def fetch_wait(text: str) -> float | None:
    """``auto`` (or empty): ``None``, resolved at the worker's start
    (:func:`auto_fetch_wait`); else a number of seconds."""
    if text in ("auto", ""):
        return None
    try:
        return seconds(text)
    except ValueError:
        raise ValueError("expected auto or a non-negative number of seconds") from None


@dataclass(frozen=True)
class RuntimeSettings(Group):
    """The worker process: identity, state, commits, resources."""

    app_id: str = var(
        "SEQKEEPER_APP_ID",
        "seqkeeper",
        "Application id: the consumer group and the changelog topics' prefix.",
    )
    topology: str = var(
        "SEQKEEPER_TOPOLOGY",
        "ordered",
        "What the worker runs: ordered (Resequencer + Idempotent Receiver) or commands "
        "(command handler + outbox; its app id gets the suffix -commands).",
        choice(*TOPOLOGIES),
    )
    processing_guarantee: str = var(
        "SEQKEEPER_PROCESSING_GUARANTEE",
        "auto",
        "auto: exactly_once when the broker has transactions, else at_least_once. "
        "exactly_once: Kafka transactions (outputs, state and input offsets committed "
        "together; read_committed consumers see each output once, a command's reply also "
        "once per later copy that asks); refused on a broker "
        "without transactions. at_least_once: the write-ahead outbox (duplicates after a "
        "crash are byte-identical).",
        choice("auto", *Guarantee),
    )
    data_dir: Path = var(
        "SEQKEEPER_DATA_DIR",
        "./seqkeeper-data",
        "Directory of the RocksDB tables.",
        Path,
    )
    web_port: int = var(
        "SEQKEEPER_WEB_PORT",
        "0",
        "Port of the web server (health, metrics); 0 picks a free port.",
        integer,
    )
    web_host: str = var(
        "SEQKEEPER_WEB_HOST",
        "127.0.0.1",
        "The one interface the web server listens on: 127.0.0.1, this machine only; "
        "0.0.0.0, every interface (in a container, behind its published port). Where "
        "others reach it: SEQKEEPER_ADVERTISED_URL.",
    )
    advertised_url: str = var(
        "SEQKEEPER_ADVERTISED_URL",
        "",
        "How other workers and clients reach this worker's web server (state queries "
        "redirect there), e.g. http://worker-1:6066. Empty: http://WEB_HOST:WEB_PORT.",
    )
    state_queries: str = var(
        "SEQKEEPER_STATE_QUERIES",
        "on",
        "State queries on the web server (GET /state/..., /entities/..., /commands/...), "
        "which expose message data: on, or off (not served: 404). /health, /ready and "
        "/metrics are served either way.",
        choice("on", "off"),
    )
    tracing: str = var(
        "SEQKEEPER_TRACING",
        "off",
        "OpenTelemetry spans: off, or otel (needs pip install 'seqkeeper[otel]'; the "
        "standard OTEL_* variables configure the SDK: OTEL_TRACES_EXPORTER, default otlp, "
        "OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_SDK_DISABLED=true turns it "
        "off). See docs/operations.md#tracing.",
        choice("off", "otel"),
    )
    http_token: str = var(
        "SEQKEEPER_HTTP_TOKEN",
        "",
        "A bearer token every state query must carry (Authorization: Bearer <token>), "
        "else 401; the same on every worker of the group. Empty: none asked. /health, "
        "/ready and /metrics never ask for it.",
        bearer_token,
        secret=True,
    )
    http_token_file: str = var(
        "SEQKEEPER_HTTP_TOKEN_FILE",
        "",
        "A file holding SEQKEEPER_HTTP_TOKEN instead (a mounted secret; a trailing newline "
        "is ignored). Set one of the two, not both.",
    )
    session_timeout: float = var(
        "SEQKEEPER_SESSION_TIMEOUT",
        "10",
        "Consumer group session timeout: how long a dead worker keeps its partitions "
        "(a worker restarted on its data directory removes its dead predecessor at once).",
        seconds,
        "s",
    )
    instance_id: str = var(
        "SEQKEEPER_INSTANCE_ID",
        "",
        "Static group membership: a name unique to this worker and stable across its "
        "restarts (e.g. the pod name); a restart then causes no rebalance. Empty: dynamic.",
    )
    standby_replicas: int = var(
        "SEQKEEPER_STANDBY_REPLICAS",
        "0",
        "Warm copies of each partition's state kept by other workers (Faust's "
        "table_standby_replicas): when a partition moves to a worker that has one, it "
        "replays only the changelog records its copy lacks. Each copy costs its worker "
        "the reads of that partition's changelog.",
        non_negative_integer,
    )
    log_level: str = var(
        "SEQKEEPER_LOG_LEVEL",
        "warning",
        "Log level of the worker: debug, info, warning, error or critical.",
        lambda text: choice("debug", "info", "warning", "warn", "error", "critical")(text.lower()),
    )
    commit_interval: float = var(
        "SEQKEEPER_COMMIT_INTERVAL",
        "1.0",
        "Time between input offset commits (at_least_once: after a crash, the input since "
        "the last commit is processed again and its outputs re-emitted, identical; "
        "exactly_once commits with every cycle).",
        seconds,
        "s",
    )
    timer_interval: float = var(
        "SEQKEEPER_TIMER_INTERVAL",
        "0.5",
        "Time between gap-timeout and retry checks.",
        seconds,
        "s",
    )
    outbox_linger: float = var(
        "SEQKEEPER_OUTBOX_LINGER",
        "0.005",
        "How long the outbox waits after the first output before it produces, so one "
        "cycle carries many records (latency against batch size).",
        seconds,
        "s",
    )
    max_poll_records: int = var(
        "SEQKEEPER_MAX_POLL_RECORDS",
        "2000",
        "Input records handed to the topology per fetch at most.",
        positive_integer,
    )
    outbox_max: int = var(
        "SEQKEEPER_OUTBOX_MAX",
        "20000",
        "Outputs queued before processing waits for an outbox cycle: bounds memory "
        "when a worker starts behind a large backlog.",
        positive_integer,
    )
    fetch_max_wait: float | None = var(
        "SEQKEEPER_FETCH_MAX_WAIT",
        "auto",
        "Longest a fetch waits at the broker for records. auto: 0.5 s under exactly-once "
        "(Apache Kafka answers a waiting fetch when records arrive), else 0.02 s (the "
        "embedded broker holds it to its end: a bound on the latency it adds). See "
        "docs/operations.md#fetch-wait-and-what-an-idle-worker-costs.",
        fetch_wait,
        "s",
        check=lambda wait: wait is None or non_negative_seconds("fetch max wait")(wait),
    )
    #: (a first value of 0 turns automatic collection off)
    gc_threshold: tuple[int, int, int] = var(
        "SEQKEEPER_GC_THRESHOLD",
        "5000,20,50",
        "The garbage collector's thresholds (gc.set_threshold), three integers. Every "
        "record leaves objects alive until the next outbox cycle, so CPython's default "
        "(700,10,10) collects far too often for this worker.",
        gc_thresholds,
    )
    switch_interval: float = var(
        "SEQKEEPER_SWITCH_INTERVAL",
        "0.05",
        "How long a thread runs before CPython hands the interpreter lock to another "
        "(sys.setswitchinterval): the worker's threads take turns less often.",
        number,
        "s",
        check=positive_seconds("switch interval"),
    )
    rocksdb_write_buffer_mb: int = var(
        "SEQKEEPER_ROCKSDB_WRITE_BUFFER_MB",
        "8",
        "RocksDB write buffer per table partition (two at most). Faust's defaults let a "
        "worker grow far beyond its state.",
        positive_integer,
        "MiB",
    )
    rocksdb_cache_mb: int = var(
        "SEQKEEPER_ROCKSDB_CACHE_MB",
        "16",
        "RocksDB block cache per table partition.",
        positive_integer,
        "MiB",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.http_token and self.http_token_file:
            raise SettingError(
                f"both {env_of(RuntimeSettings, 'http_token')} and "
                f"{env_of(RuntimeSettings, 'http_token_file')} are set: set one of them (the "
                "token, or the file that holds it)"
            )

    def query_token(self) -> str | None:
        """The bearer token state queries must carry (``None``: none), from
        :attr:`http_token` or the file :attr:`http_token_file` names. A
        ``SettingError`` names the variable and what to do; it never quotes
        the token.

        The file is read here, when the token is needed, not when the
        settings are built: it is a mounted secret, which may be written
        after the settings are read (by a secrets sidecar, say), and
        the commands that never send or check the token (``seqkeeper
        settings``, the Spark side) must not need it. The worker reads it
        once before it connects (``run_worker``), so a file it cannot use
        still fails before any broker."""
        file_var = env_of(RuntimeSettings, "http_token_file")
        if not self.http_token_file:
            return self.http_token or None
        try:
            text = Path(self.http_token_file).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) else "not ASCII"
            raise SettingError(
                f"{file_var}={self.http_token_file!r}: cannot read the token ({why}); "
                "name a readable file holding it"
            ) from None
        try:
            # (a mounted secret often ends in a newline; nothing else is trimmed)
            token = bearer_token(text.rstrip("\r\n"))
        except ValueError as e:
            raise SettingError(f"{file_var}={self.http_token_file!r}: its token: {e}") from None
        if not token:
            raise SettingError(
                f"{file_var}={self.http_token_file!r}: the file is empty; write the token in "
                f"it, or unset {file_var} to serve state queries without one"
            )
        return token

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

    @property
    def guarantee(self) -> Guarantee:
        """:attr:`processing_guarantee` as a :class:`Guarantee`:
        exactly-once only when it says so (``auto``, not yet resolved by
        the worker's start, runs at-least-once)."""
        if self.processing_guarantee == Guarantee.EXACTLY_ONCE:
            return Guarantee.EXACTLY_ONCE
        return Guarantee.AT_LEAST_ONCE

    def fetch_wait_ms(self) -> int:
        """:attr:`fetch_max_wait` in whole milliseconds (as Kafka clients
        take it); ``auto``, not yet resolved by the worker's start, is the
        short wait (:func:`auto_fetch_wait` of at-least-once)."""
        wait = self.fetch_max_wait
        if wait is None:
            wait = auto_fetch_wait(Guarantee.AT_LEAST_ONCE)
        return round(wait * 1000)
