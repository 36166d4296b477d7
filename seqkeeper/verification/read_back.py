"""A run's topics read back to their exact ends and verified
(:mod:`seqkeeper.verification.verify`): once, or polled until the
verification passes; the exactly-once check that no output came twice."""

from __future__ import annotations

import time

from seqkeeper.fleet.poll import poll
from seqkeeper.fleet.processes import WorkerProcess
from seqkeeper.plugins import codec_of
from seqkeeper.processors.envelope import Shape
from seqkeeper.settings import Settings
from seqkeeper.topics import Record, TopicCache, UnknownTopic
from seqkeeper.verification.verify import Check, Report, verify


def message_shape(settings: Settings) -> Shape:
    """Where the ordered worker of ``settings`` finds its messages' key,
    sequence and messageId (its key, sequence and messageId settings, its
    codec loaded): how :func:`verify_topics` reads them. A codec that cannot
    be loaded is a :class:`~seqkeeper.plugins.PluginError`, a bad dotted
    path a ``ValueError``."""
    return settings.ordered.shape(codec_of(settings.ordered))


async def verify_topics(
    settings: Settings,
    drained: bool = False,
    cache: TopicCache | None = None,
    isolation: str = "read_uncommitted",
    shape: Shape | None = None,
) -> Report:
    """Read the input and output topics to their exact ends and verify them
    (the late topic may be missing: the default policy never creates it).
    Polling with one ``cache`` reads each record once. ``isolation``: how
    the topics are read when no ``cache`` is given (a cache reads as it was
    made); ``read_committed`` sees only a transactional writer's committed
    outputs, ``read_uncommitted`` every record written. ``shape``: how the
    messages are read, the settings' (:func:`message_shape`) when ``None``."""
    if shape is None:
        shape = message_shape(settings)
    topics = cache or TopicCache(settings.broker.bootstrap, isolation)

    async def _optional(topic: str) -> list[Record]:
        try:
            return await topics.read(topic)
        except UnknownTopic:
            return []

    return verify(
        await topics.read(settings.ordered.input_topic),
        await topics.read(settings.ordered.ordered_topic),
        await topics.read(settings.ordered.deduped_topic),
        await topics.read(settings.ordered.dlq_topic)
        + await _optional(settings.ordered.late_topic),
        drained=drained,
        shape=shape,
    )


#: The check :func:`no_reemissions` adds to a report.
REEMITTED = "exactly-once: re-emitted"


def no_reemissions(report: Report) -> Report:
    """``report`` with one more check, failing when any output was emitted
    more than once (``report.reemitted``, per output, byte-identical repeats
    included): what exactly-once promises a ``read_committed`` reader."""
    counts = report.reemitted
    total = sum(counts.values())
    detail = ", ".join(f"{name} {n:,}" for name, n in counts.items()) if total else ""
    report.checks.append(Check(REEMITTED, total, detail))
    return report


async def wait_until_verified(
    settings: Settings,
    timeout: float,
    worker: WorkerProcess | None = None,
    drained: bool = False,
    isolation: str = "read_uncommitted",
) -> Report:
    """Poll :func:`verify_topics` until it passes or ``timeout`` runs out
    (``isolation``: how the topics are read; the messages in the settings'
    shape, :func:`message_shape`)."""
    shape = message_shape(settings)
    cache = TopicCache(settings.broker.bootstrap, isolation)
    return await poll(
        lambda: verify_topics(settings, drained, cache, shape=shape),
        lambda report: report.ok,
        time.monotonic() + timeout,
        0.5,
        alive=worker.check_alive if worker is not None else None,
        timed_out=worker.dump if worker is not None else None,
    )
