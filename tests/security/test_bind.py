"""Every listener binds where it is told, seen as a user
sees it: real worker processes, ``seqkeeper broker``, Spark, and TCP
connections made to this machine's own non-loopback address.

A server bound to 127.0.0.1 must refuse a connection made to that address
(the kernel answers with a reset: nothing listens there) while 127.0.0.1
accepts; a server bound to 0.0.0.0 must accept it. The address is the
machine's own (``ip -4 -o addr show scope global``); on a machine without
one, a network namespace joined to this one by a veth pair is made, and the
connections come from inside it to this machine's end of the pair
(``SEQKEEPER_TEST_NETNS=1`` takes that way everywhere). No address that is
not this machine's own is contacted.

Beyond the port each one is told, every listening socket of each process
tree (the worker and a broker it starts, ``seqkeeper broker`` with Kafka's
controller, Spark's JVM) is found with ``ss`` and must refuse from
elsewhere: a listener nobody configured is the one that leaks."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from seqkeeper.broker import free_port, kafka_home_from_env
from seqkeeper.settings import Settings
from seqkeeper.worker import WorkerProcess
from tests.conftest import Broker

LOOPBACK = "127.0.0.1"
#: An address no interface of a machine has (TEST-NET-2, RFC 5737): bound
#: to, never connected to.
NOT_MINE = "198.51.100.73"


def own_addresses() -> list[str]:
    """This machine's IPv4 addresses of global scope."""
    shown = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return re.findall(r"\binet (\d+\.\d+\.\d+\.\d+)/", shown)


@dataclass(frozen=True)
class Elsewhere:
    """Connections to this machine from elsewhere: to ``address`` (one of
    this machine's own), from here, or from inside the network namespace
    ``netns`` (``ip netns exec``)."""

    address: str
    netns: str | None = None

    def connect(self, port: int) -> str:
        """``accepted`` or ``refused`` (or the error) for a TCP connection
        to ``port`` of :attr:`address`."""
        if self.netns is None:
            return outcome(self.address, port)
        script = (
            "import socket,sys\n"
            "try:\n"
            f"    socket.create_connection(({self.address!r}, {port}), timeout=5).close()\n"
            "    print('accepted')\n"
            "except ConnectionRefusedError:\n"
            "    print('refused')\n"
            "except OSError as e:\n"
            "    print(repr(e))\n"
        )
        done = subprocess.run(
            ["ip", "netns", "exec", self.netns, sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout.strip() or done.stderr.strip()

    def get(self, port: int, path: str) -> int:
        """The status of ``GET path`` at ``port`` of :attr:`address`."""
        if self.netns is None:
            with urllib.request.urlopen(f"http://{self.address}:{port}{path}", timeout=10) as r:
                return int(r.status)
        script = (
            "import urllib.request\n"
            f"print(urllib.request.urlopen('http://{self.address}:{port}{path}', timeout=10).status)"
        )
        done = subprocess.run(
            ["ip", "netns", "exec", self.netns, sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return int(done.stdout.strip() or 0)


def outcome(host: str, port: int) -> str:
    try:
        socket.create_connection((host, port), timeout=5).close()
        return "accepted"
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        return repr(e)


def run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[Elsewhere]:
    mine = own_addresses()
    if mine and not os.environ.get("SEQKEEPER_TEST_NETNS"):
        yield Elsewhere(mine[0])
        return
    # No address of its own beyond loopback: a namespace, joined by a veth
    # pair whose end here gets an address (a /30 of 198.18.0.0/15, the
    # range RFC 2544 keeps for such tests) that is then this machine's own.
    tag = uuid.uuid4().hex[:6]
    netns, here, there = f"skbind-{tag}", f"skb{tag}a", f"skb{tag}b"
    block = int(tag, 16) % (1 << 15) * 4
    base = ipaddress.ip_address("198.18.0.0") + block
    mine_, theirs = str(base + 1), str(base + 2)
    run("ip", "netns", "add", netns)
    try:
        run("ip", "link", "add", here, "type", "veth", "peer", "name", there)
        run("ip", "link", "set", there, "netns", netns)
        run("ip", "addr", "add", f"{mine_}/30", "dev", here)
        run("ip", "link", "set", here, "up")
        run("ip", "-n", netns, "addr", "add", f"{theirs}/30", "dev", there)
        run("ip", "-n", netns, "link", "set", there, "up")
        run("ip", "-n", netns, "link", "set", "lo", "up")
        yield Elsewhere(mine_, netns)
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)


# -- the listening sockets of a process tree ----------------------------------


def tree(pid: int) -> set[int]:
    """``pid`` and its descendants."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # (exited meanwhile)
        parent[int(stat.parent.name)] = int(fields[1])
    found = {pid}
    while True:
        more = {p for p, pp in parent.items() if pp in found} - found
        if not more:
            return found
        found |= more


@dataclass(frozen=True)
class Listener:
    address: str  #: as bound: ``0.0.0.0``, ``::``, ``127.0.0.1``, ``::ffff:127.0.0.1``...
    port: int
    process: str

    @property
    def loopback(self) -> bool:
        if self.address == "*":
            return False
        ip = ipaddress.ip_address(self.address.split("%")[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return ip.is_loopback


def listeners(pid: int) -> list[Listener]:
    """The TCP sockets the processes of ``pid``'s tree listen on."""
    assert shutil.which("ss"), "the test needs ss (iproute2)"
    pids = tree(pid)
    shown = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in shown.splitlines():
        users = dict((int(p), name) for name, p in re.findall(r'\("([^"]*)",pid=(\d+),', line))
        mine = [name for p, name in users.items() if p in pids]
        if not mine:
            continue
        local = line.split()[3]
        address, port = local.rsplit(":", 1)
        found.append(Listener(address.strip("[]"), int(port), mine[0]))
    return found


def only_told(pid: int, elsewhere: Elsewhere, open_port: int | None = None) -> list[Listener]:
    """Check that every listener of ``pid``'s tree refuses a connection
    from elsewhere, but ``open_port``, which accepts it; return them."""
    found = listeners(pid)
    assert found, f"no listening socket found for process {pid}"
    for listener in found:
        got = elsewhere.connect(listener.port)
        if listener.port == open_port:
            assert got == "accepted", (listener, got)
        else:
            assert listener.loopback, f"{listener} listens beyond loopback"
            assert got == "refused", (listener, got)
    if open_port is not None:
        assert open_port in {listener.port for listener in found}, found
    return found


# -- the workers' web servers -------------------------------------------------


class Worker(WorkerProcess):
    """A worker whose environment also gets ``extra`` (a value ``None``:
    the variable is removed, so its default applies)."""

    def __init__(self, settings: Settings, log_path: Path, extra: dict[str, str | None]) -> None:
        super().__init__(settings, log_path)
        self.extra = extra

    def environment(self) -> dict[str, str]:
        env = super().environment()
        for name, value in self.extra.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env


#: case -> (topology, SEQKEEPER_WEB_HOST or None for its default, more environment)
CASES: dict[str, tuple[str, str | None, dict[str, str | None]]] = {
    "ordered-default": ("ordered", None, {}),
    # Faust's own variables name another bind and serve its token-less
    # table pages: the worker's settings are the only source
    "ordered-loopback": (
        "ordered",
        LOOPBACK,
        {"WEB_BIND": "0.0.0.0", "APP_WEB_TABLES_ENABLED": "true", "WEB_PORT": "1"},
    ),
    "ordered-every-interface": ("ordered", "0.0.0.0", {}),
    "commands-loopback": ("commands", LOOPBACK, {}),
    "commands-every-interface": ("commands", "0.0.0.0", {}),
    # no broker given: the worker starts its own (Apache Kafka from KAFKA_HOME
    # when set, else the embedded one), which must listen on loopback too
    "own-broker-default": ("ordered", None, {"KAFKA_BOOTSTRAP_SERVERS": ""}),
}


@pytest.fixture(scope="module")
def workers(
    broker: Broker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Worker]]:
    """A worker per case, started together (each takes a while to be ready)."""
    from seqkeeper.settings import EXAMPLE_HANDLERS

    tmp = tmp_path_factory.mktemp("bind")
    started: dict[str, Worker] = {}
    try:
        for case, (topology, host, extra) in CASES.items():
            tag = uuid.uuid4().hex[:8]
            own = extra.get("KAFKA_BOOTSTRAP_SERVERS") == ""
            settings = Settings.of(
                bootstrap="" if own else broker.bootstrap,
                data_dir=tmp / case,
                partitions=2,
                session_timeout=6.0,
                topology=topology,
                handlers=EXAMPLE_HANDLERS,
                app_id=f"bind-{tag}",
                input_topic=f"in-{tag}",
                command_topic=f"cmd-{tag}",
                web_host=host or LOOPBACK,
                web_port=free_port(host or LOOPBACK),
            )
            env = {**extra, "SEQKEEPER_WEB_HOST": host}
            started[case] = Worker(settings, tmp / f"{case}.log", env).start()
        for worker in started.values():
            worker.wait_ready(180)
        yield started
    finally:
        for worker in started.values():
            worker.stop()


@pytest.mark.integration
@pytest.mark.parametrize("case", list(CASES))
def test_the_worker_s_web_server_listens_where_told(
    case: str, workers: dict[str, Worker], elsewhere: Elsewhere
) -> None:
    worker = workers[case]
    _, host, _ = CASES[case]
    port = worker.settings.runtime.web_port
    assert f"web http://{host or LOOPBACK}:{port}/" in worker.log()
    # this machine, as a local client sees it
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
        assert response.status == 200
    assert worker.pid is not None
    if host == "0.0.0.0":
        only_told(worker.pid, elsewhere, open_port=port)
        assert elsewhere.get(port, "/health") == 200
    else:
        found = only_told(worker.pid, elsewhere)
        assert port in {listener.port for listener in found}
    worker.check_alive()


@pytest.mark.integration
def test_a_web_host_not_of_this_machine_is_one_line_before_any_broker(
    broker: Broker, tmp_path: Path
) -> None:
    assert NOT_MINE not in own_addresses()
    settings = Settings.of(
        bootstrap=broker.bootstrap, data_dir=tmp_path / "data", web_host=NOT_MINE, web_port=0
    )
    env = {**os.environ, **settings.to_env()}
    done = subprocess.run(
        [sys.executable, "-m", "seqkeeper", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: SEQKEEPER_WEB_HOST={NOT_MINE} SEQKEEPER_WEB_PORT=0: "), line
    assert "cannot listen there" in line and "Traceback" not in done.stdout
    assert "seqkeeper worker: broker" not in done.stdout  # (it stopped before Faust)


# -- seqkeeper broker ---------------------------------------------------------

READY = re.compile(r"ready: KAFKA_BOOTSTRAP_SERVERS=(\S+):(\d+)")


@dataclass
class BrokerCommand:
    proc: subprocess.Popen[str]
    port: int
    log: Path


def start_broker(log: Path, *args: str, timeout: float = 180) -> BrokerCommand:
    """``seqkeeper broker ARGS`` (Apache Kafka when ``KAFKA_HOME`` is set,
    else the embedded broker), once it says it is ready."""
    out = open(log, "w")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "seqkeeper", "broker", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = READY.search(log.read_text())
        if found:
            return BrokerCommand(proc, int(found.group(2)), log)
        if proc.poll() is not None:
            raise AssertionError(f"seqkeeper broker exited {proc.returncode}: {log.read_text()}")
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"seqkeeper broker was not ready in {timeout}s: {log.read_text()}")


def stop(command: BrokerCommand) -> None:
    if command.proc.poll() is None:
        command.proc.send_signal(signal.SIGINT)
        try:
            command.proc.wait(60)
        except subprocess.TimeoutExpired:
            command.proc.kill()
            command.proc.wait()


def kind() -> str:
    return "Apache Kafka" if kafka_home_from_env() else "embedded"


@pytest.mark.integration
def test_seqkeeper_broker_listens_on_loopback_by_default(
    tmp_path: Path, elsewhere: Elsewhere
) -> None:
    command = start_broker(tmp_path / "broker.log")
    try:
        assert READY.search(command.log.read_text()).group(1) == LOOPBACK  # type: ignore[union-attr]
        assert outcome(LOOPBACK, command.port) == "accepted"
        found = only_told(command.proc.pid, elsewhere)
        assert command.port in {listener.port for listener in found}, (kind(), found)
    finally:
        stop(command)


@pytest.mark.integration
def test_seqkeeper_broker_on_every_interface_when_told(
    tmp_path: Path, elsewhere: Elsewhere
) -> None:
    command = start_broker(
        tmp_path / "broker.log", "--host", "0.0.0.0", "--advertised-host", elsewhere.address
    )
    try:
        # its clients' listener, and nothing else (Kafka's controller stays on loopback)
        found = only_told(command.proc.pid, elsewhere, open_port=command.port)
        if kafka_home_from_env():
            assert len(found) >= 2, found  # (the controller's listener was checked too)
        assert outcome(LOOPBACK, command.port) == "accepted"
    finally:
        stop(command)


def test_seqkeeper_broker_refuses_a_host_not_of_this_machine_in_one_line() -> None:
    assert NOT_MINE not in own_addresses()
    done = subprocess.run(
        [sys.executable, "-m", "seqkeeper", "broker", "--host", NOT_MINE],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: --host {NOT_MINE} --port 0: cannot listen there"), line


# -- Spark (compact, replay) --------------------------------------------------

SPARK = """
import os, sys, time
from seqkeeper.spark_sink.job import spark_session
spark = spark_session("local[1]")
assert spark.range(3).count() == 3
print("ready", flush=True)
sys.stdin.read()  # until the test is done looking
spark.stop()
"""


def test_spark_s_local_session_listens_on_loopback_only(
    tmp_path: Path, elsewhere: Elsewhere
) -> None:
    # the driver, its block manager and the web UI (4040) of `compact` and
    # `replay`'s local session: Spark's defaults put them on the address the
    # host name resolves to and on every interface
    proc = subprocess.Popen(
        [sys.executable, "-c", SPARK],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "spark.log").open("w"),
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", (tmp_path / "spark.log").read_text()[-3000:]
        found = only_told(proc.pid, elsewhere)
        assert any(listener.process == "java" for listener in found), found
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
