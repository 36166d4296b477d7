"""Return Address: where a command's reply may go.

A command names the topic of its reply (``replyTo``); the worker writes
there with its own rights, which cover its own topics too. So the address
is checked before the command is applied (:func:`reply_refusal`): a reply
may go to a topic the deployment allows (:attr:`ReplyTopics.allowed`,
patterns in which ``*`` stands for any run of characters) and never to one
of the worker's own topics (its input and outputs, exactly; its internal
topics, by the app id's prefix), nor to a Kafka internal topic (``__…``),
nor to a name Kafka would refuse. A refused command is dead-lettered
(``invalid-reply-to``, :attr:`CommandReason.INVALID_REPLY_TO`) and nothing
else happens to it. A reply whose topic the broker says does not exist or
may not be written is dead-lettered at dispatch instead
(``reply-undeliverable``), the topic in :data:`REPLY_TO_HEADER`.

Kafka does not let two topics exist whose names differ only in ``.`` and
``_`` (they collide in its metric names: ``Topic.hasCollision``), so the
worker's own topics are compared with both read as one: ``commands_in``
can never be a topic beside ``commands.in``.

Invariants (``tests/processors/test_return_address.py``): whatever the
allowed patterns, no reply goes to an own topic, to a name starting with an
own prefix or ``__``, or to an illegal name; any other name goes through
exactly when one pattern matches it (as :func:`fnmatch.fnmatchcase` would
with ``*`` alone).
"""

from __future__ import annotations

from collections.abc import Sequence

from seqkeeper.processors.command import Command, CommandReason, Outgoing
from seqkeeper.processors.dead_letter import dead_letter_headers
from seqkeeper.processors.values import value

#: The header naming the topic an undeliverable reply was for.
REPLY_TO_HEADER = "seqkeeper.reply-to"
#: Kafka's own topics (``__consumer_offsets``, ``__transaction_state``, …).
KAFKA_INTERNAL = "__"
#: Kafka's limit on a topic name's length (``Topic.MAX_NAME_LENGTH``).
MAX_TOPIC_NAME = 249
_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@value
class ReplyTopics:
    """Where replies may go: a topic that one of ``allowed`` matches, and
    that is none of ``own``, starts with none of ``own_prefixes`` nor with
    ``__``. ``setting`` names where ``allowed`` comes from (for the reason
    a refusal gives)."""

    allowed: tuple[str, ...]
    own: tuple[str, ...] = ()
    own_prefixes: tuple[str, ...] = ()
    setting: str = "the allowed reply topics"


def legal_topic(name: str) -> bool:
    """Whether Kafka accepts ``name`` as a topic name (``Topic.validate``)."""
    return (
        0 < len(name) <= MAX_TOPIC_NAME
        and name not in (".", "..")
        and all(c in _LEGAL for c in name)
    )


def parse_patterns(text: str) -> tuple[str, ...]:
    """A comma-separated list of topic names and patterns (``*``: any run of
    characters); blanks dropped. ``ValueError`` saying what is expected."""
    patterns = tuple(part.strip() for part in text.split(",") if part.strip())
    for pattern in patterns:
        if not legal_topic(pattern.replace("*", "x")):
            raise ValueError(
                f"{pattern!r} is no topic name or pattern: expected names of a-z, A-Z, 0-9, "
                "'.', '_', '-' (at most 249), where * stands for any run of characters, "
                "comma-separated"
            )
    return patterns


def matches(pattern: str, name: str) -> bool:
    """Whether ``name`` matches ``pattern``, in which each ``*`` stands for
    any run of characters (none included) and every other character for
    itself."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return name == pattern
    first, *middle, last = parts
    end = len(name) - len(last)
    if end < len(first) or not name.startswith(first) or not name.endswith(last):
        return False
    at = len(first)
    for part in middle:  # (leftmost first: a later part only gets more room)
        found = name.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


def _as_kafka_compares(name: str) -> str:
    return name.replace(".", "_")


def refusal(topic: str, topics: ReplyTopics) -> str | None:
    """Why a reply may not go to ``topic`` (``None``: it may)."""
    if not legal_topic(topic):
        return (
            f"replyTo {topic[:300]!r} is not a Kafka topic name (1 to {MAX_TOPIC_NAME} of "
            "a-z, A-Z, 0-9, '.', '_', '-')"
        )
    seen = _as_kafka_compares(topic)
    if seen.startswith(KAFKA_INTERNAL):
        return f"replyTo {topic!r} names a Kafka internal topic (a name starting with __)"
    for own in topics.own:
        if seen == _as_kafka_compares(own):
            return f"replyTo {topic!r} names the worker's own topic {own!r}"
    for prefix in topics.own_prefixes:
        if seen.startswith(_as_kafka_compares(prefix)):
            return f"replyTo {topic!r} names an internal topic of the worker (prefix {prefix!r})"
    if not any(matches(pattern, topic) for pattern in topics.allowed):
        allowed = ",".join(topics.allowed) or "none"
        return (
            f"replyTo {topic!r} is not among the allowed reply topics ({allowed}): "
            f"reply to one of those, or add it to {topics.setting}"
        )
    return None


def reply_refusal(command: Command, topics: ReplyTopics) -> str | None:
    """Why ``command`` may not be applied because of its ``replyTo``
    (``None``: it asks for no reply, or for one where replies may go)."""
    if command.reply_to is None:
        return None
    return refusal(command.reply_to, topics)


def is_reply(out: Outgoing) -> bool:
    """Whether ``out`` is a command's reply (its messageId is
    ``<commandId>:reply``; events end in ``:<n>``, dead letters in
    ``:dead-letter``)."""
    return out.message_id.endswith(":reply") and out.topic is not None


def undeliverable_letter(
    reply_headers: Sequence[tuple[str, bytes | None]],
    topic: str,
    problem: str,
    source: str,
    partition: int,
) -> list[tuple[str, bytes | None]]:
    """The headers of the dead letter that takes the place of a reply the
    broker would not take in ``topic`` (``problem``: what it answered): the
    reply's own headers (its trace), then the dead-letter headers with
    reason ``reply-undeliverable``, :data:`REPLY_TO_HEADER` naming ``topic``,
    and the command's topic ``source`` and input ``partition`` as the
    origin (the command's offset is not known at dispatch: left out)."""
    detail = (
        f"the reply could not be written to {topic!r}: {problem}; the command was applied "
        "(create the topic or grant the worker Write on it for the next replies)"
    )
    return [
        *reply_headers,
        *dead_letter_headers(
            CommandReason.REPLY_UNDELIVERABLE,
            detail,
            source,
            partition,
            None,
            exception_class="seqkeeper.ReplyUndeliverable",
        ),
        (REPLY_TO_HEADER, topic.encode()),
    ]
