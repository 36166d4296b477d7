"""Apache Kafka's command-line tools as the tests run them: the commands
the CLI prints (``kafka-acls.sh --bootstrap-server ... --add ...``), split
as a shell splits them, each run by its tool's main class with the
arguments its script would give it.

A tool started on its own is a JVM's start, most of a run's CPU (about
0.9 CPU-s for one ACL; the security tests grant hundreds). So the
commands of one tool run in one JVM: ``kafka-run-class.sh``, as the
tool's script calls it (the same class path, JVM options and class-data
archive), starts ToolBatch.java from source, which calls the main class
once per command. A command that fails ends the batch with its status
and output; the batch's last line counts the commands that ran. A Java
runtime without the compiler module (a trimmed one) runs each command
through its script instead.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

#: The Java source the batches start from.
BATCH = Path(__file__).with_name("ToolBatch.java")

#: What separates two commands' arguments in a batch.
NEXT = "--next"


def main_class(home: Path, tool: str) -> str:
    """The class ``bin/<tool>`` of the distribution at ``home`` runs."""
    script = (home / "bin" / tool).read_text()
    found = re.search(r'kafka-run-class\.sh\s+(\S+)\s+"\$@"', script)
    if found is None:
        raise ValueError(f"{home / 'bin' / tool} does not call kafka-run-class.sh with a class")
    return found.group(1)


def _java() -> str:
    """The ``java`` kafka-run-class.sh runs."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else (shutil.which("java") or "java")


@functools.cache
def _runs_source(java: str) -> bool:
    """Whether ``java`` can start a program from source (its compiler module)."""
    done = subprocess.run([java, "--list-modules"], capture_output=True, text=True, timeout=60)
    return done.returncode == 0 and any(
        line.startswith("jdk.compiler@") for line in done.stdout.splitlines()
    )


def run_commands(home: Path, commands: Sequence[Sequence[str]], timeout: float = 180) -> None:
    """Run ``commands`` (each ``[tool, *args]``, a printed line as a shell
    splits it) with the distribution at ``home``, a batch per tool at the
    same time; assert that each succeeded."""
    by_tool: dict[str, list[list[str]]] = {}
    for tool, *args in commands:
        assert NEXT not in args, args
        by_tool.setdefault(tool, []).append(args)
    argvs: list[tuple[list[str], int]] = []  # (argv, commands in a batch or 0)
    for tool, runs in by_tool.items():
        if len(runs) == 1 or not _runs_source(_java()):
            argvs += [([str(home / "bin" / tool), *args], 0) for args in runs]
            continue
        argv = [str(home / "bin" / "kafka-run-class.sh"), str(BATCH), main_class(home, tool)]
        for i, args in enumerate(runs):
            argv += [NEXT, *args] if i else args
        argvs.append((argv, len(runs)))
    procs = [
        (subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), n)
        for argv, n in argvs
    ]
    for p, n in procs:
        out, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0, out[-2000:]
        if n:
            assert f"ToolBatch: {n} commands ran" in out.splitlines()[-1:], out[-2000:]
