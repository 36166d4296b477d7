"""The ``broker`` group: which Kafka, and the topics the worker creates on it."""

from __future__ import annotations

from dataclasses import dataclass

from seqkeeper.settings.variables import Group, choice, positive_integer, seconds, var


@dataclass(frozen=True)
class BrokerSettings(Group):
    """Which Kafka, and the topics the worker creates on it."""

    bootstrap: str = var(
        "KAFKA_BOOTSTRAP_SERVERS",
        "",
        "Kafka bootstrap servers, host:port[,host:port]. Empty: start a broker "
        "(Apache Kafka from KAFKA_HOME, else the embedded one).",
    )
    kafka_home: str = var(
        "KAFKA_HOME",
        "",
        "An Apache Kafka distribution directory (3.7+ or 4.x). With no bootstrap servers, "
        "commands that start a broker start a fresh single-node Kafka from it.",
    )
    broker_wait: float = var(
        "SEQKEEPER_BROKER_WAIT",
        "300",
        "How long the worker waits at start for its broker (a line per attempt, backoff "
        "0.5 s to 10 s) before it exits 1; inf: no limit. A broker lost later is retried "
        "without limit.",
        seconds,
        "s",
    )
    partitions: int = var(
        "SEQKEEPER_PARTITIONS",
        "4",
        "Partitions of the topics the worker creates (input, outputs, changelogs).",
        positive_integer,
    )
    replication: int = var(
        "SEQKEEPER_REPLICATION",
        "1",
        "Replication factor of the topics the worker creates.",
        positive_integer,
    )
    isolation: str = var(
        "SEQKEEPER_ISOLATION",
        "read_committed",
        "How the readers outside the worker (compact and the Spark source, replay's audit, "
        "inspect, verify, seqkeeper.client) read topics: read_committed sees only what "
        "transactions committed (on a broker without transactions, every record); "
        "read_uncommitted also sees the writes of aborted and still open transactions.",
        choice("read_committed", "read_uncommitted"),
    )
