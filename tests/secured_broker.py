"""The TLS/SASL Apache Kafka broker the security tests start: a CA and
certificates made on the fly (``cryptography``), SCRAM users, ACLs on.

Test-only: users secure their own cluster; this stands one up from
``KAFKA_HOME`` so every client option can be tested against a real broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from seqkeeper.broker import KafkaBroker, free_port
from seqkeeper.security import ClientSecurity
from seqkeeper.settings import Secret


@dataclass(frozen=True)
class ClientCertificate:
    """A client certificate and its private key, as PEM files (mutual TLS)."""

    cert: Path  #: the certificate (subject ``CN=<name>``) and the CA's
    key: Path  #: its unencrypted private key (PKCS#8), readable by its owner only


@dataclass(frozen=True)
class TlsFiles:
    """A CA and a server certificate it signed, as PEM files; and client
    certificates it signed, by name."""

    ca: Path  #: the CA's certificate (what clients trust)
    server: Path  #: the server's private key (PKCS#8) and certificate chain
    clients: Mapping[str, ClientCertificate] = field(default_factory=dict)


def make_tls_files(
    directory: Path,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    clients: tuple[str, ...] = (),
    server_name: str | None = None,
    subjects: Mapping[str, str] | None = None,
) -> TlsFiles:
    """A new CA and a server certificate for ``hosts`` (IP addresses and DNS
    names) signed by it, written to ``directory`` (``cryptography``; valid
    for a day); and a client certificate ``CN=<name>`` for each of
    ``clients`` (or the subject ``subjects`` gives it, an RFC 4514 string).
    The server certificate's subject is ``CN=<server_name>``
    (default: the first host); it serves as a client certificate too (a
    broker's to its controller). A second call makes another CA, which does
    not sign the first call's certificates."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"seqkeeper test CA {uuid.uuid4().hex[:8]}")]
    )
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, server_name or hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(
        directory / "ca.pem",
        directory / "server.pem",
        {
            name: ClientCertificate(
                directory / f"client-{name}.pem", directory / f"client-{name}.key"
            )
            for name in clients
        },
    )
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.server.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + server.public_bytes(serialization.Encoding.PEM)
        + ca.public_bytes(serialization.Encoding.PEM)
    )
    files.server.chmod(0o600)
    for name, client in files.clients.items():
        client_key = ec.generate_private_key(ec.SECP256R1())
        subject = (subjects or {}).get(name)
        cert = (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name.from_rfc4514_string(subject)
                if subject
                else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
            )
            .issuer_name(ca_name)
            .public_key(client_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        client.key.touch(mode=0o600)
        client.key.write_bytes(
            client_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        client.cert.write_bytes(
            cert.public_bytes(serialization.Encoding.PEM)
            + ca.public_bytes(serialization.Encoding.PEM)
        )
    return files


class SecuredKafkaBroker(KafkaBroker):
    """:class:`KafkaBroker` with one listener for clients and brokers,
    SASL_SSL with SCRAM-SHA-512, as a production cluster is set up: a CA
    and a server certificate for 127.0.0.1 and localhost made at start
    (:func:`make_tls_files`, PEM files Kafka reads itself), the SCRAM users
    created when the storage is formatted (``kafka-storage.sh format
    --add-scram``), and the StandardAuthorizer denying what no ACL allows.

    ``admin`` is a super user (the broker's own inter-broker user too);
    ``users`` are more SCRAM users, with no ACL (part 3 grants theirs). The
    controller listener (loopback, not advertised) is SSL with
    ``ssl.client.auth=required``: the broker connects to its own controller
    with the server certificate, ``CN=<broker_principal>``, the other super
    user; a client without a certificate of the CA is refused at the
    handshake, and no ``User:ANONYMOUS`` is allowed anything.

    :meth:`client_security` is how a client connects as ``admin``;
    :meth:`client_security_as` as another user. The listener takes
    SCRAM-SHA-256 and PLAIN too, with the same users and passwords (PLAIN's
    in the listener's JAAS config, as Kafka's ``PlainLoginModule`` reads them).

    ``mtls``: a second listener, SSL with ``ssl.client.auth=required``, on
    :attr:`mtls_bootstrap`; a client certificate ``CN=<admin>`` is made with
    the CA, and the principal of a certificate is its CN
    (``ssl.principal.mapping.rules``), so this one is ``User:<admin>``:
    :meth:`client_security_mtls`. ``client_subjects``: more client
    certificates, by name, with these subjects (RFC 4514 strings);
    ``principal_rules``: the broker's ``ssl.principal.mapping.rules``.
    """

    def __init__(
        self,
        home: Path,
        port: int | None = None,
        log_path: Path | None = None,
        partitions: int = 4,
        extra_config: Mapping[str, str] | None = None,
        admin: str = "admin",
        users: Mapping[str, str] | None = None,
        mtls: bool = False,
        client_subjects: Mapping[str, str] | None = None,
        principal_rules: str = "RULE:^CN=([^,]+)$/$1/,DEFAULT",
    ) -> None:
        super().__init__(home, port, log_path, partitions, extra_config)
        self.client_subjects = dict(client_subjects or {})
        self.principal_rules = principal_rules
        self.mtls_port = free_port() if mtls else None
        self.mtls_bootstrap = f"127.0.0.1:{self.mtls_port}" if mtls else ""
        self.admin = admin
        #: the principal of the server certificate: the broker's to its controller
        self.broker_principal = "kafka-broker"
        self.admin_password = Secret(uuid.uuid4().hex)
        self.users: dict[str, Secret] = {name: Secret(pw) for name, pw in (users or {}).items()}
        self.tls: TlsFiles | None = None

    @property
    def kind(self) -> str:
        mtls = ", mTLS" if self.mtls_port else ""
        return f"Apache Kafka {self.version} (SASL_SSL, SCRAM-SHA-512/256, PLAIN{mtls})"

    def client_security_as(
        self, user: str, password: Secret, mechanism: str = "SCRAM-SHA-512"
    ) -> ClientSecurity:
        assert self.tls is not None, "the broker has not started"
        return ClientSecurity(
            protocol="SASL_SSL",
            mechanism=mechanism,
            username=user,
            password=password,
            cafile=str(self.tls.ca),
        )

    def client_security(self) -> ClientSecurity:
        return self.client_security_as(self.admin, self.admin_password)

    def client_security_mtls(self, name: str | None = None) -> ClientSecurity:
        """How a client connects to :attr:`mtls_bootstrap`, as ``admin`` by
        its certificate (or by the certificate ``name`` of ``client_subjects``)."""
        assert self.tls is not None and self.mtls_port, "no mtls listener, or not started"
        client = self.tls.clients[name or self.admin]
        return ClientSecurity(
            protocol="SSL",
            cafile=str(self.tls.ca),
            certfile=str(client.cert),
            keyfile=str(client.key),
        )

    def admin_properties(self, path: Path) -> Path:
        """Write the ``--command-config`` file of Kafka's tools
        (``kafka-acls.sh``, ``kafka-configs.sh``) as ``admin`` to ``path``:
        it holds the password, so keep it out of any log directory."""
        assert self.tls is not None, "the broker has not started"
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{self.admin}" password="{self.admin_password.reveal()}";'
        )
        path.write_text(
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            f"sasl.jaas.config={jaas}\n"
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={self.tls.ca}\n"
        )
        path.chmod(0o600)
        return path

    def _prepare(self, directory: Path) -> None:
        clients = (self.admin, *self.client_subjects) if self.mtls_port else ()
        self.tls = make_tls_files(
            directory / "tls",
            clients=clients,
            server_name=self.broker_principal,
            subjects=self.client_subjects,
        )

    def _listener_config(self, controller_port: int) -> dict[str, str]:
        assert self.tls is not None
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{self.admin}" password="{self.admin_password.reveal()}";'
        )
        plain_users = " ".join(
            f'user_{name}="{password.reveal()}"' for name, password in self._passwords().items()
        )
        plain_jaas = (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
        )
        listeners = f"SASL_SSL://{self.bootstrap},CONTROLLER://127.0.0.1:{controller_port}"
        advertised = f"SASL_SSL://{self.bootstrap}"
        protocols = "CONTROLLER:SSL,SASL_SSL:SASL_SSL"
        if self.mtls_port:
            listeners += f",SSL://{self.mtls_bootstrap}"
            advertised += f",SSL://{self.mtls_bootstrap}"
            protocols += ",SSL:SSL"
        return {
            "listeners": listeners,
            "advertised.listeners": advertised,
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": protocols,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": jaas,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas,
            # mutual TLS on the SSL listener and the controller's (where the
            # broker presents its server certificate); a certificate's principal
            # is its CN (Kafka's default would be the whole DN, "CN=admin")
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.controller.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": self.principal_rules,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls.server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{self.admin};User:{self.broker_principal}",
        }

    def _passwords(self) -> dict[str, Secret]:
        return {self.admin: self.admin_password, **self.users}

    def _format_args(self) -> list[str]:
        args = []
        for name, password in self._passwords().items():
            for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
                args += ["--add-scram", f"{mechanism}=[name={name},password={password.reveal()}]"]
        return args

    def _secrets(self) -> list[str]:
        return [self.admin_password.reveal(), *(pw.reveal() for pw in self.users.values())]
