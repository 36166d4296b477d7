"""Local state is checked before a worker uses it: a RocksDB directory that
does not open with paranoid checks, or whose every block does not read back
with a valid checksum, is corrupt and is discarded (the changelog rebuilds
it), never silently used."""

from __future__ import annotations

import shutil
from pathlib import Path


def check_db(path: Path) -> str | None:
    """``None`` if the RocksDB at ``path`` is sound, else what is wrong."""
    from rocksdict import AccessType, DBRecoveryMode, Options, Rdict, ReadOptions

    options = Options(raw_mode=True)
    options.create_if_missing(False)
    options.set_paranoid_checks(True)
    options.set_wal_recovery_mode(DBRecoveryMode.absolute_consistency())
    read = ReadOptions()
    read.set_verify_checksums(True)
    read.fill_cache(False)  # type: ignore[call-arg]  # the stub omits the flag
    try:
        db = Rdict(str(path), options, access_type=AccessType.read_only(False))
    except Exception as exc:  # rocksdict raises plain exceptions for corruption
        return f"does not open: {exc}"
    it = db.iter(read)
    try:
        it.seek_to_first()
        while it.valid():
            it.next()
        it.status()  # raises if the scan stopped on an error
    except Exception as exc:
        return f"unreadable: {exc}"
    finally:
        del it
        db.close()
    return None


def discard_corrupt(tabledir: Path) -> list[tuple[Path, str]]:
    """Check every ``*.db`` under ``tabledir``; delete the corrupt ones (the
    worker then recovers them from the changelog). What was deleted, and why."""
    gone: list[tuple[Path, str]] = []
    if not tabledir.is_dir():
        return gone
    for db in sorted(tabledir.rglob("*.db")):
        if db.is_dir() and (problem := check_db(db)) is not None:
            shutil.rmtree(db)
            gone.append((db, problem))
    return gone
