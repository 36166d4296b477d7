"""The AsyncAPI document (seqkeeper/contracts.py, schemas/asyncapi.json): valid
AsyncAPI 3.0.0 by the official JSON Schema (vendored in tests/contracts/),
current, complete (every topic the workers and compact use), and in step
with the reason codes the code can write."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator

from seqkeeper.contracts import (
    ALL_REASONS,
    DOCUMENT,
    REASONS,
    SCHEMAS,
    build,
    component_name,
    default_settings,
    render,
    schema_files,
)
from seqkeeper.processors.command import CommandReason
from seqkeeper.processors.envelope import Reason
from seqkeeper.processors.processor import PROCESSOR_FAILED

ROOT = Path(__file__).resolve().parent.parent
ASYNCAPI = json.loads((ROOT / "tests" / "contracts" / "asyncapi-3.0.0.schema.json").read_text())


def asyncapi_errors(document: dict[str, Any]) -> list[str]:
    found = Draft7Validator(ASYNCAPI).iter_errors(document)
    return [f"{list(e.absolute_path)}: {e.message[:200]}" for e in found]


def test_the_vendored_schema_is_asyncapi_3_0_0() -> None:
    Draft7Validator.check_schema(ASYNCAPI)
    assert ASYNCAPI["properties"]["asyncapi"]["const"] == "3.0.0"
    assert len(ASYNCAPI["definitions"]) > 50  # the bundled form: no other file needed


def test_the_document_is_valid_asyncapi_3() -> None:
    document = json.loads(DOCUMENT.read_text())
    assert document["asyncapi"] == "3.0.0"
    assert asyncapi_errors(document) == []


@pytest.mark.parametrize(
    "spoil",
    [
        lambda d: d["operations"]["receiveInput"].update(action="publish"),  # (AsyncAPI 2's word)
        lambda d: d["channels"]["eventsIn"].update(address=4),
        lambda d: d["components"]["messages"]["command"].update(bindings={"kafka": {"key": 3}}),
        lambda d: d.pop("info"),
    ],
)
def test_the_check_can_fail(spoil: Any) -> None:
    document = build()
    spoil(document)
    assert asyncapi_errors(document)


def test_the_committed_document_is_the_generated_one() -> None:
    """Regenerate it with ``python -m seqkeeper.contracts``."""
    assert DOCUMENT.read_text() == render(build()), "run: python -m seqkeeper.contracts"


def pointer(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def test_every_reference_resolves_and_operations_use_their_channel_s_messages() -> None:
    """What the JSON Schema cannot say (an AsyncAPI parser's checks)."""
    document = build()
    found = refs(document)
    assert len(found) > 50
    for ref in found:
        pointer(document, ref)  # (a KeyError names it)
    for name, op in document["operations"].items():
        channel = op["channel"]["$ref"]
        assert op["messages"], name
        for message in op["messages"]:
            assert message["$ref"].startswith(channel + "/messages/"), (name, message)
        if "reply" in op:
            reply = op["reply"]["channel"]["$ref"]
            assert all(m["$ref"].startswith(reply + "/messages/") for m in op["reply"]["messages"])


def test_every_topic_a_worker_or_compact_uses_is_a_channel() -> None:
    """Independently of how the document names them: the topics each
    topology creates (``Settings.topics``, with a processor and a key field,
    so every optional one is there) and those ``seqkeeper compact`` reads."""
    from seqkeeper.spark_sink.job import plan_topics

    document = build()
    addresses = {c["address"] for c in document["channels"].values()}
    s = default_settings()
    wanted = set()
    for topology in ("ordered", "commands"):
        full = s.with_overrides(topology=topology, processor="m:f", key_field="account.id")
        wanted |= set(full.topics())
    changelogs, messages = plan_topics(s, existing=wanted | {"x.replies"} | set(addresses) - {None})
    wanted |= set(changelogs) | set(messages) - {"x.replies"}
    assert len(wanted) >= 12
    assert wanted <= addresses, wanted - addresses
    assert None in addresses  # the replies: a topic the command names


def test_each_worker_sends_and_receives_what_it_does() -> None:
    document = build()
    by = {
        (op["tags"][0]["name"], op["action"], op["channel"]["$ref"].rsplit("/", 1)[1])
        for op in document["operations"].values()
    }
    assert ("ordered worker", "receive", "eventsIn") in by
    ordered_outs = ("eventsOrdered", "eventsDeduped", "eventsDlq", "eventsLate", "eventsProcessed")
    for out in (*ordered_outs, "processorTopics"):
        assert ("ordered worker", "send", out) in by
    assert ("command worker", "receive", "commandsIn") in by
    for out in ("commandsEvents", "commandsDlq", "replies"):
        assert ("command worker", "send", out) in by
    assert ("repartitioner", "send", "eventsRepartition") in by
    assert not {b for b in by if b[0] == "ordered worker" and b[2].startswith("commands")}


def test_the_settings_in_effect_name_the_topics() -> None:
    s = default_settings().with_overrides(input_topic="orders.in", app_id="shop")
    channels = build(s)["channels"]
    assert channels["eventsIn"]["address"] == "orders.in"
    allowed = build(s.with_overrides(processor_topics="commands.in,saga-*"))["channels"]
    assert "(commands.in, saga-*)" in allowed["processorTopics"]["description"]
    assert channels["orderedChangelog"]["address"] == "shop-state-changelog"
    assert (
        channels["commandsChangelog"]["address"] == "shop-commands-commands-changelog"
    )  # (group id + table)
    assert build()["channels"]["eventsIn"]["address"] == "events.in"


def test_every_schema_file_is_a_component() -> None:
    names = {p.name for p in SCHEMAS.glob("*.schema.json")}
    assert {"processor-output.schema.json", "command-dead-letter-headers.schema.json"} <= names
    assert len(build()["components"]["schemas"]) == len(names) == len(schema_files())


# -- the reason codes ---------------------------------------------------------


def enum_of(name: str) -> list[str]:
    doc = json.loads((SCHEMAS / name).read_text())
    return list(doc["properties"]["seqkeeper.reason"]["enum"])


@pytest.mark.parametrize("name", sorted(REASONS))
def test_each_dead_letter_schema_lists_its_topic_s_reasons(name: str) -> None:
    listed = enum_of(name)
    assert len(listed) == len(set(listed))
    assert set(listed) == set(REASONS[name]), set(listed) ^ set(REASONS[name])


def test_the_dead_letter_schema_lists_every_reason() -> None:
    listed = enum_of("dead-letter-headers.schema.json")
    assert len(listed) == len(set(listed))
    assert set(listed) == set(ALL_REASONS), set(listed) ^ set(ALL_REASONS)
    assert "processor-failed" in listed


def emitted_reasons(sources: list[str]) -> set[str]:
    """The reason codes ``sources`` can write: every ``Reason.X``,
    ``CommandReason.X`` and ``PROCESSOR_FAILED`` they use, and every
    kebab-case string given to a call that makes a dead letter or a
    rejection (``dead_letter_headers``, ``InvalidMessage``, ``bad``, a
    ``dead_letter`` method)."""
    classes = {"Reason": Reason, "CommandReason": CommandReason}
    makers = {"dead_letter_headers", "InvalidMessage", "bad", "dead_letter", "undeliverable_letter"}
    found: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in classes
                and node.attr.isupper()
            ):
                found.add(getattr(classes[node.value.id], node.attr))
            elif isinstance(node, ast.Name) and node.id == "PROCESSOR_FAILED":
                found.add(PROCESSOR_FAILED)
            elif isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name in makers:
                    found |= {
                        arg.value
                        for arg in node.args
                        if isinstance(arg, ast.Constant)
                        and isinstance(arg.value, str)
                        and "-" in arg.value
                        and arg.value.replace("-", "").isalpha()
                    }
    return found


def the_code() -> list[str]:
    """The processors, topologies and runtime: where dead letters are made."""
    files = [
        *(ROOT / "processors").glob("*.py"),
        *(ROOT / "topologies").glob("*.py"),
        *(ROOT / "seqkeeper" / "runtime").glob("*.py"),
    ]
    return [path.read_text() for path in files]


def test_every_reason_the_code_can_write_is_in_the_schemas() -> None:
    found = emitted_reasons(the_code())
    assert len(found) >= 20  # (the scan sees the code)
    assert found <= set(ALL_REASONS), found - set(ALL_REASONS)
    assert found <= set(enum_of("dead-letter-headers.schema.json"))


def test_the_scan_finds_a_new_reason() -> None:
    """The check above can fail: a reason the code writes only as a
    literal, or as a new constant, is seen."""
    source = (
        'self.dead_letter("dlq", key, value, "brand-new", detail, 0, 1)\n'
        "raise InvalidMessage(Reason.MISSING_KEY, 'x')\n"
    )
    assert emitted_reasons([source]) == {"brand-new", "missing-key"}


def test_a_channel_s_dead_letters_name_only_its_reasons() -> None:
    components = build()["components"]["schemas"]
    events = components["eventDeadLetterHeaders"]["properties"]["seqkeeper.reason"]["enum"]
    commands = components["commandDeadLetterHeaders"]["properties"]["seqkeeper.reason"]["enum"]
    assert not set(events) & set(commands)
    assert "late-arrival" in events and "handler-failed" in commands


def test_the_embedded_schemas_judge_as_the_files_do() -> None:
    """components.schemas (draft-07, as AsyncAPI reads them, ``$ref``s
    rewritten) accept and refuse the same documents as the files."""
    import orjson

    from seqkeeper.processors.dead_letter import dead_letter_headers, schema_document
    from seqkeeper.processors.resequencer import GapSkipped
    from seqkeeper.verification.workload import generate
    from tests.test_schemas import registered

    components = build()["components"]

    def embedded(name: str) -> Draft7Validator:
        return Draft7Validator({"$ref": f"#/components/schemas/{name}", "components": components})

    events = [orjson.loads(v) for _, v in generate(messages=30, keys=3, malformed=0).records]
    letters = [
        schema_document(dead_letter_headers(r, "why", "t", 0, o, 5))
        for r in [*ALL_REASONS, "no-such-reason"]
        for o in (3, None)
    ]
    samples: dict[str, list[Any]] = {
        "event.schema.json": [*events, {"seq": 0}, {"messageId": "", "seq": 1, "type": "t"}],
        "gap-skipped.schema.json": [orjson.loads(GapSkipped("k", 2, 4).value), events[0]],
        "dead-letter-headers.schema.json": letters,
        "event-dead-letter-headers.schema.json": letters,
        "command-dead-letter-headers.schema.json": letters,
    }
    verdicts = []
    for name, docs in samples.items():
        from_file, from_document = registered(name), embedded(component_name(name))
        for doc in docs:
            verdict = from_file.is_valid(doc)
            assert from_document.is_valid(doc) == verdict, (name, doc)
            verdicts.append(verdict)
    assert True in verdicts and False in verdicts
