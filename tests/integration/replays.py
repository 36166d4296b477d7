"""What a worker's log says each changelog partition replayed
(``table state: partition 0 (active) replayed ...``, parsed by
:mod:`seqkeeper.bench.restarts`), and what the broker and the local state
say it should have: counted in records and offsets, never in seconds."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from seqkeeper.adapter.offsets import as_topic_partitions, committed_ends
from seqkeeper.bench.restarts import Replayed, number, replayed
from seqkeeper.settings import Settings
from seqkeeper.topics import read_topic

__all__ = [
    "Replayed",
    "changelog_of",
    "changelog_state",
    "committed_writes",
    "guarantee",
    "local_state",
    "number",
    "replayed",
]


def guarantee(log: str) -> str:
    """The worker's processing guarantee (``auto`` is exactly_once on
    Apache Kafka, at_least_once on the embedded broker)."""
    said = re.findall(r"processing guarantee: (\w+)", log)
    assert said, log[-3000:]
    return said[-1]


def changelog_of(settings: Settings, mode: str) -> tuple[dict[int, list[int]], dict[int, int]]:
    """The state changelog as the worker's recovery reads it (read_committed
    under exactly_once): the offsets of its records per partition, and each
    partition's end (1 + the offset of its last record, 0 for none; a
    transaction's marker after it is no record)."""
    topic = f"{settings.group_id}-state-changelog"
    isolation = "read_committed" if mode == "exactly_once" else "read_uncommitted"
    bootstrap = settings.broker.bootstrap
    offsets: dict[int, list[int]] = {p: [] for p in range(settings.broker.partitions)}
    for record in asyncio.run(read_topic(bootstrap, topic, isolation=isolation)):
        offsets[record.partition].append(record.offset)
    tps = as_topic_partitions(topic, settings.broker.partitions)
    ends = asyncio.run(committed_ends(bootstrap, tps))
    return offsets, {tp.partition: end for tp, end in ends.items()}


def local_state(data_dir: Path) -> dict[int, dict[bytes, bytes]]:
    """Per partition of the state table, the entries its local RocksDB
    holds (without Faust's offset, the format key and the mark)."""
    from rocksdict import AccessType, Options, Rdict

    from seqkeeper.state.rocksdb import META_KEYS

    found: dict[int, dict[bytes, bytes]] = {}
    for path in sorted(data_dir.rglob("state-*.db")):
        partition = int(path.name[len("state-") : -len(".db")])
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only(False))
        try:
            found[partition] = {k: v for k, v in db.items() if k not in META_KEYS}
        finally:
            db.close()
    return found


def committed_writes(settings: Settings) -> dict[int, set[tuple[bytes, bytes]]]:
    """Per partition, every (key, value) a committed record of the state
    changelog wrote (read_committed: an aborted transaction's are not)."""
    topic = f"{settings.group_id}-state-changelog"
    found: dict[int, set[tuple[bytes, bytes]]] = {}
    for record in asyncio.run(
        read_topic(settings.broker.bootstrap, topic, isolation="read_committed")
    ):
        if record.value is not None:
            found.setdefault(record.partition, set()).add((record.key, record.value))
    return found


def changelog_state(settings: Settings, isolation: str) -> dict[int, dict[bytes, bytes]]:
    """Per partition, the state the state changelog describes: its records
    applied in order, the last write of a key winning."""
    topic = f"{settings.group_id}-state-changelog"
    state: dict[int, dict[bytes, bytes]] = {}
    for record in asyncio.run(read_topic(settings.broker.bootstrap, topic, isolation=isolation)):
        entries = state.setdefault(record.partition, {})
        if record.value is None:
            entries.pop(record.key, None)
        else:
            entries[record.key] = record.value
    return state
