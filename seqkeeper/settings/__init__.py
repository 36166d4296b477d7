"""Settings: every variable declared once, grouped by concern.

A variable is declared by :func:`var` inside its group: its environment
variable, default, unit and help. The CLI's flags, ``seqkeeper settings``
and the README's configuration table are all rendered from these
declarations. A value comes, in order of precedence, from a CLI flag, from
the environment, or from the default.

This module sits at the bottom of the dependency graph: it imports the
standard library and the pure cores in :mod:`seqkeeper.processors` only, so
every layer (state, topologies, the Spark side, the shell) may read it.
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from seqkeeper.processors.audit_retention import AuditRetention
from seqkeeper.processors.authorization import TokenPolicy
from seqkeeper.processors.deduplicator import Retention
from seqkeeper.processors.envelope import DEFAULT_SHAPE, Codec, Shape
from seqkeeper.processors.key_retention import KeyRetention
from seqkeeper.processors.resequencer import Policy
from seqkeeper.processors.return_address import parse_patterns

T = TypeVar("T")

#: What ``Settings.topics`` and friends accept as a topology.
TOPOLOGIES = ("ordered", "commands")
#: The example domain's command handlers (inventory per SKU).
EXAMPLE_HANDLERS = "seqkeeper.processors.inventory:registry"


class SettingError(ValueError):
    """A variable's value cannot be used: the message names the variable."""


@dataclass(frozen=True)
class Var:
    """One variable's declaration."""

    name: str  #: field name, unique over all groups (``with_overrides`` takes it)
    group: str  #: the group's name (``broker``, ``ordered``, …)
    env: str  #: the environment variable
    default: str  #: the default, as it would be written in the environment
    unit: str  #: ``s``, ``MiB``, … or empty
    help: str  #: one or two sentences for the README and ``--help``
    parse: Callable[[str], Any]  #: text → value; ``ValueError`` with a reason
    secret: bool = False  #: never printed

    def read(self, environ: Mapping[str, str]) -> Any:
        text = environ.get(self.env, self.default)
        try:
            return self.parse(text)
        except ValueError as e:
            raise SettingError(f"{self.shown(text)}: {e}") from None

    def shown(self, text: str, label: str = "") -> str:
        """``label=text`` for an error message (``label``: the variable by
        default); a secret's value is never shown."""
        return f"{label or self.env}={'***' if self.secret else repr(text)}"

    def with_unit(self, text: str) -> str:
        """``text`` (a value of this variable) with its unit, if it has one
        and ``text`` is not empty."""
        return f"{text} {self.unit}" if self.unit and text else text

    def flag_help(self) -> str:
        """The help of this variable's CLI flag (rich markup escaped)."""
        default = self.with_unit(self.default) or "empty"
        return f"{self.help} \\[env {self.env}; default {default}]"


def var(
    env: str,
    default: str,
    help: str,
    parse: Callable[[str], T] = str,  # type: ignore[assignment]
    unit: str = "",
    secret: bool = False,
) -> T:
    """A settings field read from ``env`` (``default`` when unset). Its name
    and group are filled in by :func:`_declared` once the class exists."""
    spec = Var("", "", env, default, unit, help, parse, secret)
    holder = [spec]
    return field(  # type: ignore[no-any-return]
        default_factory=lambda: holder[0].read(os.environ), metadata={"var": holder}
    )


# -- parsers: text to value, or a ValueError saying what was expected --------


def integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("expected a whole number") from None


def non_negative_integer(text: str) -> int:
    value = integer(text)
    if value < 0:
        raise ValueError("expected a whole number of at least 0")
    return value


def field_path(text: str) -> tuple[str, ...]:
    """A field's dotted path (``a.b``) as its parts; empty: ``()``."""
    parts = tuple(text.split(".")) if text else ()
    if any(not part for part in parts):
        raise ValueError("expected a dotted path of field names, such as meta.key")
    return parts


def dotted_path(text: str) -> str:
    """A setting holding a :func:`field_path`, checked when read, so that a
    bad one is a setting error, not a failure when the worker builds its
    shape."""
    field_path(text)
    return text


def positive_integer(text: str) -> int:
    value = integer(text)
    if value < 1:
        raise ValueError("expected a whole number of at least 1")
    return value


def number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number") from None
    if math.isnan(value):
        raise ValueError("expected a number")
    return value


def seconds(text: str) -> float:
    """A non-negative number of seconds; ``inf``: no limit."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:  # also NaN
        raise ValueError("expected a non-negative number of seconds")
    return value


def parse_seconds(name: str, text: str) -> float:
    """``text`` (the value of variable ``name``) as :func:`seconds`; the
    error names the variable."""
    try:
        return seconds(text)
    except ValueError:
        raise ValueError(f"{name} must be a non-negative number of seconds, got {text!r}") from None


class Guarantee(enum.StrEnum):
    """The processing guarantee a worker runs: one choice, made once
    (``SEQKEEPER_PROCESSING_GUARANTEE``, ``auto`` resolved against the broker
    at the worker's start); its values are the setting's strings."""

    #: the write-ahead outbox: state, then outputs, then input offsets
    AT_LEAST_ONCE = "at_least_once"
    #: Kafka transactions: state, outputs and input offsets together
    EXACTLY_ONCE = "exactly_once"


def choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError("expected one of " + ", ".join(allowed))
        return text

    parse.__name__ = "choice"
    return parse


#: The shortest bearer token accepted: a guessable one protects nothing.
MIN_TOKEN_CHARS = 16


def bearer_token(text: str) -> str:
    """A bearer token: printable ASCII without spaces (as an ``Authorization``
    header carries it), at least :data:`MIN_TOKEN_CHARS` long; empty: none.
    The error never quotes the text (it is a secret)."""
    if not text:
        return text
    if not all(33 <= ord(c) <= 126 for c in text):
        raise ValueError(
            "expected printable ASCII without spaces (it travels in an Authorization header)"
        )
    if len(text) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"expected at least {MIN_TOKEN_CHARS} characters, e.g. the output of "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return text


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list; blanks dropped."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def boolean(text: str) -> bool:
    """true/false, yes/no, on/off or 1/0 (any case)."""
    value = text.strip().lower()
    if value in ("true", "yes", "on", "1"):
        return True
    if value in ("false", "no", "off", "0"):
        return False
    raise ValueError("expected true or false")


def upper_choice(*allowed: str) -> Callable[[str], str]:
    """:func:`choice`, any case (``scram-sha-512`` is ``SCRAM-SHA-512``)."""
    exact = choice(*allowed)

    def parse(text: str) -> str:
        return exact(text.strip().upper())

    parse.__name__ = "choice"
    return parse


class Secret:
    """A secret text (a password): its ``repr`` and ``str`` never show it;
    :meth:`reveal` does, for the one call that needs it."""

    __slots__ = ("_value",)

    def __init__(self, value: str = "") -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))


def security_env_names() -> dict[str, str]:
    """The variables of the security settings, by their role in
    :func:`security_problem`."""
    return {
        key: VARS[name].env
        for key, name in (
            ("protocol", "security_protocol"),
            ("username", "sasl_username"),
            ("password", "sasl_password"),
            ("password_file", "sasl_password_file"),
            ("cafile", "ssl_cafile"),
            ("certfile", "ssl_certfile"),
            ("keyfile", "ssl_keyfile"),
        )
    }


#: What ``SEQKEEPER_SECURITY_PROTOCOL`` and ``SEQKEEPER_SASL_MECHANISM`` accept
#: (Kafka's names).
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def security_problem(
    names: Mapping[str, str],
    protocol: str,
    username: str,
    password: bool,
    password_file: bool,
    cafile: str,
    certfile: str,
    keyfile: str,
) -> str | None:
    """What is wrong with a combination of client security settings (None:
    nothing). ``names`` maps ``protocol``, ``username``, ``password``,
    ``password_file``, ``cafile``, ``certfile``, ``keyfile`` to what the
    user wrote (environment variables, or the Spark source's options), so
    the message names them. The password itself is never in the message."""
    sasl = protocol.startswith("SASL_")
    tls = protocol.endswith("SSL")
    if sasl:
        if not username:
            return f"{names['protocol']}={protocol} needs {names['username']}"
        if password and password_file:
            return f"{names['password']} and {names['password_file']} are both set: give one"
        if not (password or password_file):
            return f"{names['protocol']}={protocol} needs {names['password']} or {names['password_file']}"
    else:
        given = [
            names[key]
            for key, set_ in (
                ("username", username),
                ("password", password),
                ("password_file", password_file),
            )
            if set_
        ]
        if given:
            return (
                f"{', '.join(given)} set, but {names['protocol']}={protocol} uses no SASL: "
                "set it to SASL_SSL or SASL_PLAINTEXT"
            )
    if not tls:
        given = [
            names[key]
            for key, v in (("cafile", cafile), ("certfile", certfile), ("keyfile", keyfile))
            if v
        ]
        if given:
            return (
                f"{', '.join(given)} set, but {names['protocol']}={protocol} uses no TLS: "
                "set it to SSL or SASL_SSL"
            )
    if keyfile and not certfile:
        return f"{names['keyfile']} needs {names['certfile']} (the client certificate)"
    return None


# -- the groups ----------------------------------------------------------------


@dataclass(frozen=True)
class BrokerSettings:
    """Which Kafka, and the topics the worker creates on it."""

    bootstrap: str = var(
        "KAFKA_BOOTSTRAP_SERVERS",
        "",
        "Kafka bootstrap servers, host:port[,host:port]. Empty: start a broker "
        "(Apache Kafka from KAFKA_HOME, else the embedded one).",
    )
    kafka_home: str = var(
        "KAFKA_HOME",
        "",
        "An Apache Kafka distribution directory (3.7+ or 4.x). With no bootstrap servers, "
        "commands that start a broker start a fresh single-node Kafka from it.",
    )
    broker_wait: float = var(
        "SEQKEEPER_BROKER_WAIT",
        "300",
        "How long the worker waits at start for its broker (a line per attempt, backoff "
        "0.5 s to 10 s) before it exits 1; inf: no limit. A broker lost later is retried "
        "without limit.",
        seconds,
        "s",
    )
    partitions: int = var(
        "SEQKEEPER_PARTITIONS",
        "4",
        "Partitions of the topics the worker creates (input, outputs, changelogs).",
        positive_integer,
    )
    replication: int = var(
        "SEQKEEPER_REPLICATION",
        "1",
        "Replication factor of the topics the worker creates.",
        positive_integer,
    )
    isolation: str = var(
        "SEQKEEPER_ISOLATION",
        "read_committed",
        "How the readers outside the worker (compact and the Spark source, replay's audit, "
        "inspect, verify, seqkeeper.client) read topics: read_committed sees only what "
        "transactions committed (on a broker without transactions, every record); "
        "read_uncommitted also sees the writes of aborted and still open transactions.",
        choice("read_committed", "read_uncommitted"),
    )


@dataclass(frozen=True)
class SecuritySettings:
    """How every client connects to Kafka: TLS and SASL (seqkeeper.security)."""

    security_protocol: str = var(
        "SEQKEEPER_SECURITY_PROTOCOL",
        "PLAINTEXT",
        "PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS): every client "
        "seqkeeper creates (worker, CLI tools, Spark source) uses it.",
        upper_choice(*PROTOCOLS),
    )
    sasl_mechanism: str = var(
        "SEQKEEPER_SASL_MECHANISM",
        "SCRAM-SHA-512",
        "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
        upper_choice(*MECHANISMS),
    )
    sasl_username: str = var("SEQKEEPER_SASL_USERNAME", "", "SASL user name.")
    sasl_password: Secret = var(
        "SEQKEEPER_SASL_PASSWORD",
        "",
        "SASL password (never printed). Or SEQKEEPER_SASL_PASSWORD_FILE, not both.",
        Secret,
        secret=True,
    )
    sasl_password_file: str = var(
        "SEQKEEPER_SASL_PASSWORD_FILE",
        "",
        "A file holding the SASL password (a mounted secret; a final newline is dropped).",
    )
    ssl_cafile: str = var(
        "SEQKEEPER_SSL_CAFILE",
        "",
        "PEM file of the CA certificates that sign the brokers' certificates. Empty: the "
        "system's trusted CAs.",
    )
    ssl_certfile: str = var(
        "SEQKEEPER_SSL_CERTFILE",
        "",
        "PEM client certificate, for mutual TLS (may hold the key too).",
    )
    ssl_keyfile: str = var(
        "SEQKEEPER_SSL_KEYFILE", "", "PEM private key of the client certificate (unencrypted)."
    )
    ssl_principal_mapping_rules: str = var(
        "SEQKEEPER_SSL_PRINCIPAL_MAPPING_RULES",
        "DEFAULT",
        "The brokers' ssl.principal.mapping.rules, same syntax: with a client certificate and "
        "no SASL, the principal that `seqkeeper acls` and missing-ACL lines name is the "
        "certificate's subject mapped by them.",
    )
    ssl_check_hostname: bool = var(
        "SEQKEEPER_SSL_CHECK_HOSTNAME",
        "true",
        "Whether a broker's certificate must name the host connected to.",
        boolean,
    )

    def __post_init__(self) -> None:
        problem = security_problem(
            security_env_names(),
            self.security_protocol,
            self.sasl_username,
            bool(self.sasl_password),
            bool(self.sasl_password_file),
            self.ssl_cafile,
            self.ssl_certfile,
            self.ssl_keyfile,
        )
        if problem:
            raise SettingError(problem)


@dataclass(frozen=True)
class RuntimeSettings:
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
    fetch_max_wait: float = var(
        "SEQKEEPER_FETCH_MAX_WAIT",
        "0.02",
        "Longest a fetch waits at the broker for records: an upper bound on the latency it adds.",
        seconds,
        "s",
    )
    gc_threshold: str = var(
        "SEQKEEPER_GC_THRESHOLD",
        "5000,20,50",
        "The garbage collector's thresholds (gc.set_threshold), three integers. Every "
        "record leaves objects alive until the next outbox cycle, so CPython's default "
        "(700,10,10) collects far too often for this worker.",
    )
    switch_interval: float = var(
        "SEQKEEPER_SWITCH_INTERVAL",
        "0.05",
        "How long a thread runs before CPython hands the interpreter lock to another "
        "(sys.setswitchinterval): the worker's threads take turns less often.",
        number,
        "s",
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

    def query_token(self) -> str | None:
        """The bearer token state queries must carry (``None``: none), from
        :attr:`http_token` or the file :attr:`http_token_file` names. A
        ``SettingError`` names the variable and what to do; it never quotes
        the token."""
        token_var, file_var = VARS["http_token"].env, VARS["http_token_file"].env
        if not self.http_token_file:
            return self.http_token or None
        if self.http_token:
            raise SettingError(
                f"both {token_var} and {file_var} are set: set one of them (the token, or "
                "the file that holds it)"
            )
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
        take it), checked (not negative)."""
        if not self.fetch_max_wait >= 0:
            raise ValueError(
                "fetch max wait must be a non-negative number of seconds, "
                f"got {self.fetch_max_wait!r}"
            )
        return round(self.fetch_max_wait * 1000)


@dataclass(frozen=True)
class OrderedSettings:
    """The ordered topology: Resequencer and Idempotent Receiver."""

    input_topic: str = var("SEQKEEPER_INPUT_TOPIC", "events.in", "Input topic.")
    ordered_topic: str = var(
        "SEQKEEPER_ORDERED_TOPIC", "events.ordered", "Output in per-key order, deduplicated."
    )
    deduped_topic: str = var(
        "SEQKEEPER_DEDUPED_TOPIC", "events.deduped", "Output in arrival order, deduplicated."
    )
    dlq_topic: str = var(
        "SEQKEEPER_DLQ_TOPIC", "events.dlq", "Dead letters, with the reason in headers."
    )
    late_topic: str = var(
        "SEQKEEPER_LATE_TOPIC", "events.late", "Late arrivals, when the late policy is late-topic."
    )
    first_seq: str = var(
        "SEQKEEPER_FIRST_SEQ",
        "one",
        "First sequence of a key: one (1), or first-seen (the first the worker sees).",
        choice("one", "first-seen"),
    )
    gap_timeout: float = var(
        "SEQKEEPER_GAP_TIMEOUT",
        "5",
        "How long a gap may hold back buffered messages before it is given up (a "
        "GapSkipped marker is emitted), in event time.",
        seconds,
        "s",
    )
    max_buffered_per_key: int = var(
        "SEQKEEPER_MAX_BUFFERED_PER_KEY", "10000", "Buffered messages per key.", positive_integer
    )
    max_buffered_total: int = var(
        "SEQKEEPER_MAX_BUFFERED",
        "1000000",
        "Buffered messages over all keys of a worker.",
        positive_integer,
    )
    overflow_policy: str = var(
        "SEQKEEPER_OVERFLOW_POLICY",
        "skip",
        "On a full buffer: skip the gap early, or dlq the message.",
        choice("skip", "dlq"),
    )
    late_policy: str = var(
        "SEQKEEPER_LATE_POLICY",
        "dlq",
        "A late arrival (its sequence was given up): dlq, drop, or late-topic.",
        choice("dlq", "drop", "late-topic"),
    )
    seen_max_age: float = var(
        "SEQKEEPER_SEEN_MAX_AGE",
        str(7 * 24 * 3600),
        "How long a seen messageId is remembered (7 days).",
        seconds,
        "s",
    )
    key_retention: float = var(
        "SEQKEEPER_KEY_RETENTION",
        str(7 * 24 * 3600),
        "How long a key with nothing buffered or unconfirmed may stay idle (in stream time, "
        "since it last accepted a message) before it is forgotten: its state is deleted, "
        "locally and in the changelog, leaving a small marker of its next sequence (7 days: "
        "longer than any gap timeout or seen-id age, and than any realistic producer retry "
        "or outage). inf: never.",
        seconds,
        "s",
    )
    forgotten_key_retention: float = var(
        "SEQKEEPER_FORGOTTEN_KEY_RETENTION",
        str(30 * 24 * 3600),
        "How long the marker of a forgotten key is kept: a message for it below its next "
        "sequence is a late arrival, one at or above continues the key. After that the key "
        "is fully gone and starts again as a new key (30 days). inf: forever.",
        seconds,
        "s",
    )
    seen_max_per_key: int = var(
        "SEQKEEPER_SEEN_MAX_PER_KEY",
        "100000",
        "Seen messageIds remembered per key.",
        positive_integer,
    )
    key_field: str = var(
        "SEQKEEPER_KEY_FIELD",
        "",
        "Where a message's sequence key is: empty for the Kafka key, else the dotted path of "
        "a field of the value (then the input is repartitioned by it through an internal "
        "topic).",
        dotted_path,
    )
    seq_field: str = var(
        "SEQKEEPER_SEQ_FIELD", "seq", "The dotted path of the sequence number's field.", dotted_path
    )
    seq_header: str = var(
        "SEQKEEPER_SEQ_HEADER",
        "",
        "A header holding the sequence number (ASCII digits) instead of a field.",
    )
    message_id_field: str = var(
        "SEQKEEPER_MESSAGE_ID_FIELD",
        "messageId",
        "The dotted path of the messageId's field.",
        dotted_path,
    )
    message_id_header: str = var(
        "SEQKEEPER_MESSAGE_ID_HEADER", "", "A header holding the messageId instead of a field."
    )
    codec: str = var(
        "SEQKEEPER_CODEC",
        "json",
        "How input values are read: json, or module:attribute naming an object with "
        "decode(bytes) -> mapping (e.g. Avro).",
    )
    processor: str = var(
        "SEQKEEPER_PROCESSOR",
        "",
        "An ordered processor, module:function: fn(state, message) -> (new_state, outputs) "
        "runs on every message of a key once, in sequence order (the current directory is "
        "importable). Empty: none.",
    )
    processed_topic: str = var(
        "SEQKEEPER_PROCESSED_TOPIC", "events.processed", "The ordered processor's outputs."
    )
    event_time_field: str = var(
        "SEQKEEPER_EVENT_TIME_FIELD",
        "",
        "Event time for gap timeouts and seen-id ages: the dotted path of a field of the "
        "value (epoch milliseconds, or ISO-8601 with offset). Empty: the record timestamp.",
        dotted_path,
    )
    max_clock_skew: float = var(
        "SEQKEEPER_MAX_CLOCK_SKEW",
        "300",
        "How far a message's event time may run ahead of the worker's clock. One further "
        "ahead is dead-lettered (future-event-time) and does not move stream time, so it "
        "cannot give up other keys' gaps; inf: no bound.",
        seconds,
        "s",
    )

    def resequencer_policy(self) -> Policy:
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
        try:
            return field_path(self.event_time_field)
        except ValueError:
            raise ValueError(f"event time field: bad path {self.event_time_field!r}") from None

    def shape(self, codec: Codec | None = None) -> Shape:
        """Where messages keep their key, sequence and messageId; ``codec``:
        the user's (loaded by the worker), ``None`` for JSON."""

        def path(name: str, text: str) -> tuple[str, ...]:
            try:
                return field_path(text)
            except ValueError:
                raise ValueError(f"{VARS[name].env}: bad dotted path {text!r}") from None

        shape = Shape(
            key_path=path("key_field", self.key_field),
            seq_path=path("seq_field", self.seq_field) or ("seq",),
            seq_header=self.seq_header,
            id_path=path("message_id_field", self.message_id_field) or ("messageId",),
            id_header=self.message_id_header,
            codec=codec,
        )
        return DEFAULT_SHAPE if shape == DEFAULT_SHAPE else shape

    def retention(self) -> Retention:
        return Retention(max_age=self.seen_max_age, max_per_key=self.seen_max_per_key)

    def key_retention_policy(self) -> KeyRetention:
        return KeyRetention(idle=self.key_retention, forgotten=self.forgotten_key_retention)

    def changelog_topic_configs(self) -> dict[str, str]:
        """Configs of the changelog topics the worker creates (besides
        ``cleanup.policy=compact``): deletions (a forgotten key, an ended
        entity) are tombstones, which compaction keeps
        ``delete.retention.ms``; a standby or a restore that reads the topic
        later than that misses the delete and keeps the key. So at least the
        key retention, and never under Kafka's default of one day."""
        day_ms = 24 * 3600 * 1000
        keep = self.key_retention * 1000
        ms = day_ms if math.isinf(keep) else max(day_ms, int(keep))
        return {"delete.retention.ms": str(ms)}

    def topics(self) -> list[str]:
        return [
            self.input_topic,
            self.ordered_topic,
            self.deduped_topic,
            self.dlq_topic,
            self.late_topic,
            *([self.processed_topic] if self.processor else []),
        ]


@dataclass(frozen=True)
class CommandSettings:
    """The commands topology: command handler and outbox."""

    handlers: str = var(
        "SEQKEEPER_HANDLERS",
        "",
        "The command handlers, module:attribute naming a seqkeeper.Registry (the current "
        "directory is importable). The commands topology needs it; the example domain is "
        "seqkeeper.processors.inventory:registry.",
    )
    command_topic: str = var("SEQKEEPER_COMMAND_TOPIC", "commands.in", "Command topic.")
    events_topic: str = var(
        "SEQKEEPER_EVENTS_TOPIC", "commands.events", "Domain events emitted by command handlers."
    )
    command_dlq_topic: str = var(
        "SEQKEEPER_COMMAND_DLQ_TOPIC", "commands.dlq", "Dead letters of the command topic."
    )
    reply_topics: tuple[str, ...] = var(
        "SEQKEEPER_REPLY_TOPICS",
        "*replies",
        "Where a command's replyTo may point: comma-separated topic names, * standing for any "
        "run of characters (shop.replies,tenant-*.replies). Never the worker's own topics, "
        "its app id's G- prefix, nor __*, whatever this says. Others: dead-lettered "
        "invalid-reply-to, not applied.",
        parse_patterns,
    )
    command_attempts: int = var(
        "SEQKEEPER_COMMAND_ATTEMPTS",
        "5",
        "Attempts of a command handler (on transient errors) or ordered processor before the "
        "message is dead-lettered.",
        positive_integer,
    )
    command_retry_delay: float = var(
        "SEQKEEPER_COMMAND_RETRY_DELAY",
        "0.5",
        "First retry delay, doubled per attempt up to 30 s.",
        seconds,
        "s",
    )
    handler_timeout: float = var(
        "SEQKEEPER_HANDLER_TIMEOUT",
        "30",
        "How long a command handler or ordered processor may run before the attempt counts "
        "as failed (and is retried). A sync one runs in a worker thread, which cannot be "
        "stopped: its key waits until it returns.",
        seconds,
        "s",
    )
    receipt_max_age: float = var(
        "SEQKEEPER_RECEIPT_MAX_AGE",
        str(7 * 24 * 3600),
        "How long a dispatched command's receipt (its dedup marker) is kept (7 days).",
        seconds,
        "s",
    )
    command_auth: str = var(
        "SEQKEEPER_COMMAND_AUTH",
        "off",
        "Whether each command must carry a signed token: off, or jwt (an authorization: Bearer "
        "<JWT> record header; its tenant claim must equal tenantId, its scope allow the "
        "commandType, else the command is dead-lettered unauthorized; docs/security.md).",
        choice("off", "jwt"),
    )
    jwt_keys: str = var(
        "SEQKEEPER_JWT_KEYS",
        "",
        "The public keys that verify command tokens, by kid (several during a rotation): a "
        "JWKS file, or a directory of <kid>.pem files. Read at start.",
    )
    jwt_issuer: str = var(
        "SEQKEEPER_JWT_ISSUER", "", "The iss a command token must have. Empty: not checked."
    )
    jwt_audience: str = var(
        "SEQKEEPER_JWT_AUDIENCE",
        "",
        "The aud a command token must name. Empty: a token that names one is refused.",
    )
    jwt_leeway: float = var(
        "SEQKEEPER_JWT_LEEWAY",
        "30",
        "Clock skew allowed on a command token's exp, nbf and iat (exp is required).",
        seconds,
        "s",
    )

    def topics(self) -> list[str]:
        return [self.command_topic, self.events_topic, self.command_dlq_topic]

    def token_policy(self) -> TokenPolicy:
        """What a command's verified token is checked against
        (:func:`processors.authorization.authorize`)."""
        return TokenPolicy(self.jwt_leeway, self.jwt_issuer or None, self.jwt_audience or None)


@dataclass(frozen=True)
class SparkSettings:
    """The Spark side: compaction to Parquet, audit log, replay."""

    audit_key: str = var(
        "SEQKEEPER_AUDIT_KEY",
        "",
        "Key that encrypts the sensitive fields in the audit log: 32 bytes, url-safe "
        "base64 (seqkeeper keygen). Empty: nothing is encrypted.",
        secret=True,
    )
    audit_key_file: str = var(
        "SEQKEEPER_AUDIT_KEY_FILE",
        "",
        "A file holding the audit key instead (a mounted secret; surrounding whitespace "
        "ignored). Set this or SEQKEEPER_AUDIT_KEY, not both.",
    )
    audit_decrypt_keys: tuple[str, ...] = var(
        "SEQKEEPER_AUDIT_DECRYPT_KEYS",
        "",
        "Comma-separated old audit keys that open data but never seal it (key rotation, "
        "docs/security.md).",
        names,
        secret=True,
    )
    audit_decrypt_keys_file: str = var(
        "SEQKEEPER_AUDIT_DECRYPT_KEYS_FILE",
        "",
        "A file holding the decrypt-only keys instead (one per line, or comma-separated).",
    )
    sensitive_fields: tuple[str, ...] = var(
        "SEQKEEPER_SENSITIVE_FIELDS",
        "",
        "Comma-separated value fields that the audit log stores encrypted (needs the key).",
        names,
    )

    audit_retention: AuditRetention = var(
        "SEQKEEPER_AUDIT_RETENTION",
        "",
        "How long compact keeps each category's audit rows, e.g. orders=90d,payments=7y,*=inf "
        "(units d, w, y; * the others; whole days; docs/spark.md). Empty: every row is kept.",
        AuditRetention.parse,
    )

    iceberg_catalog: str = var(
        "SEQKEEPER_ICEBERG_CATALOG",
        "",
        "URL of an Iceberg REST catalog for the warehouse's tables (docs/spark.md). Empty: "
        "an embedded SQL catalog on a SQLite file in the warehouse (catalog.db).",
    )

    def audit_key_text(self) -> str:
        """The current audit key's text, from the variable or its file
        (empty: no key). Never echoes the key: errors name the variables
        and the file's path only."""
        return _secret_text(self.audit_key, "audit_key", self.audit_key_file, "audit_key_file")

    def audit_decrypt_key_texts(self) -> tuple[str, ...]:
        """The decrypt-only keys' texts, from the variable or its file."""
        if not self.audit_decrypt_keys_file:
            return self.audit_decrypt_keys
        text = _secret_text(
            ",".join(self.audit_decrypt_keys),
            "audit_decrypt_keys",
            self.audit_decrypt_keys_file,
            "audit_decrypt_keys_file",
        )
        return names(text.replace("\n", ","))


def _secret_text(value: str, name: str, path: str, file_name: str) -> str:
    """A secret given either inline (variable ``name``) or as a file
    (variable ``file_name``): setting both is ambiguous, so an error; the
    file's surrounding whitespace (a trailing newline) is dropped."""
    env, file_env = VARS[name].env, VARS[file_name].env
    if not path:
        return value
    if value:
        raise SettingError(f"both {env} and {file_env} are set: unset one of them")
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise SettingError(
            f"{file_env}={path!r}: cannot read it ({e.strerror or e}): mount the file there "
            f"or unset {file_env}"
        ) from None
    except UnicodeDecodeError:
        raise SettingError(f"{file_env}={path!r}: not a text file") from None
    if not text:
        raise SettingError(f"{file_env}={path!r}: the file is empty")
    return text


GROUPS: dict[str, type] = {
    "broker": BrokerSettings,
    "security": SecuritySettings,
    "runtime": RuntimeSettings,
    "ordered": OrderedSettings,
    "commands": CommandSettings,
    "spark": SparkSettings,
}


@dataclass(frozen=True)
class Settings:
    """All settings, a group per concern. Build one with ``Settings()``
    (environment and defaults) or ``Settings.of(name=value, …)``."""

    broker: BrokerSettings = field(default_factory=BrokerSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)
    ordered: OrderedSettings = field(default_factory=OrderedSettings)
    commands: CommandSettings = field(default_factory=CommandSettings)
    spark: SparkSettings = field(default_factory=SparkSettings)

    @classmethod
    def of(cls, **overrides: Any) -> Settings:
        """The environment's settings with the named variables replaced."""
        return cls().with_overrides(**overrides)

    @property
    def group_id(self) -> str:
        """The Faust app id (consumer group, changelog prefix) of the topology."""
        app_id = self.runtime.app_id
        return f"{app_id}-commands" if self.runtime.topology == "commands" else app_id

    def repartition_topic(self) -> str | None:
        """The internal topic the ordered topology's input goes through when
        its key is a field of the value (``None``: the Kafka key is the key)."""
        if self.runtime.topology == "commands" or not self.ordered.key_field:
            return None
        return f"{self.group_id}-{self.ordered.input_topic}-repartition"

    def topics(self) -> list[str]:
        """Every topic the worker reads or writes (created when missing)."""
        if self.runtime.topology == "commands":
            return self.commands.topics()
        internal = self.repartition_topic()
        return [*self.ordered.topics(), *([internal] if internal else [])]

    def to_env(self) -> dict[str, str]:
        """These settings as the environment variables that set them."""
        env = {}
        for v in VARS.values():
            value = getattr(getattr(self, v.group), v.name)
            if isinstance(value, Secret):
                env[v.env] = value.reveal()
            elif isinstance(value, bool):
                env[v.env] = "true" if value else "false"
            else:
                env[v.env] = ",".join(value) if isinstance(value, tuple) else str(value)
        return env

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the named variables (field names, see :data:`VARS`)
        replaced; ``None`` values are ignored (CLI flags not given)."""
        unknown = set(overrides) - set(VARS)
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
        changed: dict[str, dict[str, Any]] = {}
        for name, value in overrides.items():
            if value is None:
                continue
            v = VARS[name]
            if isinstance(value, str) and v.parse is not str:
                try:  # a flag's text is checked as the variable's would be
                    value = v.parse(value)
                except ValueError as e:
                    raise SettingError(f"{v.shown(value, name.replace('_', '-'))}: {e}") from None
            changed.setdefault(v.group, {})[name] = value
        return replace(
            self,
            **{group: replace(getattr(self, group), **kw) for group, kw in changed.items()},
        )


def _declared() -> dict[str, Var]:
    """Every variable by field name, with its name and group filled in."""
    out: dict[str, Var] = {}
    for group, cls in GROUPS.items():
        for f in fields(cls):
            holder = f.metadata["var"]
            holder[0] = replace(holder[0], name=f.name, group=group)
            if f.name in out:
                raise TypeError(f"setting {f.name} is declared twice")
            out[f.name] = holder[0]
    return out


#: Every variable, by field name, in declaration order (grouped).
VARS: dict[str, Var] = _declared()


def effective(environ: Mapping[str, str] | None = None) -> Iterator[tuple[Var, str, str]]:
    """(variable, value as text, source) for each variable: the source is
    ``env`` or ``default``; secrets show as ``***`` when set."""
    environ = os.environ if environ is None else environ
    for v in VARS.values():
        source = "env" if v.env in environ else "default"
        text = environ.get(v.env, v.default)
        if v.secret and text:
            text = "***"
        yield v, text, source


def markdown_table() -> str:
    """The README's configuration table: a row per group, then its variables."""
    lines = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for group, cls in GROUPS.items():
        lines.append(f"| **{group}** | | *{(cls.__doc__ or '').strip()}* |")
        for v in VARS.values():
            if v.group != group:
                continue
            default = v.with_unit(f"`{v.default}`") if v.default else "(empty)"
            lines.append(f"| `{v.env}` | {default} | {v.help} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
