"""The machine a run ran on, and when: the head of every chaos and bench
report (runs on different machines do not compare)."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """The platform, CPUs (count and model), memory (MB, from
    ``/proc/meminfo``) and Python version: the bench's JSON."""
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) // 1024
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory_mb": mem,
        "python": platform.python_version(),
    }


def machine_line() -> str:
    """The platform, CPU count and Python version in one line: the chaos
    report's machine (read without ``/proc``)."""
    return f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def now_utc() -> str:
    """Now, ISO 8601 in UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")
