"""Prometheus metrics of the ordered/deduplicated topology (``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages_in = Counter("seqkeeper_messages_in", "Input records consumed", registry=r)
        self.messages_out = Counter(
            "seqkeeper_messages_out", "Records emitted", ["topic"], registry=r
        )
        self.duplicates = Counter(
            "seqkeeper_duplicates_dropped", "Redeliveries dropped", registry=r
        )
        self.seen_forgotten = Counter(
            "seqkeeper_seen_ids_forgotten_by_sweep",
            "Seen messageIds forgotten by the age sweep of quiet keys",
            registry=r,
        )
        self.buffered = Gauge(
            "seqkeeper_messages_buffered", "Messages in reorder buffers", registry=r
        )
        self.late = Counter("seqkeeper_late_arrivals", "Late arrivals", ["route"], registry=r)
        self.gap_timeouts = Counter(
            "seqkeeper_gap_timeouts", "Gaps given up by timeout", registry=r
        )
        self.gaps_overflow = Counter(
            "seqkeeper_gaps_skipped_on_overflow", "Gaps given up on a full buffer", registry=r
        )
        self.skipped = Counter("seqkeeper_sequences_skipped", "Sequences given up", registry=r)
        self.dead_lettered = Counter(
            "seqkeeper_dead_lettered", "Records dead-lettered", ["reason"], registry=r
        )
        self.reemitted = Counter(
            "seqkeeper_reemitted",
            "Records emitted again after a crash or a partition move (same bytes)",
            ["topic"],
            registry=r,
        )
        self.keys_live = Gauge(
            "seqkeeper_keys_live",
            "Sequence keys with state, as counted by the last full sweep of each partition",
            registry=r,
        )
        self.keys_forgotten = Counter(
            "seqkeeper_keys_forgotten",
            "Sequence keys forgotten after SEQKEEPER_KEY_RETENTION idle",
            registry=r,
        )
        self.markers_dropped = Counter(
            "seqkeeper_forgotten_markers_dropped",
            "Forgotten-key markers dropped after SEQKEEPER_FORGOTTEN_KEY_RETENTION",
            registry=r,
        )
        self.lag = Gauge(
            "seqkeeper_consumer_lag", "Input records not yet processed", ["partition"], registry=r
        )
