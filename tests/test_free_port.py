"""``free_port``: a port chosen for a server is given to no other caller on
the machine while that server starts (the suite's processes, the bench's
and the demo's start brokers and workers at once)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from seqkeeper.broker import PORT_RESERVED_FOR, free_port, port_is_free, reserve_port

PICKS = (
    "from seqkeeper.broker import free_port\nprint(' '.join(str(free_port()) for _ in range(60)))\n"
)


def test_processes_choosing_at_once_are_never_given_one_port() -> None:
    """Eight processes choose 60 ports each at once, none listening on them
    (as when each has yet to start its server): 480 draws from the range
    would repeat a port almost surely without the reservation."""
    procs = [
        subprocess.Popen([sys.executable, "-c", PICKS], stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    ports = [int(p) for proc in procs for p in proc.communicate(timeout=60)[0].split()]
    assert all(proc.returncode == 0 for proc in procs)
    assert len(ports) == 480
    assert len(set(ports)) == len(ports), sorted(p for p in ports if ports.count(p) > 1)


def test_a_reservation_expires() -> None:
    port = free_port()
    assert port_is_free("127.0.0.1", port)
    now = time.time()
    assert not reserve_port(port, now)  # reserved by free_port
    assert not reserve_port(port, now + PORT_RESERVED_FOR - 1)
    assert reserve_port(port, now + PORT_RESERVED_FOR + 1)  # taken over once old
    assert not reserve_port(port, now + PORT_RESERVED_FOR + 2)


def test_a_directory_of_another_owner_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a shared temporary directory, a stranger may have made the
    reservations' directory first (or a link in its place): then no file is
    written there, and ports are still given."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / f"seqkeeper-ports-{os.getuid()}").symlink_to(target)
    assert reserve_port(12345)
    assert reserve_port(12345)  # nothing reserved: no file was written
    assert list(target.iterdir()) == []
