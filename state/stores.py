"""Per-key views and writers for the processors, over one
:class:`PartitionStore` (layout: :mod:`state.codecs`).

Every read is a point lookup or one seek; every write touches only what
changed. Nothing here decides anything: the processors do.

Decoded key states are kept in memory (:class:`Stores`, up to
:data:`KEY_STATES_KEPT`), so a step reads its key's state without a lookup
or a decode; every step's writes go through to the store at once. Only a
confirmation's new ``confirmed`` stays in memory until the key's next step
writes it (or :meth:`Stores.settle`, at a clean stop and a rebalance): a
crash before that leaves an older ``confirmed`` whose released messages are
deleted already, so a restart emits again at most the gap markers of that
range (byte-identical), and the busy path saves a state write per message.

Write order makes a crash harmless wherever it cuts a step: the key state is
the commit record of a step. Seen ids written before it are only believed
when their FIFO position lies inside the key state's window and the FIFO
entry names the same id (the FIFO's newest entries are in the key state
itself, the open page; a page record written before it, when the page
filled, is written again by the step that fills it next); a buffer entry
written before it is taken again by the Resequencer when its message is
replayed (only the last step of a key can be cut: every step before it is
complete, so its replayed input is a redelivery); deletions of forgotten ids
come first (forgetting early is harmless), and so do deletions of confirmed
buffer entries (their output is durable: a missing entry is not emitted
again, see :mod:`processors.resequencer`).
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from dataclasses import dataclass, field

import orjson

from seqkeeper.processors.deduplicator import DedupDecision, Seen, SeenWindow
from seqkeeper.processors.envelope import Message
from seqkeeper.processors.key_retention import Forgotten, Plan
from seqkeeper.processors.resequencer import KeyState, Step
from seqkeeper.state import codecs
from seqkeeper.state.base import Change, PartitionStore
from seqkeeper.state.codecs import PAGE_IDS, SeenPage


class ReorderBuffer:
    """One key's reorder buffer (a ``BufferLookup``); made for every
    record, used by few (nothing is looked up while nothing waits).
    ``held``: the messages this process put in the buffer and has not
    deleted (see :attr:`Stores._held`), found without a parse. ``looked_up``:
    the sequence and store key of the last :meth:`get` (the step that puts
    that message needs the same key)."""

    __slots__ = ("_store", "_partition", "_key", "_held", "looked_up")

    def __init__(
        self,
        store: PartitionStore,
        partition: int,
        key: str,
        held: dict[bytes, HeldMessage] | None = None,
    ) -> None:
        self._store = store
        self._partition = partition
        self._key = key
        self._held = {} if held is None else held
        self.looked_up: tuple[str, int, bytes] | None = None

    def get(self, seq: int) -> Message | None:
        store_key = codecs.buffer_key(self._key, seq)
        self.looked_up = (self._key, seq, store_key)
        found = self._held.get(store_key)
        if found is not None and found[0] == self._partition:
            return Message(self._key, found[1], found[2], found[3], found[4], found[5], found[6])
        raw = self._store.get(self._partition, store_key)
        return None if raw is None else codecs.decode_message(self._key, raw)

    def first_after(self, seq: int) -> int | None:
        found = self._store.seek(
            self._partition, codecs.buffer_key(self._key, seq + 1), codecs.buffer_prefix(self._key)
        )
        return None if found is None else codecs.buffer_seq(found[0])


class SeenIds:
    """One key's remembered messageIds (a ``SeenLog``), as far as the key
    state's window vouches for them. ``looked_up``: the id and store key of
    the last :meth:`get` (the step that remembers that id needs the same
    key)."""

    __slots__ = ("_store", "_stores", "_partition", "_key", "_window", "_page", "looked_up")

    def __init__(
        self, store: PartitionStore, partition: int, key: str, window: SeenWindow, stores: Stores
    ) -> None:
        self._store = store
        self._stores = stores
        self._partition = partition
        self._key = key
        self._window = window
        #: the key's open page, read when first needed
        self._page: SeenPage | None = None
        self.looked_up: tuple[str, str, bytes] | None = None

    def get(self, message_id: str) -> Seen | None:
        store_key = codecs.seen_id_key(self._key, message_id)
        self.looked_up = (self._key, message_id, store_key)
        raw = self._store.get(self._partition, store_key)
        if raw is None:
            return None
        seen = codecs.decode_seen_id(raw)
        if not self._window.head <= seen.position < self._window.tail:
            return None  # written by a step a crash cut short, or forgotten
        return seen if self._id_at(seen.position) == message_id else None

    def at(self, position: int) -> tuple[str, float] | None:
        page = self._open_page()
        if position < page.legacy_below:
            raw = self._store.get(self._partition, codecs.seen_position_key(self._key, position))
            return None if raw is None else codecs.decode_seen_position(raw)
        mid = self._id_at(position)
        if mid is None:
            return None
        # A page keeps no times: the id's own record does. Without one that
        # names this position (its deletion ran ahead of the page's, a cut
        # write; or the id was accepted again since, at a later position)
        # the entry is gone: treated as missing, the id's record is kept.
        raw = self._store.get(self._partition, codecs.seen_id_key(self._key, mid))
        seen = None if raw is None else codecs.decode_seen_id(raw)
        return None if seen is None or seen.position != position else (mid, seen.accepted_at)

    def _id_at(self, position: int) -> str | None:
        """The id the FIFO holds at ``position`` (``None``: none)."""
        page = self._open_page()
        if position < page.legacy_below:
            raw = self._store.get(self._partition, codecs.seen_position_key(self._key, position))
            return None if raw is None else codecs.decode_seen_position(raw)[0]
        if position >= page.first:
            at = position - page.first
            return page.ids[at] if at < page.size else None
        raw = self._store.get(
            self._partition, codecs.seen_page_key(self._key, position // PAGE_IDS)
        )
        if raw is None:
            return None
        first, ids = codecs.decode_seen_page(raw)
        at = position - first
        return ids[at] if 0 <= at < len(ids) else None

    def _open_page(self) -> SeenPage:
        page = self._page
        if page is None:
            page = self._page = self._stores.page(self._partition, self._key)
        return page


#: Decoded key states :class:`Stores` keeps (when there are more, the
#: confirmations only in memory are written and all are dropped).
KEY_STATES_KEPT = 100_000

#: Messages :class:`Stores` keeps of those this process put in the reorder
#: buffer (when there are more, all are dropped: lookups read the store).
MESSAGES_HELD = 100_000

Slot = tuple[int, str]  # (partition, key)
#: A held message: its partition, then its fields after its key. A plain
#: tuple, which the garbage collector stops tracking (a Message stays
#: tracked: one per message, kept until its confirmation, would make every
#: collection longer). Held by the buffer entry's store key (bytes: a
#: ``(partition, key, seq)`` key would be one more tracked tuple per message);
#: the same store key in another partition replaces it, which only costs
#: that lookup a store read.
HeldMessage = tuple[int, str, int, str, bytes, float | None, tuple[tuple[str, bytes | None], ...]]


@dataclass
class Stores:
    """The state table of the ordered/deduplicated topology."""

    state: PartitionStore
    keep: int = KEY_STATES_KEPT
    #: buffer messages with their fields (read with a configured shape:
    #: their bytes alone do not say their key, sequence or messageId)
    packed: bool = False
    #: decoded key states, as last written or read
    _states: dict[Slot, tuple[KeyState, SeenWindow]] = field(
        default_factory=dict, init=False, repr=False
    )
    #: the open pages of the keys in ``_states`` (the same keys)
    _pages: dict[Slot, SeenPage] = field(default_factory=dict, init=False, repr=False)
    #: keys whose confirmation is only in memory so far (:meth:`confirm`)
    _unwritten: set[Slot] = field(default_factory=set, init=False, repr=False)
    #: the messages put in the reorder buffer by :meth:`save` and not deleted
    #: since (up to :data:`MESSAGES_HELD`): a release needs no parse
    _held: dict[bytes, HeldMessage] = field(default_factory=dict, init=False, repr=False)
    #: the one view of each kind :meth:`buffer` and :meth:`seen` hand out
    _buffer_view: ReorderBuffer = field(init=False, repr=False)
    _seen_view: SeenIds = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._buffer_view = ReorderBuffer(self.state, 0, "", self._held)
        self._seen_view = SeenIds(self.state, 0, "", SeenWindow(), self)

    def load(self, partition: int, key: str) -> tuple[KeyState, SeenWindow]:
        slot = (partition, key)
        found = self._states.get(slot)
        if found is None:
            state, window, page = codecs.decode_key_record(
                self.state.get(partition, codecs.key_state_key(key))
            )
            found = state, window
            self._keep(slot, found, page)
        return found

    def page(self, partition: int, key: str) -> SeenPage:
        """A key's open page (:class:`codecs.SeenPage`), as last written."""
        found = self._pages.get((partition, key))
        if found is None:
            raw = self.state.get(partition, codecs.key_state_key(key))
            _, _, found = codecs.decode_key_record(raw)
        return found

    def _window(self, partition: int, key: str) -> SeenWindow:
        """A key's seen window, as last kept or written."""
        found = self._states.get((partition, key))
        if found is None:
            return codecs.decode_key_state(self.state.get(partition, codecs.key_state_key(key)))[1]
        return found[1]

    def peek(self, partition: int, key: str) -> tuple[KeyState, SeenWindow] | None:
        """A key's state as :meth:`load` gives it (``None``: never stored),
        for a reader beside the processing (a state query). Nothing is kept:
        :meth:`load` keeping it could evict the busy keys' states, or settle
        (write) them when the cache is full, on a read."""
        found = self._states.get((partition, key))
        if found is not None:  # (newer than the store by a confirmation)
            return found
        raw = self.state.get(partition, codecs.key_state_key(key))
        return None if raw is None else codecs.decode_key_state(raw)

    def _keep(
        self, slot: Slot, state: tuple[KeyState, SeenWindow], page: SeenPage | None = None
    ) -> None:
        """Keep a key's state (and its open page: ``None``, the one kept)."""
        states = self._states
        if len(states) >= self.keep and slot not in states:
            self.settle()
            states.clear()
            self._pages.clear()
        if page is None:
            page = self._pages.get(slot)
            if page is None:  # (dropped with the others since it was read)
                page = self.page(*slot)
        states[slot] = state
        self._pages[slot] = page

    def settle(self, partitions: Container[int] | None = None) -> int:
        """Write the states whose confirmation is only in memory (those of
        ``partitions``, or all); how many were written."""
        written = 0
        for slot in list(self._unwritten):
            partition, key = slot
            if partitions is None or partition in partitions:
                state, window = self._states[slot]
                page = self.page(partition, key)
                self.state.write(
                    partition, [self._state_change(partition, key, state, window, page)]
                )
                written += 1
        self._unwritten.clear()  # the others: another worker's partitions now
        return written

    def forget_cached(self) -> None:
        """Drop what is kept in memory (:meth:`settle` first): the state may
        change under it (a partition recovered from its changelog)."""
        self.state.sync()
        self._states.clear()
        self._pages.clear()
        self._unwritten.clear()
        self._held.clear()

    def _state_change(
        self, partition: int, key: str, state: KeyState, window: SeenWindow, page: SeenPage
    ) -> Change:
        """The write of a key's new state (kept in memory from now on)."""
        slot = (partition, key)
        self._keep(slot, (state, window), page)
        if self._unwritten:
            self._unwritten.discard(slot)
        return codecs.key_state_key(key), codecs.encode_key_state(state, window, page), ()

    def buffer(self, partition: int, key: str) -> ReorderBuffer:
        """One key's reorder buffer: a view valid until the next call (one
        object, aimed at the key: the hot path asks for one per record)."""
        view = self._buffer_view
        view._partition, view._key = partition, key
        return view

    def seen(self, partition: int, key: str, window: SeenWindow) -> SeenIds:
        """One key's seen ids: a view valid until the next call (as :meth:`buffer`)."""
        view = self._seen_view
        view._partition, view._key, view._window = partition, key, window
        view._page = None  # (read when needed: from the kept ones, else the store)
        return view

    def save(
        self,
        partition: int,
        key: str,
        step: Step,
        window: SeenWindow,
        decision: DedupDecision | None = None,
        revived: bool = False,
    ) -> None:
        """Persist a step (and the dedup decision that admitted its message),
        in one write: deletions of forgotten ids, the new seen id, the buffer
        changes, the key state; for a key ``revived`` from its forgotten
        marker, the marker's deletion after it (a crash between them leaves
        both: the state is read first)."""
        changes: list[Change] = []
        slot = (partition, key)
        page = self._pages.get(slot)
        if page is None:
            page = self.page(partition, key)
        if decision is not None:
            kept = self._states.get(slot)
            before = (self._window(partition, key) if kept is None else kept[1]).head
            if decision.forget or window.head != before:  # (rare: no call on the hot path)
                _forget_seen(changes, key, page, decision.forget, before, window.head)
            if decision.remember is not None:
                mid, seen = decision.remember
                if seen.position == page.legacy_below != 0:
                    # a key of format 3 state: a p record a cut step left
                    # at its tail would never be read, nor deleted
                    stray = codecs.seen_position_key(key, seen.position)
                    if self.state.get(partition, stray) is not None:
                        changes.append((stray, None, ()))
                page = _remember(changes, key, page, mid, seen.position, window)
                last = self._seen_view.looked_up  # (the offer looked it up)
                if last is not None and last[0] == key and last[1] == mid:
                    seen_key = last[2]
                else:
                    seen_key = codecs.seen_id_key(key, mid)
                changes.append((seen_key, codecs.encode_seen_id(seen), ()))
        put = step.buffer_put
        if put is not None:
            last_get = self._buffer_view.looked_up  # (the offer may have looked it up)
            if last_get is not None and last_get[0] == key and last_get[1] == put.seq:
                store_key = last_get[2]
            else:
                store_key = codecs.buffer_key(key, put.seq)
            changes.append((store_key, codecs.encode_message(put, self.packed), ()))
            held = self._held
            if len(held) >= MESSAGES_HELD:
                held.clear()
            held[store_key] = (
                partition,
                put.message_id,
                put.seq,
                put.type,
                put.value,
                put.event_time,
                put.headers,
            )
        if step.buffer_deletes:  # before the state
            self._delete_buffered(changes, partition, key, step.buffer_deletes)
        changes.append(self._state_change(partition, key, step.state, window, page))
        if revived:
            changes.append((codecs.forgotten_key(key), None, ()))
        self.state.write(partition, changes)

    def _delete_buffered(
        self, changes: list[Change], partition: int, key: str, seqs: tuple[int, ...]
    ) -> None:
        held = self._held
        for seq in seqs:
            store_key = codecs.buffer_key(key, seq)
            changes.append((store_key, None, ()))
            held.pop(store_key, None)  # (another partition's entry too: then it is read)

    def confirm(self, partition: int, key: str, step: Step, window: SeenWindow) -> None:
        """Persist a confirmation: the buffer deletions now, the new state in
        memory (written with the key's next step, or by :meth:`settle`)."""
        if step.buffer_deletes:
            changes: list[Change] = []
            self._delete_buffered(changes, partition, key, step.buffer_deletes)
            self.state.write(partition, changes)
        slot = (partition, key)
        self._keep(slot, (step.state, window))
        self._unwritten.add(slot)

    def forget(
        self,
        partition: int,
        key: str,
        state: KeyState,
        window: SeenWindow,
        forget: tuple[tuple[int, str], ...],
    ) -> None:
        """Persist a sweep: ``forget`` (position, id) and the new window."""
        changes: list[Change] = []
        page = self.page(partition, key)
        _forget_seen(changes, key, page, forget, self._window(partition, key).head, window.head)
        page = _trimmed(page, window)
        changes.append(self._state_change(partition, key, state, window, page))
        self.state.write(partition, changes)

    def marker(self, partition: int, key: str) -> Forgotten | None:
        """A forgotten key's marker (``None``: none kept)."""
        raw = self.state.get(partition, codecs.forgotten_key(key))
        return None if raw is None else codecs.decode_forgotten(raw)

    def retire(
        self, partition: int, key: str, state: KeyState, plan: Plan, processed: bool
    ) -> None:
        """Persist a key-retention plan, in one write: the seen ids'
        deletions first (forgetting ids early is harmless); then either the
        trimmed window in the key state, or (forgetting the key) the marker,
        the key state's deletion, and the processor's record (``processed``)
        last. A crash keeps a prefix: the key alive with fewer ids; the key
        and its marker (the state is read first); or, cut before the
        processor's record is deleted, that record left for the key if it
        comes back (its state as it would have been without forgetting)."""
        changes: list[Change] = []
        page = self.page(partition, key)
        head = self._window(partition, key).head
        _forget_seen(changes, key, page, plan.forget, head, plan.window.head)
        slot = (partition, key)
        if plan.marker is None:
            page = _trimmed(page, plan.window)
            changes.append(self._state_change(partition, key, state, plan.window, page))
        else:
            # a page a crash left written beyond the window (its step cut
            # before the key state): the key's last record of the family
            stray = codecs.seen_page_key(key, plan.window.tail // PAGE_IDS)
            if self.state.get(partition, stray) is not None:
                changes.append((stray, None, ()))
            changes.append((codecs.forgotten_key(key), codecs.encode_forgotten(plan.marker), ()))
            changes.append((codecs.key_state_key(key), None, ()))
            if processed:
                changes.append((codecs.processed_key(key), None, ()))
            self._states.pop(slot, None)
            self._pages.pop(slot, None)
            self._unwritten.discard(slot)
        self.state.write(partition, changes)

    def markers(self, partition: int, after: str | None = None) -> Iterator[tuple[str, Forgotten]]:
        """The forgotten keys' markers in a partition, in store order, or
        those after the key ``after`` (the marker sweep)."""
        start = b"" if after is None else codecs.forgotten_key(after) + b"\x00"
        for store_key, raw in self.state.items(partition, codecs.FORGOTTEN, start):
            yield codecs.key_of(store_key), codecs.decode_forgotten(raw)

    def drop_markers(self, partition: int, keys: list[str]) -> None:
        """Drop the markers of ``keys`` (past their horizon)."""
        self.state.write(partition, [(codecs.forgotten_key(k), None, ()) for k in keys])

    def save_index(self, partition: int, keys: list[str], buffered: int) -> None:
        """Remember, with the partition's local state, which keys the next
        start-up must look at and how many messages are buffered (a clean
        stop writes it; any later write voids it)."""
        self.state.mark(partition, orjson.dumps({"keys": keys, "buffered": buffered}))

    def take_index(self, partition: int) -> tuple[list[str], int] | None:
        """What :meth:`save_index` wrote, if the state is still as it was."""
        raw = self.state.take_mark(partition)
        if raw is None:
            return None
        index = orjson.loads(raw)
        return list(index["keys"]), int(index["buffered"])

    def buffered_keys(self, partition: int) -> Iterator[str]:
        """The keys with reorder-buffer entries in a partition (messages
        waiting, or released and not yet confirmed), each once, in store
        order (the order of :meth:`key_states`): the keys a start-up without
        a clean stop's index looks at. O(buffer entries); nothing decoded
        but each key's name."""
        last = b""
        for store_key, _ in self.state.items(partition, codecs.BUFFER):
            prefix = store_key[:-8]  # (family, key; then the 8-byte sequence)
            if prefix != last:
                last = prefix
                yield codecs.key_of(store_key)

    def key_states(
        self, partition: int, after: str | None = None
    ) -> Iterator[tuple[str, KeyState, SeenWindow]]:
        """Every key's state in a partition, in store order (startup and
        rebalance scans), or those after the key ``after`` (sweeps); as kept
        in memory where it is (newer by a confirmation)."""
        start = b"" if after is None else codecs.key_state_key(after) + b"\x00"
        states = self._states
        for store_key, raw in self.state.items(partition, codecs.KEY_STATE, start):
            key = codecs.key_of(store_key)
            kept = states.get((partition, key))
            state, window = codecs.decode_key_state(raw) if kept is None else kept
            yield key, state, window


def _forget_seen(
    changes: list[Change],
    key: str,
    page: SeenPage,
    forget: tuple[tuple[int, str], ...],
    head: int,
    new_head: int,
) -> None:
    """Delete forgotten seen ids (before the key state: forgetting early is
    harmless), their ``p`` records below the page's ``legacy_below``, and
    the page records the window's head moved past (from ``head`` to
    ``new_head``): every page behind the head was full, so written when it
    filled, unless it lies wholly below ``legacy_below``."""
    for position, forgotten in forget:
        changes.append((codecs.seen_id_key(key, forgotten), None, ()))
        if position < page.legacy_below:
            changes.append((codecs.seen_position_key(key, position), None, ()))
    for index in range(head // PAGE_IDS, new_head // PAGE_IDS):
        if (index + 1) * PAGE_IDS > page.legacy_below:
            changes.append((codecs.seen_page_key(key, index), None, ()))


def _trimmed(page: SeenPage, window: SeenWindow) -> SeenPage:
    """``page`` without the ids the window's head moved past (nor, once the
    head is past it, ``legacy_below``: no ``p`` record is left)."""
    drop = max(0, min(window.head - page.first, page.size))
    legacy = page.legacy_below if window.head < page.legacy_below else 0
    if not drop and legacy == page.legacy_below:
        return page
    return codecs.seen_page(legacy, page.first + drop, page.ids[drop:])


def _remember(
    changes: list[Change], key: str, page: SeenPage, mid: str, position: int, window: SeenWindow
) -> SeenPage:
    """The open page with ``mid`` accepted at ``position``, the window's
    last; when that fills the page, its record (then the next page is open)."""
    first, count, legacy = page.first, page.size, page.legacy_below
    if first + count != position:  # (never, but then none of it is believed)
        page, first, count = SeenPage(legacy, position), position, 0
    page = SeenPage(legacy, first, count + 1, page.raw + codecs.id_bytes(mid))
    if window.head > first or (legacy and window.head >= legacy):
        page = _trimmed(page, window)
    if window.tail % PAGE_IDS:
        return page
    changes.append(
        (
            codecs.seen_page_key(key, (window.tail - 1) // PAGE_IDS),
            codecs.encode_seen_page(page),
            (),
        )
    )
    return SeenPage(page.legacy_below, window.tail)
