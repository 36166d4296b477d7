"""The environment of a ``seqkeeper compact`` subprocess in a test."""

from __future__ import annotations

import asyncio
import os

from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics

#: The other topics a worker writes, which ``compact`` audits when they
#: exist: each test names its own (none of them there), as the defaults
#: may be other tests' on a shared broker.
_OWN = (
    "LATE_TOPIC",
    "PROCESSED_TOPIC",
    "COMMAND_TOPIC",
    "EVENTS_TOPIC",
    "COMMAND_DLQ_TOPIC",
    "REPLY_TOPICS",
)


def compact_env(settings: Settings) -> dict[str, str]:
    """This process's environment with ``settings``' ordered topics, and
    names of the test's own for the others."""
    return {
        **os.environ,
        "SEQKEEPER_ORDERED_TOPIC": settings.ordered.ordered_topic,
        "SEQKEEPER_INPUT_TOPIC": settings.ordered.input_topic,
        "SEQKEEPER_DEDUPED_TOPIC": settings.ordered.deduped_topic,
        "SEQKEEPER_DLQ_TOPIC": settings.ordered.dlq_topic,
        **{f"SEQKEEPER_{n}": f"{settings.runtime.app_id}-{n.lower()}" for n in _OWN},
    }


def changelog_and_ordered(bootstrap: str, settings: Settings) -> tuple[str, str]:
    """Create the test's changelog and ordered output (2 partitions each):
    their names."""
    changelog = f"{settings.runtime.app_id}-state-changelog"
    ordered = settings.ordered.ordered_topic
    asyncio.run(create_topics(bootstrap, [changelog, ordered], 2))
    return changelog, ordered
