"""The ``ordered`` group: the ordered topology (Resequencer and Idempotent
Receiver), its topics and where messages keep their key, sequence and id."""

from __future__ import annotations

import math
from dataclasses import dataclass

from seqkeeper.processors.deduplicator import Retention
from seqkeeper.processors.envelope import DEFAULT_SHAPE, Codec, Shape
from seqkeeper.processors.key_retention import KeyRetention
from seqkeeper.processors.processor import OutputTopics
from seqkeeper.processors.resequencer import Policy
from seqkeeper.processors.return_address import parse_patterns
from seqkeeper.settings.variables import (
    Group,
    choice,
    dotted_path,
    env_of,
    field_path,
    positive_integer,
    schema_id,
    seconds,
    var,
)


@dataclass(frozen=True)
class OrderedSettings(Group):
    """The ordered topology: Resequencer and Idempotent Receiver."""

    input_topic: str = var("SEQKEEPER_INPUT_TOPIC", "events.in", "Input topic.")
    ordered_topic: str = var(
        "SEQKEEPER_ORDERED_TOPIC", "events.ordered", "Output in per-key order, deduplicated."
    )
    deduped_topic: str = var(
        "SEQKEEPER_DEDUPED_TOPIC", "events.deduped", "Output in arrival order, deduplicated."
    )
    dlq_topic: str = var(
        "SEQKEEPER_DLQ_TOPIC", "events.dlq", "Dead letters, with the reason in headers."
    )
    late_topic: str = var(
        "SEQKEEPER_LATE_TOPIC", "events.late", "Late arrivals, when the late policy is late-topic."
    )
    first_seq: str = var(
        "SEQKEEPER_FIRST_SEQ",
        "one",
        "First sequence of a key: one (1), or first-seen (the first the worker sees).",
        choice("one", "first-seen"),
    )
    gap_timeout: float = var(
        "SEQKEEPER_GAP_TIMEOUT",
        "5",
        "How long a gap may hold back buffered messages before it is given up (a "
        "GapSkipped marker is emitted), in event time.",
        seconds,
        "s",
    )
    max_buffered_per_key: int = var(
        "SEQKEEPER_MAX_BUFFERED_PER_KEY", "10000", "Buffered messages per key.", positive_integer
    )
    max_buffered_total: int = var(
        "SEQKEEPER_MAX_BUFFERED",
        "1000000",
        "Buffered messages over all keys of a worker.",
        positive_integer,
    )
    overflow_policy: str = var(
        "SEQKEEPER_OVERFLOW_POLICY",
        "skip",
        "On a full buffer: skip the gap early, or dlq the message.",
        choice("skip", "dlq"),
    )
    late_policy: str = var(
        "SEQKEEPER_LATE_POLICY",
        "dlq",
        "A late arrival (its sequence was given up): dlq, drop, or late-topic.",
        choice("dlq", "drop", "late-topic"),
    )
    seen_max_age: float = var(
        "SEQKEEPER_SEEN_MAX_AGE",
        str(7 * 24 * 3600),
        "How long a seen messageId is remembered (7 days).",
        seconds,
        "s",
    )
    key_retention: float = var(
        "SEQKEEPER_KEY_RETENTION",
        str(7 * 24 * 3600),
        "How long a key with nothing buffered or unconfirmed may stay idle (in stream time, "
        "since it last accepted a message) before it is forgotten: its state is deleted, "
        "locally and in the changelog, leaving a small marker of its next sequence (7 days: "
        "longer than any gap timeout or seen-id age, and than any realistic producer retry "
        "or outage). inf: never.",
        seconds,
        "s",
    )
    forgotten_key_retention: float = var(
        "SEQKEEPER_FORGOTTEN_KEY_RETENTION",
        str(30 * 24 * 3600),
        "How long the marker of a forgotten key is kept: a message for it below its next "
        "sequence is a late arrival, one at or above continues the key. After that the key "
        "is fully gone and starts again as a new key (30 days). inf: forever.",
        seconds,
        "s",
    )
    seen_max_per_key: int = var(
        "SEQKEEPER_SEEN_MAX_PER_KEY",
        "100000",
        "Seen messageIds remembered per key.",
        positive_integer,
    )
    key_field: str = var(
        "SEQKEEPER_KEY_FIELD",
        "",
        "Where a message's sequence key is: empty for the Kafka key, else the dotted path of "
        "a field of the value (then the input is repartitioned by it through an internal "
        "topic).",
        dotted_path,
        check=field_path,
    )
    seq_field: str = var(
        "SEQKEEPER_SEQ_FIELD",
        "seq",
        "The dotted path of the sequence number's field.",
        dotted_path,
        check=field_path,
    )
    seq_header: str = var(
        "SEQKEEPER_SEQ_HEADER",
        "",
        "A header holding the sequence number (ASCII digits) instead of a field.",
    )
    message_id_field: str = var(
        "SEQKEEPER_MESSAGE_ID_FIELD",
        "messageId",
        "The dotted path of the messageId's field.",
        dotted_path,
        check=field_path,
    )
    message_id_header: str = var(
        "SEQKEEPER_MESSAGE_ID_HEADER", "", "A header holding the messageId instead of a field."
    )
    codec: str = var(
        "SEQKEEPER_CODEC",
        "json",
        "How values are read and written (input, gap markers, processor outputs; also by "
        "compact): json, avro (SEQKEEPER_AVRO_SCHEMA), or module:attribute naming an object "
        "with decode(bytes) -> mapping and encode(mapping) -> bytes. See docs/codecs.md.",
    )
    avro_schema: str = var(
        "SEQKEEPER_AVRO_SCHEMA",
        "",
        "With SEQKEEPER_CODEC=avro: the .avsc file of every value the ordered worker reads "
        "and writes (it must also fit gap markers and processor outputs: docs/codecs.md).",
    )
    avro_schema_id: int | None = var(
        "SEQKEEPER_AVRO_SCHEMA_ID",
        "",
        "With SEQKEEPER_CODEC=avro: the schema's registry id; values are then in the "
        "Confluent wire format (magic byte 0, the id, the Avro binary) and a value with "
        "another id is dead-lettered. Empty: plain Avro binary.",
        schema_id,
    )
    processor: str = var(
        "SEQKEEPER_PROCESSOR",
        "",
        "An ordered processor, module:function: fn(state, message) -> (new_state, outputs) "
        "runs on every message of a key once, in sequence order (the current directory is "
        "importable). Empty: none.",
    )
    processed_topic: str = var(
        "SEQKEEPER_PROCESSED_TOPIC", "events.processed", "The ordered processor's outputs."
    )
    processor_topics: tuple[str, ...] = var(
        "SEQKEEPER_PROCESSOR_TOPICS",
        "",
        "Other topics an ordered processor's Output(topic=...) may name: comma-separated "
        "names (created at start) or patterns, * standing for any run of characters. Never "
        "the worker's own topics. Others: the input is dead-lettered processor-failed.",
        parse_patterns,
    )
    event_time_field: str = var(
        "SEQKEEPER_EVENT_TIME_FIELD",
        "",
        "Event time for gap timeouts and seen-id ages: the dotted path of a field of the "
        "value (epoch milliseconds, or ISO-8601 with offset). Empty: the record timestamp.",
        dotted_path,
        check=field_path,
    )
    max_clock_skew: float = var(
        "SEQKEEPER_MAX_CLOCK_SKEW",
        "300",
        "How far a message's event time may run ahead of the worker's clock. One further "
        "ahead is dead-lettered (future-event-time) and does not move stream time, so it "
        "cannot give up other keys' gaps; inf: no bound.",
        seconds,
        "s",
    )

    def resequencer_policy(self) -> Policy:
        return Policy(
            first_seq=self.first_seq,  # type: ignore[arg-type]
            gap_timeout=self.gap_timeout,
            max_buffered_per_key=self.max_buffered_per_key,
            max_buffered_total=self.max_buffered_total,
            overflow=self.overflow_policy,  # type: ignore[arg-type]
            late=self.late_policy,  # type: ignore[arg-type]
        )

    def time_field(self) -> tuple[str, ...]:
        """:attr:`event_time_field` as a path (empty: not configured; a bad
        path failed when the settings were built)."""
        return field_path(self.event_time_field)

    def shape(self, codec: Codec | None = None) -> Shape:
        """Where messages keep their key, sequence and messageId; ``codec``:
        the user's (loaded by the worker), ``None`` for JSON. (A bad path
        failed when the settings were built.)"""
        shape = Shape(
            key_path=field_path(self.key_field),
            seq_path=field_path(self.seq_field) or ("seq",),
            seq_header=self.seq_header,
            id_path=field_path(self.message_id_field) or ("messageId",),
            id_header=self.message_id_header,
            codec=codec,
        )
        return DEFAULT_SHAPE if shape == DEFAULT_SHAPE else shape

    def retention(self) -> Retention:
        return Retention(max_age=self.seen_max_age, max_per_key=self.seen_max_per_key)

    def key_retention_policy(self) -> KeyRetention:
        return KeyRetention(idle=self.key_retention, forgotten=self.forgotten_key_retention)

    def changelog_topic_configs(self) -> dict[str, str]:
        """Configs of the changelog topics the worker creates (besides
        ``cleanup.policy=compact``): deletions (a forgotten key, an ended
        entity) are tombstones, which compaction keeps
        ``delete.retention.ms``; a standby or a restore that reads the topic
        later than that misses the delete and keeps the key. So at least the
        key retention, and never under Kafka's default of one day."""
        day_ms = 24 * 3600 * 1000
        keep = self.key_retention * 1000
        ms = day_ms if math.isinf(keep) else max(day_ms, int(keep))
        return {"delete.retention.ms": str(ms)}

    def topics(self) -> list[str]:
        return [
            self.input_topic,
            self.ordered_topic,
            self.deduped_topic,
            self.dlq_topic,
            self.late_topic,
            *([self.processed_topic] if self.processor else []),
            *(self.named_processor_topics() if self.processor else []),
        ]

    def named_processor_topics(self) -> list[str]:
        """The topics of ``SEQKEEPER_PROCESSOR_TOPICS`` given by name (not
        patterns): the worker creates and checks them at start."""
        return [t for t in self.processor_topics if "*" not in t]

    def output_topics(self, own_prefixes: tuple[str, ...] = ()) -> OutputTopics:
        """Where an ordered processor's outputs may go besides the processed
        topic (never the worker's own topics, nor those starting with
        ``own_prefixes``: its internal topics)."""
        own = (
            self.input_topic,
            self.ordered_topic,
            self.deduped_topic,
            self.dlq_topic,
            self.late_topic,
        )
        setting = env_of(type(self), "processor_topics")
        return OutputTopics(self.processor_topics, self.processed_topic, own, own_prefixes, setting)
