"""State formats (:mod:`seqkeeper.state.formats`): the registry, the marker,
the migration of format 1 (receipts without tenants) to format 2 through
it, the refusal of state newer than this release reads (a partition, a
changelog record, a local database), and the marker kept out of what
snapshots and ``inspect`` take for a user's key."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from seqkeeper.inspect import lookup
from seqkeeper.state import codecs, formats
from seqkeeper.state import command_records as cmd
from seqkeeper.state.formats import CURRENT, FORMATS, MARKER, NEWEST, Format, NewerState
from seqkeeper.state.integrity import refused_state
from seqkeeper.state.memory import MemoryStore
from seqkeeper.state.rocksdb import apply_changelog
from tests.state.test_command_records import receipt, waiting, write_old_layout

OLD_FAMILIES = (b"r", b"w", b"c", b"t")


class Recording(MemoryStore):
    """Every put and delete, in order (a crash keeps a prefix of them)."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[tuple[bytes, bytes | None]] = []

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        self.changes.append((key, value))
        super().put(partition, key, value)

    def delete(self, partition: int, key: bytes) -> None:
        self.changes.append((key, None))
        super().delete(partition, key)


def content(store: MemoryStore) -> dict[bytes, bytes]:
    return dict(store.items(0))


#: The marker this release writes, its format's number, and a marker of the
#: format after it (which this release does not know).
NOW = formats.encode_marker()
N = CURRENT.number
NEXT = f"{N + 1}/{N + 1}".encode()


# -- the registry and the marker -------------------------------------------------
def test_the_registry_numbers_formats_one_by_one_and_writes_the_last() -> None:
    assert [f.number for f in FORMATS] == list(range(1, len(FORMATS) + 1))
    assert CURRENT is NEWEST is FORMATS[-1] and CURRENT.number == 4
    assert FORMATS[0].migrate is None  # (nothing before the first)
    assert all(1 <= f.oldest_reader <= f.number for f in FORMATS)
    # a release writing format 1 looks for receipts under bare messageIds
    # only; one writing format 2 does not look for forgotten-key markers;
    # one writing format 3 looks for seen ids' FIFO entries in p records only
    assert [f.oldest_reader for f in FORMATS] == [1, 2, 3, 4]
    assert formats.encode_marker() == b"4/4"


def test_the_marker_is_no_family_of_either_table() -> None:
    families = {codecs.KEY_STATE, codecs.BUFFER, codecs.SEEN_ID, codecs.SEEN_POSITION}
    families |= {codecs.SEEN_PAGE, codecs.FORGOTTEN}
    families |= {codecs.PROCESSED, codecs.QUEUED, codecs.OUTPUTS}
    families |= {cmd.ENTITY, cmd.PENDING, cmd.RECEIPT, cmd.RETRY, cmd.CORRELATION, cmd.AGE}
    families |= set(cmd.OLD_FAMILIES)
    assert MARKER[:1] not in families


@given(st.integers(1, 10_000).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))))
def test_a_marker_reads_back(pair: tuple[int, int]) -> None:
    number, reader = pair
    raw = formats.encode_marker(Format(number, "", reader))
    assert raw == f"{number}/{reader}".encode()
    assert formats.decode_marker(raw) == pair


@pytest.mark.parametrize("raw", [b"", b"x", b"2/3", b"0/0", b"-1/1", b"2/0", b"\xff"])
def test_a_value_that_is_no_marker_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError, match="not a state format marker"):
        formats.decode_marker(raw)
    # where state is read: one line naming the place, as for a newer format
    for refuse in (
        lambda: formats.readable(raw, "partition 3"),
        lambda: formats.check_record(MARKER, raw, "partition 3"),
    ):
        with pytest.raises(formats.UnreadableState) as refused:
            refuse()
        line = str(refused.value)
        assert isinstance(refused.value, formats.BadMarker)
        assert "\n" not in line and line.startswith("partition 3 has a state format marker")


def test_state_without_a_marker_is_format_1() -> None:
    assert formats.decode_marker(None) == (1, 1)
    assert formats.readable(None, "here") == 1


@given(st.integers(1, 50).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))))
def test_state_is_refused_exactly_when_its_oldest_reader_is_newer(pair: tuple[int, int]) -> None:
    number, reader = pair
    raw = f"{number}/{reader}".encode()
    if reader <= NEWEST.number:
        assert formats.readable(raw, "p") == number
        formats.check_record(MARKER, raw, "p")
        return
    with pytest.raises(NewerState) as refused:
        formats.readable(raw, "partition 3")
    line = str(refused.value)
    assert "\n" not in line
    assert f"state format {number}," in line and f"formats up to {NEWEST.number}" in line
    assert line.startswith("partition 3 is in state format")
    with pytest.raises(NewerState):
        formats.check_record(MARKER, raw, "p")
    formats.check_record(b"s" + raw, raw, "p")  # the same bytes under a user's key: data


# -- opening a partition ---------------------------------------------------------
def old_receipts(mids: list[str], waiting_ids: set[str]) -> Recording:
    """Receipts of format 1 (layout without tenants), written as it wrote
    them (the keys spelled out byte by byte in test_commands)."""
    store = Recording()
    for mid in mids:
        r = waiting() if mid in waiting_ids else receipt()
        write_old_layout(store, replace(r, message_id=mid))
    store.changes.clear()
    return store


def expected_after_migration(mids: list[str], waiting_ids: set[str]) -> dict[bytes, bytes]:
    """Format 2 of the same receipts, built independently: each at its
    receipt id, with its indexes under the tenant-scoped keys."""
    out: dict[bytes, bytes] = {MARKER: NOW}
    for mid in mids:
        r = waiting() if mid in waiting_ids else receipt()
        r = replace(r, message_id=mid)
        rid = f"2:t1/{mid}"
        out[b"R" + rid.encode()] = cmd.encode_receipt(r)
        out[b"C2:t1/corr\x00" + mid.encode()] = b""
        if r.status == "PROCESSING":
            out[b"W" + rid.encode()] = b""
        if r.dispatched:
            out[b"T" + struct.pack(">d", r.updated_at) + rid.encode()] = b""
    return out


IDS = st.lists(st.text("abcm0123", min_size=1, max_size=4), min_size=1, max_size=12, unique=True)


@settings(max_examples=60, deadline=None)
@given(IDS, st.data())
def test_format_1_state_is_migrated_then_marked(mids: list[str], data: Any) -> None:
    waiting_ids = set(data.draw(st.lists(st.sampled_from(mids), unique=True)))
    store = old_receipts(mids, waiting_ids)
    assert formats.open_partition(store, 0, "p0") == 1
    assert content(store) == expected_after_migration(mids, waiting_ids)
    assert store.changes[-1] == (MARKER, NOW)  # the marker last: a cut migration runs again
    store.changes.clear()
    assert formats.open_partition(store, 0, "p0") == N
    assert store.changes == []  # marked: nothing more to do


@settings(max_examples=40, deadline=None)
@given(IDS, st.data())
def test_a_migration_cut_anywhere_ends_the_same_when_run_again(mids: list[str], data: Any) -> None:
    waiting_ids = set(data.draw(st.lists(st.sampled_from(mids), unique=True)))
    whole = old_receipts(mids, waiting_ids)
    formats.open_partition(whole, 0, "p0")
    cut = data.draw(st.integers(0, len(whole.changes)))
    store = old_receipts(mids, waiting_ids)
    for key, value in whole.changes[:cut]:  # what a crash left of it
        if value is None:
            store.delete(0, key)
        else:
            store.put(0, key, value)
    formats.open_partition(store, 0, "p0")
    assert content(store) == expected_after_migration(mids, waiting_ids)


def test_the_migration_leaves_no_stale_old_index_entry() -> None:
    store = old_receipts(["m1"], set())
    store.put(0, b"cother\x00m9", b"")  # what a cut move left: entries without a receipt
    store.put(0, b"wm9", b"")
    store.put(0, b"t" + struct.pack(">d", 1.0) + b"m9", b"")
    formats.open_partition(store, 0, "p0")
    assert not any(k[:1] in OLD_FAMILIES for k in content(store))
    assert content(store) == expected_after_migration(["m1"], set())


def test_the_migration_is_listed_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cmd, "MIGRATION_BATCH", 3)
    mids = [f"m{i}" for i in range(10)]
    store = old_receipts(mids, {"m4"})
    formats.open_partition(store, 0, "p0")
    assert content(store) == expected_after_migration(mids, {"m4"})


def test_the_ordered_table_gets_only_the_marker() -> None:
    store = Recording()
    store.put(0, codecs.key_state_key("k"), b"\x04state")
    store.put(0, codecs.key_state_key("w"), b"[1]")  # keys that start as old families would
    store.changes.clear()
    formats.open_partition(store, 0, "p0")
    assert store.changes == [(MARKER, NOW)]


def test_a_newer_partition_is_refused_and_nothing_is_written() -> None:
    store = old_receipts(["m1"], set())
    store.put(0, MARKER, NEXT)
    store.changes.clear()
    with pytest.raises(NewerState, match=rf"state format {N + 1}, .* formats up to {N}"):
        formats.open_partition(store, 0, "commands partition 0")
    assert store.changes == []


def test_a_newer_format_this_release_reads_is_kept_as_marked() -> None:
    store = Recording()
    store.put(0, MARKER, f"{N + 1}/{N}".encode())
    store.changes.clear()
    assert formats.open_partition(store, 0, "p0") == N + 1
    assert store.changes == []  # never marked down


def test_a_registered_next_format_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []
    three = Format(N + 1, "a new family", N + 1, lambda store, p: ran.append(p))
    monkeypatch.setattr(formats, "FORMATS", (*FORMATS, three))
    monkeypatch.setattr(formats, "CURRENT", three)
    monkeypatch.setattr(formats, "NEWEST", three)
    store = old_receipts(["m1"], set())
    assert formats.open_partition(store, 0, "p0") == 1  # format 1 -> ... -> N + 1
    assert ran == [0] and store.get(0, MARKER) == NEXT
    assert not any(k[:1] in OLD_FAMILIES for k in content(store))
    with pytest.raises(NewerState, match=f"formats up to {N + 1}"):
        formats.readable(f"{N + 2}/{N + 2}".encode(), "p")


def test_a_release_that_prepares_readers_reads_the_new_format_and_writes_the_old(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[int] = []
    three = Format(N + 1, "a new family", N + 1, lambda store, p: ran.append(p))
    monkeypatch.setattr(formats, "FORMATS", (*FORMATS, three))
    monkeypatch.setattr(formats, "NEWEST", three)  # (CURRENT stays format N)
    store = old_receipts(["m1"], set())
    assert formats.open_partition(store, 0, "p0") == 1
    assert ran == [] and store.get(0, MARKER) == NOW  # migrated to N, not N + 1
    newer = Recording()
    newer.put(0, MARKER, NEXT)  # what the next release wrote: read, kept
    newer.changes.clear()
    assert formats.open_partition(newer, 0, "p1") == N + 1 and newer.changes == []
    formats.check_record(MARKER, NEXT, "p")


# -- the changelog and local databases -------------------------------------------
def test_a_changelog_marker_too_new_stops_the_apply_before_any_write(tmp_path: Path) -> None:
    db = Rdict(str(tmp_path / "t-0.db"), Options(raw_mode=True))
    try:
        records = [(0, 0, b"s\x00\x00\x00\x01k", b"x"), (0, 1, MARKER, NEXT)]
        with pytest.raises(NewerState, match="changelog partition 0 at offset 1"):
            apply_changelog(lambda p: db, records)
        assert list(db.keys()) == []
        assert apply_changelog(lambda p: db, [(0, 0, MARKER, NOW)]) == {0: 0}
        assert db.get(MARKER) == NOW
    finally:
        db.close()


def test_a_local_database_too_new_is_refused_in_one_line(tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    for name, marker in (("t-0.db", NOW), ("t-1.db", b"7/5")):
        db = Rdict(str(tables / name), Options(raw_mode=True))
        db[MARKER] = marker
        db.close()
    line = refused_state(tables)
    assert line is not None and "\n" not in line
    assert "t-1.db" in line and "state format 7" in line and f"up to {N}" in line
    db = Rdict(str(tables / "t-1.db"), Options(raw_mode=True))
    db[MARKER] = NOW
    db.close()
    assert refused_state(tables) is None
    assert refused_state(tmp_path / "none") is None


def test_snapshots_and_inspect_do_not_take_the_marker_for_a_key() -> None:
    assert codecs.describe(MARKER, b"2/2") == ("state_format", "", None, '"2/2"')
    assert cmd.describe(MARKER, b"2/2") == ("state_format", "", None, '"2/2"')
    table = {MARKER: b"2/2"}
    assert lookup(table, message_id="m1") == [] and lookup(table, correlation_id="corr") == []
