"""The worker's per-record work without a broker: ``python -m seqkeeper.bench.core``.

The ordered topology's ``on_record`` over ``LayeredPartitionStore`` on real
RocksDB (opened as Faust opens it, with the worker's options and interpreter
settings), and the outbox cycle every ``--cycle`` records as the shell runs
it (take; changelog, then local writes; output record batches built with
aiokafka's own builder, confirm) — everything but the sockets and Faust's consumer. It prints
microseconds per record, where the cycle's share goes, and the time spent
in garbage collections. (No broker-free baseline compares: the limit's own
per-record work — decode, encode, append to a record batch — is a small
part of its cost at the broker, which is aiokafka's consumer and
per-record ``send``.)

``--instructions`` counts instead, with valgrind's cachegrind: the program
is run once with the loop and once without, and the difference is divided
by the records (a count, so it repeats from run to run where wall time
does not; memory stalls are not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
from aiokafka.partitioner import murmur2

from seqkeeper.adapter.producer import PRODUCER_BATCH_BYTES, AcknowledgingProducer, BatchProducer
from seqkeeper.bench.rig import FULL, Records, workload
from seqkeeper.settings import Settings
from seqkeeper.state import codecs
from seqkeeper.state.rocksdb import LayeredPartitionStore
from seqkeeper.state.stores import Stores
from seqkeeper.topologies.ordered import OrderedTopology
from seqkeeper.worker import tune_interpreter

PARTITIONS = FULL.partitions  # as the bench's topics
#: Records per fetch (SEQKEEPER_MAX_POLL_RECORDS's default): the processor's
#: runs are awaited after each, as the runtime does.
FETCH = 2000


def _table(directory: Path, settings: Settings) -> Any:
    """The parts of a Faust table on RocksDB that ``LayeredPartitionStore`` uses."""
    from faust.stores.rocksdb import RocksDBOptions

    given: dict[str, Any] = dict(settings.runtime.rocksdb_options())
    options = RocksDBOptions(**given)
    # every partition assigned: Faust opens their DBs at the assignment
    dbs = {p: options.open(directory / str(p)) for p in range(PARTITIONS)}
    return SimpleNamespace(
        name="state",
        changelog_topic="state-changelog",
        open_dbs=lambda: dbs,
        db_for=dbs.__getitem__,
    )


def count(state: Any, message: Any) -> tuple[Any, list[Any]]:
    """The smallest useful ordered processor (``--processor``): a count per
    key, and one output per message."""
    n = (state or 0) + 1
    return n, [n]


def _partitions(records: Records) -> list[int]:
    return [(murmur2(key) & 0x7FFFFFFF) % PARTITIONS for key, _ in records]


class Core:
    """One fresh topology and store (a new RocksDB) per run."""

    def __init__(
        self, settings: Settings, directory: Path, processor: Any = None, atomic: bool = False
    ) -> None:
        self.local = AcknowledgingProducer(PARTITIONS, PRODUCER_BATCH_BYTES)
        self.producer = BatchProducer(lambda: self.local)
        #: the exactly-once cycle's order (``--exactly-once``): a batch is
        #: confirmed as it is taken, and each cycle's records commit together
        self.atomic = atomic
        self.store = LayeredPartitionStore(
            _table(directory, settings), self.producer, deferred=codecs.BUFFER, atomic=atomic
        )
        self.topology = OrderedTopology(settings, Stores(self.store), processor)
        self.topology.on_assigned(set(range(PARTITIONS)))
        self.parts: dict[str, float] = dict.fromkeys(
            ("take", "changelog and local writes", "grouping", "outputs", "confirm"), 0.0
        )
        #: changelog records by family byte and kind (``--families``)
        self.families: Counter[tuple[bytes, str]] | None = None
        #: their keys' and values' bytes (``--families``)
        self.family_bytes = 0

    @staticmethod
    async def processed(stage: Any) -> None:
        """What the runtime awaits after each fetch: the processor's runs
        (a sync one's in a worker thread) of what the fetch released."""
        waiting = stage.pending()
        if waiting is not None:
            await waiting

    async def cycle(self) -> None:
        """The runtime's outbox cycle (seqkeeper.runtime.task.Task.take), timed."""
        clock, parts = time.perf_counter, self.parts
        t0 = clock()
        batch = self.topology.take()
        if self.atomic:  # (Task.take's E2; the outputs go in the transaction)
            self.topology.confirm(batch)
            self.topology.settle()
        writes = self.store.take_writes()
        if self.families is not None:
            for partition_writes in writes.values():
                for key, value, _ in partition_writes.records():
                    self.families[(key or b"")[:1], "delete" if value is None else "write"] += 1
                    self.family_bytes += len(key or b"") + len(value or b"")
        t1 = clock()
        await self.store.flush(writes)
        t2 = clock()
        parts["take"] += t1 - t0
        parts["changelog and local writes"] += t2 - t1
        if not batch or self.atomic:
            return
        grouped = await self.producer.group(batch.records, str)
        t3 = clock()
        await self.producer.send(grouped)
        t4 = clock()
        self.topology.confirm(batch)
        t5 = clock()
        parts["grouping"] += t3 - t2
        parts["outputs"] += t4 - t3
        parts["confirm"] += t5 - t4

    async def run(self, records: Records, partitions: list[int], every: int) -> float:
        """Seconds for ``records`` and their cycles."""
        on_record, wall = self.topology.on_record, time.time()
        stage = self.topology.stage
        start = time.perf_counter()
        for offset, ((key, value), partition) in enumerate(zip(records, partitions, strict=True)):
            on_record(partition, offset, key, value, wall, wall)
            if stage is not None and offset % FETCH == FETCH - 1:
                await self.processed(stage)
            if offset % every == every - 1:
                await self.cycle()
        if stage is not None:
            await self.processed(stage)
        await self.cycle()
        await self.cycle()  # the confirmations' deletions
        return time.perf_counter() - start


class GcTime:
    """Seconds spent in garbage collections, and how many, while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.collections += 1


def _setup(args: argparse.Namespace) -> tuple[Settings, Records, list[int]]:
    """Settings, the workload and each record's partition; the interpreter
    tuned as the worker's (thresholds, frozen start-up objects)."""
    settings = Settings.of(bootstrap="-", gap_timeout=3600.0)
    records, _ = workload(args.messages, args.keys)
    partitions = _partitions(records)
    tune_interpreter(settings)
    return settings, records, partitions


def rounds(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    settings, records, partitions = _setup(args)
    results: dict[str, Any] = {"records": len(records), "rounds": []}
    for n in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="seqkeeper-core-") as tmp:
            core = Core(settings, Path(tmp), count if args.processor else None)
            gc_time = GcTime()
            gc.callbacks.append(gc_time)
            try:
                ours = asyncio.run(core.run(records, partitions, args.cycle)) / len(records)
            finally:
                gc.callbacks.remove(gc_time)
            parts = {k: 1e6 * v / len(records) for k, v in core.parts.items()}
            row = {
                "us per record": 1e6 * ours,
                "gc us": 1e6 * gc_time.seconds / len(records),
                "collections": gc_time.collections,
                "cycle us": parts,
            }
            results["rounds"].append(row)
            say(
                f"round {n}: {row['us per record']:.1f} us/record; "
                f"gc {row['gc us']:.1f} us/record in {gc_time.collections} collections; cycle "
                + ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
            )
    results["median us per record"] = statistics.median(
        r["us per record"] for r in results["rounds"]
    )
    return results


#: The ordered table's families, as snapshots name them (state.codecs).
NAMES = {
    codecs.KEY_STATE: "key_state",
    codecs.BUFFER: "buffer",
    codecs.SEEN_ID: "seen_id",
    codecs.SEEN_POSITION: "seen_fifo",
    codecs.SEEN_PAGE: "seen_page",
    codecs.PROCESSED: "processed",
    codecs.QUEUED: "queued",
    codecs.OUTPUTS: "outputs",
}


def families(args: argparse.Namespace, sizes: dict[str, float] | None = None) -> dict[str, float]:
    """Changelog records per input record, by family and kind (one run,
    untimed): where to look for changelog writes to coalesce."""
    settings, records, partitions = _setup(args)
    with tempfile.TemporaryDirectory(prefix="seqkeeper-core-") as tmp:
        atomic = getattr(args, "exactly_once", False)
        core = Core(settings, Path(tmp), count if args.processor else None, atomic)
        core.families = Counter()
        asyncio.run(core.run(records, partitions, args.cycle))
    per = {
        f"{NAMES.get(family, repr(family))} {kind}": n / len(records)
        for (family, kind), n in sorted(core.families.items())
    }
    per["all"] = sum(core.families.values()) / len(records)
    if sizes is not None:
        sizes["key and value bytes"] = core.family_bytes / len(records)
    return per


def instructions(args: argparse.Namespace) -> int:
    """Instructions per record (cachegrind, with minus without the loop)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    counts = []
    for skip in (False, True):
        cmd = [
            valgrind,
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "seqkeeper.bench.core",
            "--messages",
            str(args.messages),
            "--keys",
            str(args.keys),
            "--cycle",
            str(args.cycle),
            "--once",
        ]
        cmd += (["--skip"] if skip else []) + (["--processor"] if args.processor else [])
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
        found = re.search(r"I\s+refs:\s+([\d,]+)", out)
        if found is None:
            raise SystemExit(f"no instruction count in valgrind's output:\n{out[-2000:]}")
        counts.append(int(found.group(1).replace(",", "")))
    records = len(workload(args.messages, args.keys)[0])
    return (counts[0] - counts[1]) // records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m seqkeeper.bench.core", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--cycle", type=int, default=4_000, help="records per outbox cycle")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="count with cachegrind")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--families", action="store_true", help="changelog records per record, by family"
    )
    parser.add_argument(
        "--processor", action="store_true", help="with an ordered processor (a count per key)"
    )
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="--families in the exactly-once cycle's order (confirmed as taken, atomic)",
    )
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.families:
        sizes: dict[str, float] = {}
        for name, n in families(args, sizes).items():
            print(f"{name}: {n:.3f} changelog records per input record")
        for name, n in sizes.items():
            print(f"{name}: {n:.1f} per input record")
        return
    if args.instructions:
        print(f"{instructions(args):,} instructions per record")
        return
    if args.once:  # one run under cachegrind: set up alike, loop or not
        settings, records, partitions = _setup(args)
        with tempfile.TemporaryDirectory(prefix="seqkeeper-core-") as tmp:
            core = Core(settings, Path(tmp), count if args.processor else None)
            if not args.skip:
                asyncio.run(core.run(records, partitions, args.cycle))
        return
    results = rounds(args, print)
    print(f"median: {results['median us per record']:.1f} us per record")
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
