"""The processing and commit protocol of a worker, in one place.

A :class:`Task` runs one topology (:class:`~seqkeeper.runtime.protocol.Topology`)
over one store: it takes the topology's outbox, makes the state behind it
durable, produces it, hands it back to confirm, and lets the input offsets
be committed only after that. It moves through explicit states
(:class:`TaskState`); :mod:`seqkeeper.runtime.wiring` drives it from Faust's
events. It makes no Faust call, so the tests drive it with a hand-held
broker (``tests/runtime/test_task.py``).

The commit protocol, as numbered steps: steps 1-2 under either guarantee,
steps 3-5 the write-ahead outbox's (at-least-once, :class:`WriteAhead`),
E2-E4 Kafka transactions' (exactly-once, :class:`Transactional`); the task
is given one of the two when it is built (:class:`CommitStrategy`), and
:meth:`Task.take` calls it. Each step says what a crash
(``kill -9``) between it and the next leaves behind; in every case the
state on the broker is a prefix of the writes made, and no output is on
the broker before the state that produced it.

1. **Process** (the agent, one fetch at a time): the topology reads state,
   decides (pure cores), writes state (local RocksDB and the changelog
   queue) and queues outputs in its outbox, each decision in one
   synchronous block (a user's async function is awaited before the block
   that writes its result). *Crash*: nothing of it left the
   process; the input is read again from the committed offset.
2. **Take** (:meth:`Task.take`, then the guarantee's
   :meth:`~CommitStrategy.commit`, no await before it took the writes): the
   outbox and the changelog writes made so far, together. *Crash*: as
   after 1.
3. **Flush** the taken changelog writes and wait for their acknowledgements;
   only then do they reach the local RocksDB, with the changelog offsets
   they bring it up to (:meth:`LayeredPartitionStore.committed
   <seqkeeper.state.rocksdb.LayeredPartitionStore.committed>`: the local state never
   holds what the changelog does not). *Crash*: the state is durable,
   its outputs are not; the new owner finds them unconfirmed and emits
   them again (:meth:`Topology.on_assigned`).
4. **Produce** the batch, after the batch taken before it, and wait for
   its acknowledgements (a record whose topic input chose, a reply, and
   that the broker says would not take it, is first replaced by the
   topology's dead letter: :meth:`Task._deliverable`). *Crash*: some or all outputs are on the broker,
   unconfirmed: the new owner emits them again, identical (at-least-once,
   duplicates byte-identical).
5. **Confirm**: the topology records per key how far its output is durable
   (state writes that go out with the next take). *Crash*: the
   confirmation may be lost; as after 4.
6. **Commit** the input offsets (Faust, after :meth:`Task.cycle` ran steps
   2-5 for everything processed so far: the app lifecycle's
   ``before_commit``, :mod:`seqkeeper.adapter.lifecycle`).
   *Crash*: none: everything below the committed offset has durable state
   and outputs.

Steps 2-3 of the next batch may run while step 4 of one is under way (two
stages, each in take order), so a batch's state writes travel in the same
produce requests as the outputs before them.

Exactly-once replaces steps 3-6:

- E2. **Take**: as step 2, and the batch is confirmed at once, the
  confirmations written out (``Topology.settle``) and taken with the
  changelog writes, with each input partition's exact position
  (``Topology.positions``). *Crash*: as after 1.
- E3. **Transact**, after the transactions of the take before: per input
  partition with work, one transaction of its changelog writes, its
  outputs and its position. *Crash*: nothing of an uncommitted transaction
  is visible to ``read_committed`` readers; the new owner reads the input
  again from the position committed with the state it restores.
- E4. **After commit**: only now does the local state hold the writes, and
  Faust learn the committed positions (the consumer never commits).
  *Crash*: the local state lacks committed writes; the changelog's tail is
  replayed.

Around it, the local state (:class:`LocalState`): a worker that did not
stop cleanly keeps its local RocksDB (which never holds a write before the
changelog does) and replays the changelog after its offsets; a clean stop
runs a last cycle, lets the topology describe its state for the next start
(:meth:`Task.suspend`), and marks the local state clean.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from seqkeeper.adapter.transactions import Fenced, TransactionFailed
from seqkeeper.runtime.protocol import Batch, Positions, Topology
from seqkeeper.runtime.tracing import NO_CYCLE, Tracing
from seqkeeper.state.base import Out, Record
from seqkeeper.state.integrity import discard_corrupt

log = logging.getLogger("seqkeeper.runtime")


class TaskState(enum.Enum):
    CREATED = "created"  #: built; nothing assigned yet
    RESTORING = "restoring"  #: a rebalance reached the state: being restored
    RUNNING = "running"  #: the assigned partitions' state is restored
    SUSPENDED = "suspended"  #: a clean stop ran its last cycle
    CLOSED = "closed"  #: stopped; the local state is marked clean


#: The transitions a task may make.
TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    # (CREATED -> RUNNING: a first restore Faust announced to no hook)
    TaskState.CREATED: frozenset(
        {TaskState.RESTORING, TaskState.RUNNING, TaskState.SUSPENDED, TaskState.CLOSED}
    ),
    TaskState.RESTORING: frozenset(
        {TaskState.RESTORING, TaskState.RUNNING, TaskState.SUSPENDED, TaskState.CLOSED}
    ),
    TaskState.RUNNING: frozenset({TaskState.RESTORING, TaskState.SUSPENDED, TaskState.CLOSED}),
    TaskState.SUSPENDED: frozenset({TaskState.CLOSED}),
    TaskState.CLOSED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A task was asked to move to a state it cannot reach from its own."""


class ChangelogStore(Protocol):
    """What the task needs of the topology's store
    (:class:`~seqkeeper.state.rocksdb.LayeredPartitionStore`)."""

    def take_writes(self) -> Any: ...

    async def flush(self, writes: Any) -> None: ...

    @property
    def changelog_topic(self) -> str: ...

    def committed(self, cycle: Any, last: Mapping[tuple[str, int], int]) -> None: ...

    def sync(self) -> None: ...


class Transactions(Protocol):
    """What the task needs for exactly-once
    (:class:`~seqkeeper.adapter.transactions.TransactionalProducers`)."""

    async def commit(
        self,
        partition: int,
        records: Mapping[tuple[str, int], Iterable[Record]],
        position: int | None,
    ) -> dict[tuple[str, int], int]: ...


class OutputProducer(Protocol):
    """What the task needs of the producer
    (:class:`~seqkeeper.adapter.producer.BatchProducer`)."""

    async def group(self, records: list[Out], topic_of: Callable[[str], str]) -> Any: ...

    async def send(self, grouped: Any) -> Any: ...


class Destinations(Protocol):
    """What the task needs to ask whether a topic takes the worker's writes
    (:class:`~seqkeeper.adapter.destinations.Destinations`)."""

    async def problem(self, topic: str) -> str | None: ...


class Task:
    """One worker's processing protocol (see the module docstring)."""

    def __init__(
        self,
        topology: Topology,
        store: ChangelogStore,
        producer: OutputProducer,
        topic_of: Callable[[str], str],
        linger: float = 0.0,
        transactions: Transactions | None = None,
        on_committed: Callable[[dict[int, int]], None] = lambda positions: None,
        on_fatal: Callable[[BaseException], None] = lambda error: None,
        destinations: Destinations | None = None,
    ) -> None:
        self.topology = topology
        self.store = store
        self.producer = producer
        self.topic_of = topic_of
        self.linger = linger
        #: the guarantee, chosen once: with ``transactions`` (exactly-once)
        #: each cycle commits a transaction per input partition, calling
        #: ``on_committed`` with the input positions it committed and
        #: ``on_fatal`` when one was fenced or aborted (after it was logged;
        #: the worker stops there, without a clean stop); without, the
        #: write-ahead outbox
        self.guarantee: CommitStrategy = (
            WriteAhead(self)
            if transactions is None
            else Transactional(self, transactions, on_committed, on_fatal)
        )
        #: asks whether the topics of a batch's addressed records take writes
        self.destinations = destinations
        #: the commit cycles' spans (:mod:`seqkeeper.runtime.tracing`), if on
        self.tracing: Tracing | None = None
        self.state = TaskState.CREATED
        self.wake = asyncio.Event()
        topology.on_output = self.wake.set
        self.taking = asyncio.Lock()
        #: agents waiting in relieve() for the next take
        self.waiters: list[asyncio.Future[None]] = []
        #: the produce stages of the last two takes (each awaits the one before)
        self.stages: list[asyncio.Future[None]] = []

    # -- states ----------------------------------------------------------------
    def _to(self, state: TaskState) -> None:
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"task {self.state.value} cannot become {state.value}")
        if state is not self.state:
            log.info("task %s -> %s", self.state.value, state.value)
        self.state = state

    def on_rebalance(self) -> None:
        """A rebalance reached the state, before any partition's RocksDB is
        closed or restored: write what waits in memory to the local state
        (it may be closed next), and tell the topology."""
        self.store.sync()
        if self.state in (TaskState.SUSPENDED, TaskState.CLOSED):
            return
        self.topology.on_revoked()
        self._to(TaskState.RESTORING)

    def on_restored(self, partitions: set[int]) -> None:
        """The state of ``partitions`` (all this worker owns) is restored."""
        if self.state in (TaskState.SUSPENDED, TaskState.CLOSED):
            return
        self.guarantee.assigned()
        self.topology.on_assigned(partitions)
        self._to(TaskState.RUNNING)

    def on_tick(self, positions: Positions, wall: float) -> Awaitable[None] | None:
        """A timer tick, while running (not during a rebalance); what the
        topology still has to await, if anything."""
        if self.state is TaskState.RUNNING:
            return self.topology.on_tick(positions, wall)
        return None

    # -- the commit protocol -----------------------------------------------------
    async def take(self) -> asyncio.Future[None]:
        """Step 2 (take), and what the guarantee does next before the
        following take may start (write-ahead: step 3, flush); returns the
        rest under way (write-ahead: steps 4-5; transactional: E3-E4)."""
        async with self.taking:
            stages = self.stages
            # At most one batch is being produced while this one is taken
            # (the bound on what waits in memory). A failed produce stage
            # fails every take after it (and every produce stage: each
            # awaits the one before).
            if len(stages) == 2:
                await stages.pop(0)
            if stages and stages[-1].done():
                stages[-1].result()
            # 2. take: the outbox, then (in the guarantee, no await between)
            # the writes behind it
            batch = self.topology.take()
            before = stages[-1] if stages else None
            work = await self.guarantee.commit(batch, before, self._release)
            stage = asyncio.ensure_future(work)
            stage.add_done_callback(self._wake_on_failure)
            stages.append(stage)
            return stage

    def _release(self) -> None:
        """The outbox is empty again: an agent held back by relieve() may go
        on (what it adds goes to the next take)."""
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    async def _deliverable(self, batch: Batch) -> None:
        """Before a batch is produced: each record under a name input chose
        (:attr:`Batch.addressed`: a command's ``replyTo``) whose topic does
        not take the worker's writes (missing on a cluster that creates no
        topics on demand, or no Write ACL) is replaced by the topology's
        dead letter. Produced as it was, it would fail the cycle (under
        exactly-once: abort the transaction that carries the cycle's state),
        hold back every other record, and fail again after a restart. The
        question is asked once per topic and remembered
        (:mod:`seqkeeper.adapter.destinations`): a first sight waits a few
        seconds at most."""
        destinations = self.destinations
        if not batch.addressed or destinations is None:
            return
        refused: dict[str, tuple[str, str]] = {}
        for name in sorted(batch.addressed):
            topic = self.topic_of(name)
            problem = await destinations.problem(topic)
            if problem is not None:
                refused[name] = (topic, problem)
        if not refused:
            return
        records, spans, topology = batch.records, batch.spans, self.topology
        for i, (start, partition) in enumerate(spans):
            end = spans[i + 1][0] if i + 1 < len(spans) else len(records)
            for at in range(start, end):
                hit = refused.get(records[at][0])
                if hit is not None:
                    records[at] = topology.undeliverable(partition, records[at], *hit)

    def _wake_on_failure(self, stage: asyncio.Future[None]) -> None:
        if not stage.cancelled() and stage.exception() is not None:
            self.wake.set()  # the outbox loop's next take raises it

    async def cycle(self) -> None:
        """Steps 2-5 for everything processed so far: run before every
        offset commit (step 6)."""
        await (await self.take())

    async def taken(self) -> None:
        """Return once a take has taken the outbox as it is now: at once
        after the take under way (if any), not after any acknowledgement of
        the outputs."""
        if not self.taking.locked():
            await self.take()  # nothing being taken: take it now
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        self.wake.set()  # the outbox loop's next take takes it (no linger)
        await waiter

    async def relieve(self, limit: int) -> None:
        """Back-pressure for the agent: once the outbox holds ``limit``
        records, wait until a take takes them before taking more input (the
        agent would otherwise run ahead of the broker, queueing outputs and
        changelog writes without bound).

        It waits for the take under way to finish and the next to take the
        outbox (when no take is under way, it takes the outbox itself and
        waits for those state writes' acknowledgements), not for any
        output's acknowledgements. Bound: besides the outbox (up to
        ``limit`` records and a fetch's worth), at most two taken batches
        wait for their outputs (:meth:`take`)."""
        if len(self.topology.outbox.records) >= limit:
            await self.taken()

    async def run(self) -> None:
        """The outbox loop: a take ``linger`` seconds after the first output
        (at once when an agent waits in :meth:`relieve`)."""
        while True:
            await self.wake.wait()
            if self.linger and not self.waiters:
                await asyncio.sleep(self.linger)
            self.wake.clear()
            await self.take()

    async def suspend(self, rebalancing: bool) -> None:
        """A clean stop, before the state closes: a last cycle, the
        topology's last writes durable, and its description of the state for
        the next start. During a rebalance only the local writes are made:
        the assignment in memory may not be the state's."""
        if self.state in (TaskState.SUSPENDED, TaskState.CLOSED):
            return
        self.store.sync()
        if not rebalancing and self.state is TaskState.RUNNING:
            await self.cycle()  # produce and confirm what waits
            self.topology.on_stop()  # its last writes (the confirmations)
            await self.guarantee.last_writes()
            self.store.sync()
            self.topology.describe()
        self._to(TaskState.SUSPENDED)

    def close(self) -> None:
        self._to(TaskState.CLOSED)

    def probe(self) -> dict[str, Any]:
        return {
            "task": self.state.value,
            "outbox wake": self.wake.is_set(),
            "outbox taking": self.taking.locked(),
            "outbox batches producing": sum(not stage.done() for stage in self.stages),
            "agents waiting for the outbox": len(self.waiters),
        }


class CommitStrategy(Protocol):
    """What a take does after step 2 under the worker's guarantee: the
    write-ahead outbox (:class:`WriteAhead`) or Kafka transactions
    (:class:`Transactional`), chosen once, when the task is built."""

    async def commit(
        self, batch: Batch, before: asyncio.Future[None] | None, release: Callable[[], None]
    ) -> Awaitable[None]:
        """Take the state writes behind ``batch`` (no await before: they are
        the outbox's), call ``release`` once they are taken, and return
        what must follow in the order of the takes, after ``before``."""
        ...

    async def last_writes(self) -> None:
        """A clean stop: make the topology's last writes durable."""
        ...

    def assigned(self) -> None:
        """A new assignment's state is restored."""
        ...


async def traced(spans: Any, work: Awaitable[None]) -> None:
    """``work``, the rest of a cycle, then the end of the cycle's span."""
    try:
        await work
    except BaseException as error:
        spans.end(error)
        raise
    spans.end()


class WriteAhead:
    """At-least-once: each batch's state is durable before its outputs are
    produced, and its outputs before they are confirmed (steps 3-5)."""

    __slots__ = ("task",)

    def __init__(self, task: Task) -> None:
        self.task = task

    async def commit(
        self, batch: Batch, before: asyncio.Future[None] | None, release: Callable[[], None]
    ) -> Awaitable[None]:
        store = self.task.store
        writes = store.take_writes()
        release()
        tracing = self.task.tracing
        spans = (
            NO_CYCLE
            if tracing is None or not batch
            else tracing.cycle("at_least_once", len(batch.records))
        )
        # 3. flush: the state is durable before any of its outputs
        try:
            with spans.step("flush"):
                await store.flush(writes)
        except BaseException as error:
            spans.end(error)
            raise
        work = self._produce(batch, before, spans)
        return work if spans is NO_CYCLE else traced(spans, work)

    async def _produce(
        self, batch: Batch, before: asyncio.Future[None] | None, spans: Any = NO_CYCLE
    ) -> None:
        """Steps 4 and 5 (produce, confirm), in the order of the takes."""
        if before is not None:
            await before  # (and failing with it)
        if not batch:
            return
        task = self.task
        # 4. produce
        with spans.step("produce"):
            await task._deliverable(batch)
            grouped = await task.producer.group(batch.records, task.topic_of)
            await task.producer.send(grouped)
        # 5. confirm
        with spans.step("confirm"):
            task.topology.confirm(batch)

    async def last_writes(self) -> None:
        store = self.task.store
        await store.flush(store.take_writes())

    def assigned(self) -> None:
        return None


class Transactional:
    """Exactly-once: each batch is confirmed as it is taken (E2), then one
    transaction per input partition with work commits its changelog writes,
    its outputs and its input position together (E3), and only then does
    the local state hold the writes (E4)."""

    __slots__ = ("task", "transactions", "on_committed", "on_fatal", "committed")

    def __init__(
        self,
        task: Task,
        transactions: Transactions,
        on_committed: Callable[[dict[int, int]], None],
        on_fatal: Callable[[BaseException], None],
    ) -> None:
        self.task = task
        self.transactions = transactions
        self.on_committed = on_committed
        self.on_fatal = on_fatal
        #: the input position last committed per partition
        self.committed: dict[int, int] = {}

    async def commit(
        self, batch: Batch, before: asyncio.Future[None] | None, release: Callable[[], None]
    ) -> Awaitable[None]:
        topology = self.task.topology
        # E2. confirmed as taken (the confirmations commit in the outputs'
        # transaction, or nothing does) at exactly the input positions of
        # what was processed
        topology.confirm(batch)
        topology.settle()
        positions = dict(topology.positions)
        writes = self.task.store.take_writes()
        release()
        tracing = self.task.tracing
        spans = (
            NO_CYCLE
            if tracing is None or not batch
            else tracing.cycle("exactly_once", len(batch.records))
        )
        work = self._transact(batch, writes, positions, before, spans)
        return work if spans is NO_CYCLE else traced(spans, work)

    async def _transact(
        self,
        batch: Batch,
        writes: Any,
        positions: dict[int, int],
        before: Any,
        spans: Any = NO_CYCLE,
    ) -> None:
        """E3-E4, in the order of the takes: per input partition with work,
        one transaction of its changelog writes, its outputs and its input
        position; then the local state may say the changelog holds the
        writes."""
        if before is not None:
            await before  # (and failing with it)
        task = self.task
        transactions = self.transactions
        await task._deliverable(batch)  # (before any transaction begins)
        outputs = batch.by_partition()
        moved = {p: at for p, at in positions.items() if self.committed.get(p) != at}
        partitions = sorted(set(outputs) | set(writes) | set(moved))
        if not partitions:
            task.store.committed(writes, {})
            return
        changelog = task.store.changelog_topic

        async def commit(partition: int) -> dict[tuple[str, int], int]:
            records: dict[tuple[str, int], Any] = {}
            if partition in outputs:
                records = await task.producer.group(outputs[partition], task.topic_of)
            written = writes.get(partition)
            if written is not None:
                records[(changelog, partition)] = written.records()
            with spans.step("transaction", **{"seqkeeper.input.partition": partition}):
                return await transactions.commit(partition, records, moved.get(partition))

        try:
            done = await asyncio.gather(*(commit(p) for p in partitions))
        except Fenced as error:
            log.error("fenced: %s; its uncommitted writes are discarded, stopping", error)
            self.on_fatal(error)
            raise
        except TransactionFailed as error:
            log.error("transaction aborted: %s; stopping", error)
            self.on_fatal(error)
            raise
        # E4. only now may the local state hold the writes
        task.store.committed(writes, {tp: offset for last in done for tp, offset in last.items()})
        self.committed.update(moved)
        if moved:
            self.on_committed(moved)

    async def last_writes(self) -> None:
        await self.task.cycle()  # (in a transaction, as every changelog write)

    def assigned(self) -> None:
        self.committed.clear()  # (positions start afresh with the assignment)


#: In the data directory: exists while a worker runs on it.
MARKER = "worker.running"
#: In the data directory: the member id its worker was last given in each
#: of its consumer groups, a line ``group<TAB>member<TAB>joined|given`` each.
MEMBERS = "group.members"


class Member(NamedTuple):
    """A consumer group member id, and whether a join with it completed."""

    id: str
    joined: bool


def read_members(path: Path) -> dict[str, Member]:
    """The members kept in ``path``, by group (none if unreadable)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    members = {}
    for line in text.splitlines():
        group, member, state = (line.split("\t") + ["", ""])[:3]
        if group and member:
            members[group] = Member(member, state == "joined")
    return members


def previous_members(data_dir: Path) -> dict[str, Member]:
    """After an unclean stop, the member the previous worker on ``data_dir``
    had in each consumer group (the coordinator may count it in until its
    session expires); none after a clean stop, which left."""
    if not (data_dir / MARKER).exists():
        return {}
    return read_members(data_dir / MEMBERS)


class LocalState:
    """The local state directory across worker runs: a marker file exists
    while a worker runs on it. Found at start, the previous worker did not
    stop cleanly (``kill -9``, OOM, power loss, a fenced transaction). Its
    local RocksDB is kept all the same: it holds only what the changelog
    holds, with the changelog offset it reflects in the same batch
    (:mod:`seqkeeper.state.rocksdb`), so each partition replays only the
    changelog records after that offset. What it checks instead: every
    database must pass the integrity check, and after an unclean stop one
    holding state must carry the format key (one written by an earlier
    version may hold writes the changelog never got): else it is discarded
    and rebuilt from the changelog."""

    def __init__(self, data_dir: Path, tabledir: Path) -> None:
        self.marker = data_dir / MARKER
        #: the member id the worker on it was last given in each consumer
        #: group (:mod:`seqkeeper.adapter.membership`)
        self.members = data_dir / MEMBERS
        self._members = read_members(self.members)
        self.tabledir = tabledir

    def remember_member(self, group: str, member_id: str, joined: bool) -> None:
        """Keep the member id the worker was given in ``group`` and whether
        its join completed, for the next start after an unclean stop
        (written only when that changes)."""
        kept = self._members.get(group)
        if not member_id or (kept is not None and kept.id == member_id and kept.joined >= joined):
            return
        self._members[group] = Member(member_id, joined)
        fresh = self.members.with_suffix(".new")
        fresh.write_text(
            "".join(
                f"{g}\t{m.id}\t{'joined' if m.joined else 'given'}\n"
                for g, m in sorted(self._members.items())
            )
        )
        fresh.replace(self.members)  # (a kill -9 leaves the old ids or the new)

    def open(self, say: Callable[[str], None]) -> concurrent.futures.Future[None]:
        """Mark the local state in use and check it in a thread (the tables
        wait for the returned future before they open a database)."""
        unclean = self.marker.exists()
        if unclean:
            say(
                "the previous worker did not stop cleanly: local state "
                f"{self.tabledir} is kept; each partition replays the changelog "
                "after the offset its state holds"
            )
        check = check_local_state(self.tabledir, say, unclean)
        self.marker.write_text(f"{os.getpid()}\n")
        return check

    def close_cleanly(self) -> None:
        """A clean stop: the local state matches the changelog (and the
        worker left its group)."""
        self.marker.unlink(missing_ok=True)
        self.members.unlink(missing_ok=True)


def check_local_state(
    tabledir: Path, say: Callable[[str], None], unclean: bool = False
) -> concurrent.futures.Future[None]:
    """Check the local state in a thread; a database that fails the check is
    discarded and rebuilt from the changelog."""

    def check() -> None:
        for db, problem in discard_corrupt(tabledir, unclean):
            say(f"local state {db} {problem}: discarded, rebuilt from the changelog")

    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="integrity")
    future = pool.submit(check)
    pool.shutdown(wait=False)
    return future
