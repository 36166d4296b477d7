"""Properties of the reply address check (processors/return_address.py)."""

from __future__ import annotations

import fnmatch

import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from seqkeeper.processors.command import parse_command
from seqkeeper.processors.dead_letter import REASON
from seqkeeper.processors.return_address import (
    REPLY_TO_HEADER,
    ReplyTopics,
    legal_topic,
    matches,
    parse_patterns,
    refusal,
    reply_refusal,
    undeliverable_letter,
)

#: a small alphabet, so that names and patterns meet often
names = st.text(alphabet="ab._-", min_size=1, max_size=12).filter(legal_topic)
patterns = st.text(alphabet="ab._-*", min_size=1, max_size=8).filter(
    lambda p: legal_topic(p.replace("*", "x"))
)
#: what the command worker with the test's names owns
OWN = ("cmd.in", "cmd.events", "cmd.dlq")
PREFIX = "app-commands-"


def policy(allowed: tuple[str, ...]) -> ReplyTopics:
    return ReplyTopics(allowed, OWN, (PREFIX,), "SEQKEEPER_REPLY_TOPICS")


def command(reply_to: str | None) -> object:
    doc = {
        "messageId": "m1",
        "commandType": "AddStock",
        "schemaVersion": 1,
        "correlationId": "c1",
        "partitionKey": "sku",
        "tenantId": "t1",
        "replyTo": reply_to,
        "payload": {},
    }
    return parse_command(b"sku", orjson.dumps(doc))


@given(patterns, names)
def test_a_pattern_matches_as_fnmatch_does_with_stars_alone(pattern: str, name: str) -> None:
    assert matches(pattern, name) == fnmatch.fnmatchcase(name, pattern)


@given(
    st.lists(patterns, max_size=4).map(tuple),
    st.sampled_from(OWN),
    st.sampled_from(["", "x", "changelog", "commands-changelog", "__assignor-__leader"]),
    st.sampled_from(["consumer_offsets", "transaction_state", "x", ""]),
)
def test_own_and_kafka_internal_topics_are_never_allowed(
    allowed: tuple[str, ...], own: str, internal: str, kafka: str
) -> None:
    everything = (*allowed, "*", "**", "cmd*", "app-*", "_*")
    for topic in (own, own.replace(".", "_"), PREFIX + internal, f"__{kafka}", f"_.{kafka}"):
        if not legal_topic(topic):
            continue
        assert refusal(topic, policy(everything)) is not None, topic


@given(names, st.lists(patterns, max_size=4).map(tuple))
def test_any_other_legal_name_is_allowed_exactly_when_a_pattern_matches(
    name: str, allowed: tuple[str, ...]
) -> None:
    seen = name.replace(".", "_")
    assume(not seen.startswith("__") and not name.startswith("app"))
    assume(all(seen != own.replace(".", "_") for own in OWN))
    expected = any(fnmatch.fnmatchcase(name, p) for p in allowed)
    assert (refusal(name, policy(allowed)) is None) == expected


@given(st.text(max_size=300))
def test_illegal_names_are_never_allowed(name: str) -> None:
    assume(not legal_topic(name))
    assert refusal(name, policy(("*",))) is not None


def test_what_the_default_allows() -> None:
    """The client's default reply topic, the examples' and the CLI's pass;
    the worker's own topics and Kafka's, the ones tried before, do not."""
    default = policy(parse_patterns("*replies"))
    for ok in ("seqkeeper-client.replies", "shop-client.replies", "seqkeeper-send.replies",
               "commands.replies", "replies"):  # fmt: skip
        assert refusal(ok, default) is None, ok
    refused = {
        "app-commands-commands-changelog": "internal topic of the worker",
        "app-commands-__assignor-__leader": "internal topic of the worker",
        "cmd.in": "own topic 'cmd.in'",
        "cmd_dlq": "own topic 'cmd.dlq'",
        "__consumer_offsets": "Kafka internal topic",
        "payments": "not among the allowed reply topics (*replies)",
        "bad topic": "not a Kafka topic name",
        "": "not a Kafka topic name",
        "x" * 250: "not a Kafka topic name",
    }
    for topic, why in refused.items():
        said = refusal(topic, default)
        assert said is not None and why in said, (topic, said)
    assert "SEQKEEPER_REPLY_TOPICS" in (refusal("payments", default) or "")


def test_a_command_without_reply_to_is_never_refused() -> None:
    nothing = policy(())
    assert reply_refusal(command(None), nothing) is None  # type: ignore[arg-type]
    assert reply_refusal(command("x.replies"), nothing) is not None  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["a b", "a,b c", "ä.replies", "x" * 250, "a/b"])
def test_the_setting_refuses_what_is_no_topic_pattern(text: str) -> None:
    with pytest.raises(ValueError, match="no topic name or pattern"):
        parse_patterns(text)


def test_the_setting_reads_names_and_patterns() -> None:
    assert parse_patterns(" shop.replies, tenant-*.replies ,,") == (
        "shop.replies",
        "tenant-*.replies",
    )
    assert parse_patterns("") == ()


def test_an_undeliverable_reply_keeps_its_trace_and_names_its_topic() -> None:
    headers = dict(
        undeliverable_letter((("traceparent", b"00-x"),), "gone.replies", "missing", "cmd.in", 2)
    )
    assert headers["traceparent"] == b"00-x"
    assert headers[REASON] == b"reply-undeliverable"
    assert headers[REPLY_TO_HEADER] == b"gone.replies"
    assert headers["kafka_dlt-original-topic"] == b"cmd.in"
    assert headers["kafka_dlt-original-partition"] == b"\x00\x00\x00\x02"  # (Spring: an int)
    assert "kafka_dlt-original-offset" not in headers  # (not known at dispatch)
