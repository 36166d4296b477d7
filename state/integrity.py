"""Local state is checked before a worker uses it: a RocksDB directory that
does not open with paranoid checks, or whose every block does not read back
with a valid checksum, is corrupt and is discarded (the changelog rebuilds
it), never silently used. After an unclean stop, a database holding state
but not the format key (:data:`~seqkeeper.state.rocksdb.FORMAT_KEY`) is
discarded too: it was written by a version that wrote RocksDB before the
changelog acknowledged the writes, so its offset does not say what it
holds."""

from __future__ import annotations

import shutil
from pathlib import Path


def check_db(path: Path, unclean: bool = False) -> str | None:
    """``None`` if the RocksDB at ``path`` is sound (and, ``unclean``: left by
    an unclean stop, its offset says what it holds), else what is wrong (a
    predicate of the database: "is corrupt (…)")."""
    from rocksdict import AccessType, DBRecoveryMode, Options, Rdict, ReadOptions

    from seqkeeper.state.rocksdb import FORMAT_KEY, META_KEYS

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
        return f"is corrupt (does not open: {exc})"
    it = db.iter(read)
    state = formatted = False
    try:
        it.seek_to_first()
        while it.valid():
            if unclean and not state:
                state = it.key() not in META_KEYS
            it.next()
        it.status()  # raises if the scan stopped on an error
        formatted = db.get(FORMAT_KEY) is not None
    except Exception as exc:
        return f"is corrupt (unreadable: {exc})"
    finally:
        del it
        db.close()
    if state and not formatted:
        return "holds state written before the changelog had it (an earlier version)"
    return None


def discard_corrupt(tabledir: Path, unclean: bool = False) -> list[tuple[Path, str]]:
    """Check every ``*.db`` under ``tabledir`` (``unclean``: left by an
    unclean stop); delete the ones that fail (the worker then recovers them
    from the changelog). What was deleted, and why."""
    gone: list[tuple[Path, str]] = []
    if not tabledir.is_dir():
        return gone
    for db in sorted(tabledir.rglob("*.db")):
        if db.is_dir() and (problem := check_db(db, unclean)) is not None:
            shutil.rmtree(db)
            gone.append((db, problem))
    return gone


def refused_state(tabledir: Path) -> str | None:
    """The first local database under ``tabledir`` in a state format this
    release cannot read, or whose marker is none
    (:mod:`seqkeeper.state.formats`): the line that
    says so; ``None`` if every one is readable (or unreadable as a database:
    the integrity check deals with those)."""
    from rocksdict import AccessType, Options, Rdict

    from seqkeeper.state.formats import MARKER, UnreadableState, readable

    if not tabledir.is_dir():
        return None
    for path in sorted(tabledir.rglob("*.db")):
        if not path.is_dir():
            continue
        options = Options(raw_mode=True)
        options.create_if_missing(False)
        try:
            db = Rdict(str(path), options, access_type=AccessType.read_only(False))
        except Exception:  # (corrupt: discarded and rebuilt by the integrity check)
            continue
        try:
            raw = db.get(MARKER)
        finally:
            db.close()
        try:
            readable(raw, f"local state {path}")
        except UnreadableState as refused:
            return str(refused)
    return None
