"""The ``security`` group: how every client connects to Kafka (TLS, SASL),
and the check of a combination of those settings that the Spark source's
options share (:func:`security_problem`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from seqkeeper.settings.variables import (
    Group,
    Secret,
    SettingError,
    boolean,
    env_of,
    upper_choice,
    var,
)


def security_env_names() -> dict[str, str]:
    """The variables of the security settings, by their role in
    :func:`security_problem`."""
    return {
        key: env_of(SecuritySettings, name)
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


@dataclass(frozen=True)
class SecuritySettings(Group):
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
        super().__post_init__()
        # The combination is checked here, when the settings are built. The
        # files it names (the password file, the TLS files) are read where a
        # client is made (seqkeeper.security, ClientSecurity): they are mounted
        # secrets that may be written after the settings are read, and
        # commands that make no client (``seqkeeper settings``) need none.
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
