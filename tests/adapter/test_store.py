"""Changelog records applied to local RocksDB (a restore, a standby's
updates) land with the offset they bring a partition up to in one batch:
after a ``kill -9`` at any moment, a partition's DB holds exactly the
records up to its offset (Faust's own apply path writes the offset in a
separate put)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from rocksdict import AccessType, Options, Rdict

from seqkeeper.adapter.store import STORE_URL, FaustStore
from seqkeeper.state.rocksdb import (
    FAUST_OFFSET_KEY,
    FORMAT,
    FORMAT_KEY,
    META_KEYS,
    apply_changelog,
)


class Recording:
    """A DB recording what is written to it."""

    def __init__(self) -> None:
        self.writes: list[Any] = []

    def write(self, batch: Any, options: Any = None) -> None:
        self.writes.append(batch)

    def put(self, key: bytes, value: bytes) -> None:
        raise AssertionError("a separate put")


def test_one_write_per_partition_holding_its_records_and_offset(tmp_path: Path) -> None:
    dbs = {0: Recording(), 1: Recording()}
    last = apply_changelog(
        dbs.__getitem__,
        [(0, 10, b"a", b"1"), (1, 4, b"b", b"2"), (0, 11, b"a", None), (0, 12, b"c", b"3")],
    )
    assert last == {0: 12, 1: 4}
    assert [len(d.writes) for d in dbs.values()] == [1, 1]
    # (+ the offset and the format key)
    assert dbs[0].writes[0].len() == 5 and dbs[1].writes[0].len() == 3
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    try:
        db.write(dbs[0].writes[0])
        assert dict(db.items()) == {b"c": b"3", FAUST_OFFSET_KEY: b"12", FORMAT_KEY: FORMAT}
    finally:
        db.close()


def test_the_tables_use_it() -> None:
    from faust.stores import by_url

    assert by_url(STORE_URL) is FaustStore
    assert FaustStore.apply_changelog_batch is not FaustStore.__mro__[1].apply_changelog_batch


CHILD = textwrap.dedent(
    """
    import sys
    from rocksdict import Options, Rdict
    from seqkeeper.state.rocksdb import apply_changelog

    db = Rdict(sys.argv[1], Options(raw_mode=True))
    offset = 0
    while True:
        # each key's value is the offset that wrote it: 200 records a batch
        records = [(0, offset + i, b"k%03d" % i, b"%d" % (offset + i)) for i in range(200)]
        apply_changelog(lambda p: db, records)
        offset += 200
        print(offset, flush=True)
    """
)


def test_kill_9_during_applies_keeps_records_and_offset_together(tmp_path: Path) -> None:
    """The offset says exactly which records the DB holds, at every kill
    (with the write-ahead log on, as these DBs are)."""
    for round in range(3):
        path = tmp_path / f"db{round}"
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        printed = 0
        deadline = time.monotonic() + 30
        while printed < 2_000 * (round + 1) and time.monotonic() < deadline:
            printed = int(child.stdout.readline())
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only(False))
        try:
            offset = int(db[FAUST_OFFSET_KEY])
            values = {k: int(v) for k, v in db.items() if k not in META_KEYS}
        finally:
            db.close()
        assert offset + 1 >= printed  # every batch printed was kept
        assert (offset + 1) % 200 == 0  # a whole batch, never part of one
        assert values == {b"k%03d" % i: offset - 199 + i for i in range(200)}
