"""How every Kafka client seqkeeper creates connects: TLS and SASL.

:class:`ClientSecurity` is the one description of it, built from the
settings (:class:`seqkeeper.settings.SecuritySettings`: the environment) or
from the Spark source's ``kafka.*`` options (:meth:`ClientSecurity.from_options`).
:meth:`ClientSecurity.kafka_options` turns it into aiokafka's keyword
arguments; the Faust app gets the same through ``broker_credentials``
(:func:`seqkeeper.runtime.wiring.make_app`).

Every aiokafka client is created with ``**kafka_options(...)``
(``tests/test_security_clients.py`` fails on one that is not). The
functions that create them mostly take a plain ``bootstrap`` string, and
are called from the worker, the CLI, the tests and the bench: rather than
thread a new parameter through all of them, :func:`kafka_options` with no
argument uses the *process default*, :func:`current`: the environment's
settings (as every other setting, and inherited by the worker processes
that tests, demo and chaos start), or what a command installed from its
settings with :func:`install`. A function that has a ``Settings`` or a
``ClientSecurity`` at hand passes it explicitly.

Secrets: the password is a :class:`~seqkeeper.settings.Secret` (its repr
shows ``***``); it leaves that wrapper only in :meth:`kafka_options`, for
aiokafka's connection, and in Faust's ``SASLCredentials`` (whose repr
shows the user only). No message of this module names it.

Failures: aiokafka reports a failed authentication or an untrusted
certificate only as ``Unable to bootstrap from [...]`` and logs the cause
separately; :func:`surfaced` and :func:`security_cause` turn that cause
into one :class:`SecurityFailure` line ("authentication failed",
"certificate verify failed").

This module sits just above :mod:`seqkeeper.settings`: the standard library
only (``ssl`` for the context, as aiokafka's ``create_ssl_context`` builds
it), so every layer may use it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from seqkeeper.settings import (
    MECHANISMS,
    PROTOCOLS,
    VARS,
    Secret,
    SecuritySettings,
    SettingError,
    security_env_names,
    security_problem,
)

#: The Spark source's security options (as Spark's own Kafka source names
#: them, ``kafka.`` and the Kafka client's property): the option, then
#: the :class:`ClientSecurity` field it sets.
SPARK_OPTIONS: dict[str, str] = {
    "kafka.security.protocol": "protocol",
    "kafka.sasl.mechanism": "mechanism",
    "kafka.sasl.username": "username",
    "kafka.sasl.password": "password",
    "kafka.sasl.password.file": "password_file",
    "kafka.ssl.cafile": "cafile",
    "kafka.ssl.certfile": "certfile",
    "kafka.ssl.keyfile": "keyfile",
    "kafka.ssl.check.hostname": "check_hostname",
}
#: Options of Spark's Kafka source this one refuses (Java-only forms).
REFUSED_PREFIXES = ("kafka.sasl.jaas", "kafka.ssl.keystore", "kafka.ssl.truststore")

_ENV_NAMES = security_env_names()
_OPTION_NAMES = {v: k for k, v in SPARK_OPTIONS.items()}


class BrokerRefused(RuntimeError):
    """The broker refused this client, or the client the broker: one line
    naming what to change (:class:`SecurityFailure`, and
    :class:`seqkeeper.permissions.PermissionDenied` for an ACL)."""


class SecurityFailure(BrokerRefused):
    """The broker refused this client's credentials, or this client did not
    trust the broker's certificate: one line saying which."""


def read_password_file(path: str, name: str) -> Secret:
    """The password in the file ``path`` (``name``: the variable or option
    that named it, for the message), without its final newline."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SettingError(
            f"{name}={path}: cannot read it ({e.strerror or type(e).__name__})"
        ) from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise SettingError(f"{name}={path}: the file is empty")
    return Secret(text)


@dataclass(frozen=True)
class ClientSecurity:
    """How a Kafka client connects: protocol, SASL user, TLS files."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "SCRAM-SHA-512"
    username: str = ""
    password: Secret = field(default_factory=Secret)
    cafile: str = ""
    certfile: str = ""
    keyfile: str = ""
    check_hostname: bool = True

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")

    @classmethod
    def of(cls, settings: SecuritySettings) -> ClientSecurity:
        """From the settings (already checked); the password file is read
        here. A :class:`SettingError` if it cannot be."""
        password = settings.sasl_password
        if settings.sasl_password_file:
            password = read_password_file(settings.sasl_password_file, _ENV_NAMES["password_file"])
        return cls(
            protocol=settings.security_protocol,
            mechanism=settings.sasl_mechanism,
            username=settings.sasl_username,
            password=password,
            cafile=settings.ssl_cafile,
            certfile=settings.ssl_certfile,
            keyfile=settings.ssl_keyfile,
            check_hostname=settings.ssl_check_hostname,
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ClientSecurity:
        """From the environment's ``SEQKEEPER_SECURITY_*``, ``_SASL_*`` and
        ``_SSL_*`` variables (a :class:`SettingError` naming the variable)."""
        environ = os.environ if environ is None else environ
        values = {f.name: VARS[f.name].read(environ) for f in fields(SecuritySettings)}
        return cls.of(SecuritySettings(**values))

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ClientSecurity:
        """From the Spark source's options (:data:`SPARK_OPTIONS`, PEM files).
        A JAAS config or a Java keystore/truststore is refused naming the
        accepted options; a bad value names its option, never a password."""
        accepted = ", ".join(SPARK_OPTIONS)
        for key in options:
            lower = key.lower()
            if lower.startswith(REFUSED_PREFIXES):
                raise SettingError(
                    f"option {key} is not supported (no JAAS config or Java keystore here): "
                    f"give the user and password, and PEM files, with {accepted}"
                )
            if (
                lower.startswith(("kafka.sasl.", "kafka.ssl."))
                or lower == "kafka.security.protocol"
            ) and (lower not in SPARK_OPTIONS):
                raise SettingError(
                    f"option {key} is not supported; the security options are {accepted}"
                )
        given = {
            SPARK_OPTIONS[k.lower()]: v for k, v in options.items() if k.lower() in SPARK_OPTIONS
        }
        protocol = given.get("protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise SettingError(
                f"kafka.security.protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}"
            )
        mechanism = given.get("mechanism", "SCRAM-SHA-512").strip().upper()
        if mechanism not in MECHANISMS:
            raise SettingError(
                f"kafka.sasl.mechanism={mechanism!r}: expected one of {', '.join(MECHANISMS)}"
            )
        check = given.get("check_hostname", "true").strip().lower()
        if check not in ("true", "false"):
            raise SettingError(f"kafka.ssl.check.hostname={check!r}: expected true or false")
        password = Secret(given.get("password", ""))
        password_file = given.get("password_file", "")
        problem = security_problem(
            _OPTION_NAMES,
            protocol,
            given.get("username", ""),
            bool(password),
            bool(password_file),
            given.get("cafile", ""),
            given.get("certfile", ""),
            given.get("keyfile", ""),
        )
        if problem:
            raise SettingError(problem)
        if password_file:
            password = read_password_file(password_file, "kafka.sasl.password.file")
        return cls(
            protocol=protocol,
            mechanism=mechanism,
            username=given.get("username", ""),
            password=password,
            cafile=given.get("cafile", ""),
            certfile=given.get("certfile", ""),
            keyfile=given.get("keyfile", ""),
            check_hostname=check == "true",
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context (None without TLS): the CA file or the system's
        CAs, the client certificate if any, hostname verification unless
        turned off. A :class:`SettingError` naming a file that cannot be read."""
        if not self.tls:
            return None
        try:
            context = ssl.create_default_context(
                ssl.Purpose.SERVER_AUTH, cafile=self.cafile or None
            )
        except (OSError, ssl.SSLError) as e:
            raise SettingError(
                f"{_ENV_NAMES['cafile']}={self.cafile}: cannot load it ({e})"
            ) from None
        context.check_hostname = self.check_hostname
        if self.certfile:
            # each file named by its variable: ssl's own error names neither
            for name, path in (("certfile", self.certfile), ("keyfile", self.keyfile)):
                try:
                    if path:
                        Path(path).read_bytes()
                except OSError as e:
                    raise SettingError(
                        f"{_ENV_NAMES[name]}={path}: cannot read it "
                        f"({e.strerror or type(e).__name__})"
                    ) from None
            try:
                context.load_cert_chain(self.certfile, self.keyfile or None)
            except (OSError, ssl.SSLError) as e:
                raise SettingError(
                    f"{_ENV_NAMES['certfile']}={self.certfile}: cannot load the client "
                    f"certificate and key ({e})"
                ) from None
        return context

    def kafka_options(self) -> dict[str, Any]:
        """aiokafka's keyword arguments for a client (producer, consumer,
        admin client, ``AIOKafkaClient``) connecting this way."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            options["ssl_context"] = self.ssl_context()
        if self.sasl:
            options["sasl_mechanism"] = self.mechanism
            options["sasl_plain_username"] = self.username
            options["sasl_plain_password"] = self.password.reveal()
        return options

    def spark_options(self) -> dict[str, str]:
        """These settings as the Spark source's options
        (:meth:`from_options` reads them back; only those set)."""
        given = {
            "protocol": self.protocol,
            "mechanism": self.mechanism if self.sasl else "",
            "username": self.username,
            "password": self.password.reveal(),
            "cafile": self.cafile,
            "certfile": self.certfile,
            "keyfile": self.keyfile,
            "check_hostname": "" if self.check_hostname else "false",
        }
        return {option: given[key] for option, key in SPARK_OPTIONS.items() if given.get(key)}

    def describe(self) -> str:
        """How the clients connect, for a log line (no password)."""
        if self.sasl:
            return f"{self.protocol}, {self.mechanism} as {self.username!r}"
        if self.tls:
            return f"{self.protocol}, " + (
                f"client certificate {self.certfile}" if self.certfile else "no client certificate"
            )
        return self.protocol


_installed: ClientSecurity | None = None


def install(security: ClientSecurity | None) -> None:
    """Make ``security`` the process default (None: the environment's again)."""
    global _installed
    _installed = security


@contextlib.contextmanager
def installed(security: ClientSecurity) -> Iterator[ClientSecurity]:
    """``security`` as the process default within the block."""
    before = _installed
    install(security)
    try:
        yield security
    finally:
        install(before)


def current() -> ClientSecurity:
    """The process default: what :func:`install` set, else the environment's."""
    return _installed if _installed is not None else ClientSecurity.from_environ()


def kafka_options(security: ClientSecurity | None = None) -> dict[str, Any]:
    """aiokafka's keyword arguments for ``security``, or for the process
    default (:func:`current`)."""
    return (security or current()).kafka_options()


# -- failures: what aiokafka logs instead of raising -----------------------------


#: The TLS alerts a broker with ``ssl.client.auth=required`` sends a client
#: with no certificate, or with one its truststore does not trust (Java's
#: TLS sends ``certificate_unknown`` for a certificate of another CA, as
#: for an expired one).
_CLIENT_CERTIFICATE_ALERTS = (
    "ALERT_BAD_CERTIFICATE",
    "CERTIFICATE_REQUIRED",
    "ALERT_UNKNOWN_CA",
    "ALERT_CERTIFICATE_UNKNOWN",
    "ALERT_CERTIFICATE_EXPIRED",
    "ALERT_CERTIFICATE_REVOKED",
    "ALERT_UNSUPPORTED_CERTIFICATE",
)


def security_cause(exc: BaseException) -> str | None:
    """What ``exc`` says, when it is a security failure: ``authentication
    failed (...)`` or ``certificate verify failed (...)``; else None.
    aiokafka's ``Connection at H:P closed`` is one when its cause is: in
    TLS 1.3 a client learns that the broker refused its certificate (or its
    lack of one) only from an alert after the handshake, on its first read."""
    cause = exc.__cause__
    if type(exc).__name__ == "KafkaConnectionError" and cause is not None:
        return security_cause(cause)
    from_kafka = type(exc).__name__
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed ({exc.verify_message or exc.reason})"
    if isinstance(exc, ssl.SSLError):
        if any(alert in str(exc.reason) for alert in _CLIENT_CERTIFICATE_ALERTS):
            return (
                "TLS handshake failed: the broker requires a client certificate it trusts "
                f"({exc.reason})"
            )
        return f"TLS handshake failed ({exc.reason or exc})"
    # (aiokafka's errors by name: this module imports no aiokafka)
    if from_kafka in (
        "SaslAuthenticationFailed",
        "AuthenticationFailedError",
        "IllegalSaslStateError",
    ):
        return f"authentication failed ({exc})"
    if from_kafka in ("UnsupportedSaslMechanismError", "AuthenticationMethodNotSupported"):
        return f"authentication failed: the broker does not accept this SASL mechanism ({exc})"
    return None


class _Causes(logging.Filter):
    """Keeps the security failures aiokafka logs (the exception is among the
    record's arguments); ``quiet``: drops those records too, when they are
    told once, by :class:`SecurityFailure`."""

    def __init__(self, quiet: bool) -> None:
        super().__init__()
        self.quiet = quiet
        self.cause: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if isinstance(arg, BaseException):
                cause = security_cause(arg)
                if cause:
                    self.cause = cause
                    return not self.quiet
        return True


#: aiokafka's loggers that report connection failures (its client logs as "aiokafka").
_LOGGERS = ("aiokafka", "aiokafka.conn", "aiokafka.consumer.group_coordinator")


@contextlib.contextmanager
def watching(quiet: bool = True) -> Iterator[_Causes]:
    """Within the block, the last security failure aiokafka logs is kept in
    the returned filter's ``cause``; ``quiet``: and not printed."""
    causes = _Causes(quiet)
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    for logger in loggers:
        logger.addFilter(causes)
    try:
        yield causes
    finally:
        for logger in loggers:
            logger.removeFilter(causes)


def failure(address: str, cause: str, security: ClientSecurity | None = None) -> SecurityFailure:
    """The one line of a security failure at ``address`` (empty: unnamed)."""
    try:
        how = (security or current()).describe()
    except SettingError:
        how = "?"
    where = f"Kafka at {address}" if address else "Kafka"
    return SecurityFailure(f"{where}: {cause} [{how}]")


@contextlib.contextmanager
def surfaced(
    address: str = "", security: ClientSecurity | None = None, quiet: bool = True
) -> Iterator[None]:
    """An exception leaving the block after aiokafka logged a security
    failure (or that is one) becomes a :class:`SecurityFailure` saying what
    failed. ``quiet``: aiokafka's own lines of it are not printed."""
    with watching(quiet) as causes:
        try:
            yield
        except Exception as exc:
            cause = causes.cause or security_cause(exc)
            if cause and not isinstance(exc, SecurityFailure):
                raise failure(address, cause, security) from None
            raise
