"""``zombie``: (exactly_once, a broker with transactions) freeze a worker
(SIGSTOP) past its session timeout while input flows; a second worker takes
every partition over; the first, resumed, must be fenced (log a ``fenced:``
line and exit non-zero) and write nothing that a read_committed reader sees
twice."""

from __future__ import annotations

import signal
import subprocess
import time

from seqkeeper.fleet.processes import WorkerProcess
from seqkeeper.verification.outcome import EXACTLY_ONCE, Outcome
from seqkeeper.verification.scenarios.stage import Stage
from seqkeeper.verification.workload import generate


def run(chaos: Stage) -> Outcome:
    out = Outcome("zombie worker fenced", guarantee=EXACTLY_ONCE)
    if not chaos.has_transactions():
        out.skipped = "needs a broker with transactions (exactly_once)"
        return out
    sc = chaos.scale
    s = chaos.prepared("zombie", processing_guarantee=EXACTLY_ONCE)
    work = generate(messages=sc.others // 2, keys=sc.keys, malformed=8, seed=chaos.seed + 4)
    out.messages = len(work.records)
    session = s.runtime.session_timeout
    # input flows before, during and after the freeze
    publisher = chaos.publish_in_background(
        s, s.ordered.input_topic, work.records, session + 3 * sc.cycle
    )
    a = chaos.worker(s.with_overrides(data_dir=s.runtime.data_dir / "a"), "worker-a")
    b: WorkerProcess | None = None
    b_code: int | None = None
    try:
        chaos.until_output(s, s.ordered.ordered_topic, {}, worker=a)
        time.sleep(chaos.rng.uniform(1.0, 3.0))  # a in the middle of its work
        assert a.proc is not None
        a.proc.send_signal(signal.SIGSTOP)
        out.faults = 1
        chaos.say(f"  worker a frozen past its session timeout ({session:g} s)")
        time.sleep(session + 2.0)
        since = chaos.ends(s, s.ordered.ordered_topic)
        b = chaos.worker(s.with_overrides(data_dir=s.runtime.data_dir / "b"), "worker-b")
        out.recovered(
            chaos.until_output(s, s.ordered.ordered_topic, since, every_partition=True, worker=b)
        )
        a.proc.send_signal(signal.SIGCONT)
        chaos.say("  worker b owns every partition; worker a resumed")
        for problem in zombie_problems(a, 60.0):
            out.fail(problem)
        publisher.join()
        report = chaos.verified(s, chaos.drain_timeout(work.messages), work.messages, b)
        b.check_alive()
    finally:
        if a.running():
            a.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
            a.stop()
        if b is not None:
            b_code = b.stop()
    if b_code != 0:
        out.fail(f"worker b's clean stop (SIGTERM) exited with {b_code}")
    return chaos.ordered_result(out, report)


def zombie_problems(worker: WorkerProcess, timeout: float) -> list[str]:
    """What is wrong with a resumed zombie ``worker`` once its partitions
    have a new owner: it must log ``fenced:`` and exit with a fenced
    worker's code (``FENCED_EXIT``) within ``timeout`` seconds (none: it is
    fenced and gone)."""
    from seqkeeper.runtime.wiring import FENCED_EXIT

    assert worker.proc is not None
    try:
        code: int | None = worker.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        code = None
    log = worker.log()
    fenced = [line for line in log.splitlines() if "fenced:" in line]
    problems = []
    if not fenced:
        problems.append(f"the zombie logged no 'fenced:' line; log: {worker.log_path}")
    if code is None:
        problems.append(
            f"the zombie was still running {timeout:g} s after it was resumed"
            + (" (it logged 'fenced:')" if fenced else "")
            + f"; log: {worker.log_path}"
        )
    elif code != FENCED_EXIT:
        problems.append(
            f"the zombie exited with {code}, not as a fenced worker ({FENCED_EXIT}); "
            f"log: {worker.log_path}"
        )
    return problems
