"""What a topology implements, and what the runtime gives it.

A topology is a synchronous object around the pure cores: it is handed
input records and timer ticks, writes its state through a store, and
queues its outputs in an outbox. Only a user's async function (a command
handler, an ordered processor) makes it wait: then ``on_records`` and
``on_tick`` return an awaitable that the runtime awaits before it goes on
(the topology writes each result in one synchronous block after the await,
so an outbox take never sees half of one). It makes no Faust or Kafka call: the
runtime (:mod:`seqkeeper.runtime.task`) takes its outbox, makes the state
behind it durable, produces it and hands it back to confirm, and tells it
when partitions are assigned and revoked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from seqkeeper.state.base import Headers, Out


def seconds(millis: int | None) -> float | None:
    """A record's timestamp (milliseconds) in seconds."""
    return None if millis is None else millis / 1000.0


#: Per owned input partition: (its high watermark, the last offset read),
#: either ``None`` when not known yet.
Positions = dict[int, tuple[int | None, int | None]]


class InputRecord(Protocol):
    """A fetched input record, as its record batch holds it."""

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...

    @property
    def timestamp(self) -> int | None:
        """Milliseconds since the epoch."""
        ...


@dataclass
class Batch:
    """What one outbox cycle produces, and what the topology confirms once
    it is produced (``confirms``: topology-specific, keyed per partition and
    key). ``generation`` is the assignment it belongs to."""

    records: list[Out] = field(default_factory=list)
    confirms: dict[tuple[int, str], Any] = field(default_factory=dict)
    generation: int = 0
    #: stored outputs among ``records`` (partition, key, sequence) that the
    #: topology deletes once they are confirmed (an ordered processor's)
    stored: list[tuple[int, str, int]] = field(default_factory=list)
    #: the input partition of ``records``, in runs: (index of a run's first
    #: record, its partition); exactly-once commits each partition's outputs
    #: in the transaction of its input
    spans: list[tuple[int, int]] = field(default_factory=list)
    #: the partition of the last run (``-1``: none yet)
    partition: int = -1
    #: names among ``records``' that input chose (a command's ``replyTo``):
    #: the runtime asks the broker whether their topics take this worker's
    #: writes before it produces to them, and hands a record it would not
    #: take to :meth:`Topology.undeliverable`
    addressed: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.records or self.confirms or self.stored)

    def by_partition(self) -> dict[int, list[Out]]:
        """``records`` per input partition, each in the order queued."""
        out: dict[int, list[Out]] = {}
        records, spans = self.records, self.spans
        for i, (start, partition) in enumerate(spans):
            end = spans[i + 1][0] if i + 1 < len(spans) else len(records)
            out.setdefault(partition, []).extend(records[start:end])
        return out


class Topology(Protocol):
    """The protocol between a topology and the runtime."""

    #: the records queued since the last take
    outbox: Batch
    #: set by the runtime: called when the outbox gets its first record
    on_output: Callable[[], None]
    #: per input partition, the offset after the last record whose processing
    #: is complete (its state writes and outputs queued): exactly-once commits
    #: it with them; cleared by :meth:`on_assigned`
    positions: dict[int, int]

    def on_records(
        self, partition: int, records: Iterable[InputRecord], wall: float
    ) -> Awaitable[None] | None:
        """Input records of one partition, in offset order; an awaitable when
        user code must still run for them (awaited before the next fetch)."""
        ...

    def on_tick(self, positions: Positions, wall: float) -> Awaitable[None] | None:
        """A timer tick: time-driven steps (gap timeouts, retries, clean-up);
        an awaitable as for :meth:`on_records`."""
        ...

    def take(self) -> Batch:
        """The outbox so far (the next call starts a new one)."""
        ...

    def confirm(self, batch: Batch) -> None:
        """``batch`` was produced and acknowledged."""
        ...

    def settle(self) -> None:
        """Write now what confirmations only keep in memory (exactly-once:
        they must travel in the transaction of the outputs they confirm)."""
        ...

    def on_assigned(self, partitions: set[int]) -> None:
        """The state of ``partitions`` (all this worker owns now) is
        restored: emit again what was not confirmed."""
        ...

    def undeliverable(self, partition: int, record: Out, topic: str, problem: str) -> Out:
        """What to produce instead of ``record`` (an output of input
        partition ``partition`` under a name of :attr:`Batch.addressed`),
        whose ``topic`` the broker said does not take this worker's writes
        (``problem``: its answer): a dead letter."""
        ...

    def on_revoked(self) -> None:
        """A rebalance began: what the topology knows of its partitions may
        be stale until the next :meth:`on_assigned`."""
        ...

    def on_stop(self) -> None:
        """A clean stop, after the last outbox cycle: the topology's last
        state writes (the runtime makes them durable after)."""
        ...

    def describe(self) -> None:
        """A clean stop, once everything is durable: describe the state for
        the next start, in the local state only (any later write voids it)."""
        ...


class OutboxOwner:
    """The outbox half of a topology: queue records, hand batches over.
    Subclasses set ``outbox``, ``generation`` and ``on_output`` and
    implement ``confirm``."""

    outbox: Batch
    generation: int
    on_output: Callable[[], None]
    positions: dict[int, int]
    #: set by the runtime while tracing is on: an output's headers (and its
    #: topic's name) to the headers it is produced with
    #: (:meth:`seqkeeper.runtime.tracing.Tracing.stamp`)
    stamp: Callable[[str, Headers], Headers] | None = None

    def emit(
        self,
        partition: int,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = None,
    ) -> None:
        """Queue an output of input partition ``partition``'s state."""
        if self.stamp is not None:
            headers = self.stamp(topic, headers)
        outbox = self.outbox
        records = outbox.records
        if partition != outbox.partition:
            outbox.spans.append((len(records), partition))
            outbox.partition = partition
        records.append((topic, key, value, headers))
        if len(records) == 1:
            self.on_output()

    def take(self) -> Batch:
        """The outbox so far; the runtime produces it once the state written
        until now is durable, then calls ``confirm``."""
        batch, self.outbox = self.outbox, Batch(generation=self.generation)
        batch.generation = self.generation
        self.taken(batch)
        return batch

    def taken(self, batch: Batch) -> None:
        """Called with every batch taken (metrics)."""

    def on_revoked(self) -> None:
        """Nothing to forget by default: :meth:`Topology.on_assigned` starts
        a new generation."""

    def on_stop(self) -> None:
        """No last writes by default."""

    def undeliverable(self, partition: int, record: Out, topic: str, problem: str) -> Out:
        """By default the record itself: producing it fails as it would."""
        return record

    def settle(self) -> None:
        """No confirmation waits in memory by default."""

    def describe(self) -> None:
        """Nothing to describe by default."""


#: A state query's parameters: its path's (``/state/{key}``) and its query
#: string's, as text.
Params = Mapping[str, str]


class BadQuery(ValueError):
    """A state query's parameters cannot be used (HTTP 400): the message
    says why."""


@dataclass(frozen=True)
class Query:
    """A read of a topology's state served by the worker (``GET path``), as
    Kafka Streams' interactive queries: the runtime finds the input partition
    that holds the answer and reads it there when this worker owns it, or
    redirects to the worker that does (:mod:`seqkeeper.runtime.query_routing`)."""

    #: the route, in aiohttp's syntax: ``/state/{key}``
    path: str
    #: the Kafka key of the input records whose partition holds the answer;
    #: ``None`` when the parameters do not say (every partition is searched,
    #: a point read in each); :class:`BadQuery` for unusable parameters
    key: Callable[[Params], bytes | None]
    #: the answer from one partition's state (topology, partition,
    #: parameters): a JSON-able dict, or ``None`` when it is not there
    read: Callable[[Any, int, Params], dict[str, Any] | None]


@dataclass(frozen=True)
class Wiring:
    """How the runtime wires a topology: what it reads, where its state
    lives, and where its outputs go. Built by each topology's ``wiring``."""

    #: the input topic
    input_topic: str
    #: the changelogged table holding the topology's state
    table: str
    #: builds the topology over a store (:class:`~seqkeeper.state.base.PartitionStore`)
    build: Callable[[Any], Topology]
    #: an output's topic name: ``Out[0]`` (a role or a name) to a topic name
    output_topic: Callable[[str], str]
    #: the key prefix whose local writes may wait in memory (see
    #: :class:`~seqkeeper.state.rocksdb.LayeredPartitionStore`), if any
    deferred: bytes | None = None
    #: the topology's Prometheus registry, served at ``/metrics``
    registry: Callable[[Any], Any] = lambda topology: None
    #: extra values for the ``kill -USR1`` diagnostics
    probe: Callable[[Any], dict[str, Any]] = lambda topology: {}
    #: the state queries the worker serves over HTTP
    queries: tuple[Query, ...] = ()
