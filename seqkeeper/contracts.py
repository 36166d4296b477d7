"""The topic contracts as one AsyncAPI 3.0 document: every topic seqkeeper
reads and writes, its key, headers and payload, and which worker sends and
which receives it (``seqkeeper contracts``, ``schemas/asyncapi.json``).

It is built from the sources the workers use, so it cannot drift from them:
the topic names and group ids from the settings (:func:`default_settings` for
the committed document, the environment's for the command), the payloads
and headers from the JSON Schemas in ``schemas/`` (embedded as
``components.schemas``, a ``$ref`` between them rewritten to point there),
and the dead-letter reason codes from the constants the processors raise
(:data:`REASONS`; the schemas' enums are checked against them by
``tests/test_contracts.py``, and so is the committed document against
:func:`build`). Regenerate it with ``python -m seqkeeper.contracts``.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

from seqkeeper.processors.command import CommandReason
from seqkeeper.processors.dead_letter import SPRING_BINARY
from seqkeeper.processors.envelope import TRACE_HEADERS, Reason
from seqkeeper.processors.processor import PROCESSOR_FAILED
from seqkeeper.settings import GROUPS, VARS, Settings

__all__ = [
    "ALL_REASONS",
    "ASYNCAPI_VERSION",
    "DOCUMENT",
    "REASONS",
    "SCHEMAS",
    "SchemasMissing",
    "build",
    "default_settings",
    "render",
]

ASYNCAPI_VERSION = "3.0.0"
#: The JSON Schemas (``seqkeeper/schemas`` links the repository's ``schemas/``,
#: and the wheel carries the files).
SCHEMAS = Path(__file__).resolve().parent / "schemas"
#: The committed document, :func:`build` of :func:`default_settings`.
DOCUMENT = SCHEMAS / "asyncapi.json"


def _codes(cls: type) -> tuple[str, ...]:
    return tuple(v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str))


#: Every dead-letter reason code a worker writes (``seqkeeper.reason``), by
#: the schema of the topics it goes to: the input's (``events.dlq``,
#: ``events.late``: the envelope's :class:`Reason` and the ordered
#: processor's ``processor-failed``) and the command topic's
#: (``commands.dlq``: :class:`CommandReason`). The one list: the schemas'
#: enums must equal it (``tests/test_contracts.py``).
REASONS: dict[str, tuple[str, ...]] = {
    "event-dead-letter-headers.schema.json": (*_codes(Reason), PROCESSOR_FAILED),
    "command-dead-letter-headers.schema.json": _codes(CommandReason),
}
#: All of them: the enum of ``dead-letter-headers.schema.json``.
ALL_REASONS: tuple[str, ...] = tuple(dict.fromkeys(r for rs in REASONS.values() for r in rs))


def default_settings() -> Settings:
    """The settings every variable's default gives (no environment)."""
    return Settings(
        **{
            group: cls(**{n: v.read({}) for n, v in VARS.items() if v.group == group})
            for group, cls in GROUPS.items()
        }
    )


def component_name(file_name: str) -> str:
    """``dead-letter-headers.schema.json`` -> ``deadLetterHeaders``."""
    first, *rest = file_name.removesuffix(".schema.json").split("-")
    return first + "".join(word.capitalize() for word in rest)


class SchemasMissing(RuntimeError):
    """This copy of seqkeeper has no JSON Schemas to build the document from."""


@cache
def schema_files() -> dict[str, dict[str, Any]]:
    """Every JSON Schema in :data:`SCHEMAS`, by file name."""
    found = {p.name: json.loads(p.read_text()) for p in sorted(SCHEMAS.glob("*.schema.json"))}
    if not found:
        raise SchemasMissing(
            f"no JSON Schemas in {SCHEMAS}: this copy of seqkeeper was installed without its "
            "schemas/ (reinstall it from a release or the repository)"
        )
    return found


def _embedded(node: Any) -> Any:
    """A schema as an AsyncAPI Schema Object: ``$schema`` and ``$id`` left
    out (the document is its own base), a ``$ref`` to another file of
    :data:`SCHEMAS` pointed at that file's component."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in ("$schema", "$id"):
                continue
            if k == "$ref" and isinstance(v, str) and v in schema_files():
                out[k] = f"#/components/schemas/{component_name(v)}"
            else:
                out[k] = _embedded(v)
        return out
    if isinstance(node, list):
        return [_embedded(v) for v in node]
    return node


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _setting(field: str) -> str:
    return VARS[field].env


def _text(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


def _headers(**properties: dict[str, Any]) -> dict[str, Any]:
    """A message's headers: ``properties`` and W3C trace context, which
    seqkeeper carries from input to output; others allowed."""
    trace = {
        name: _text(f"W3C trace context ({name}), carried from the input record to its outputs.")
        for name in TRACE_HEADERS
    }
    return {"type": "object", "properties": {**properties, **trace}}


def _kafka_key(description: str) -> dict[str, Any]:
    return {"kafka": {"key": _text(description), "bindingVersion": "0.5.0"}}


def _channel(
    address: str | None,
    description: str,
    messages: list[str],
    setting: str | None,
    configs: dict[str, Any] | None = None,
    partitions: int | None = None,
) -> dict[str, Any]:
    channel: dict[str, Any] = {
        "address": address,
        "description": description,
        "messages": {m: _ref("messages", m) for m in messages},
    }
    binding: dict[str, Any] = {}
    if partitions is not None:
        binding["partitions"] = partitions
    if configs:
        binding["topicConfiguration"] = configs
    if binding:
        channel["bindings"] = {"kafka": {**binding, "bindingVersion": "0.5.0"}}
    if setting is not None:
        channel["x-seqkeeper-setting"] = setting
    return channel


def _operation(
    action: str,
    channel: str,
    messages: list[str],
    worker: str,
    summary: str,
    group: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "action": action,
        "channel": {"$ref": f"#/channels/{channel}"},
        "summary": summary,
        "messages": [{"$ref": f"#/channels/{channel}/messages/{m}"} for m in messages],
        "tags": [{"name": worker}],
    }
    if group is not None:
        op["bindings"] = {
            "kafka": {"groupId": {"type": "string", "enum": [group]}, "bindingVersion": "0.5.0"}
        }
    op.update(extra)
    return op


def build(settings: Settings | None = None) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of ``settings``' topics (default:
    :func:`default_settings`), as a dict ready for JSON."""
    from seqkeeper.runtime.repartition import group_of

    s = default_settings() if settings is None else settings
    ordered = s.with_overrides(topology="ordered")
    commands = s.with_overrides(topology="commands")
    o, c = ordered.ordered, commands.commands
    repartition = ordered.with_overrides(key_field="key").repartition_topic()
    ordered_changelog = f"{ordered.group_id}-state-changelog"
    commands_changelog = f"{commands.group_id}-commands-changelog"
    partitions = s.broker.partitions
    compacted = {
        "cleanup.policy": ["compact"],
        **{k: int(v) for k, v in o.changelog_topic_configs().items()},
    }
    schemas = schema_files()
    spring = ", ".join(f"`{h}`" for h in SPRING_BINARY)

    messages: dict[str, Any] = {
        "inputEvent": {
            "name": "inputEvent",
            "title": "Input event",
            "summary": "A message of a sequence: messageId, seq, type, data, metadata.",
            "description": (
                f"The value is read by `{_setting('codec')}` (JSON by default; the schema is the "
                "JSON form). Key, seq and messageId may come from fields or headers instead "
                f"(`{_setting('key_field')}`, `{_setting('seq_field')}`, "
                f"`{_setting('seq_header')}`, `{_setting('message_id_field')}`, "
                f"`{_setting('message_id_header')}`). Outputs carry the original bytes and "
                "headers."
            ),
            "contentType": "application/json",
            "headers": _headers(),
            "payload": _ref("schemas", "event"),
            "bindings": _kafka_key("The sequence key: non-empty UTF-8."),
        },
        "gapSkipped": {
            "name": "gapSkipped",
            "title": "GapSkipped marker",
            "summary": "In place of a sequence range the resequencer gave up.",
            "contentType": "application/json",
            "payload": _ref("schemas", "gapSkipped"),
            "bindings": _kafka_key("The sequence key."),
        },
        "processorOutput": {
            "name": "processorOutput",
            "title": "Ordered processor output",
            "summary": f"An output of the ordered processor (`{_setting('processor')}`).",
            "contentType": "application/json",
            "headers": _headers(),
            "payload": _ref("schemas", "processorOutput"),
            "bindings": _kafka_key("The input's sequence key, or the Output's key."),
        },
        "eventDeadLetter": {
            "name": "eventDeadLetter",
            "title": "Dead letter of the input",
            "summary": "The input record's key and value byte for byte, the reason in headers.",
            "description": (
                f"Headers: the record's own, then the dead-letter headers. {spring} are binary "
                "big-endian integers as Spring Kafka writes them (base64 in this document)."
            ),
            "contentType": "application/octet-stream",
            "headers": _ref("schemas", "eventDeadLetterHeaders"),
            "payload": {"description": "The input record's value, byte for byte (may be null)."},
            "bindings": _kafka_key("The input record's key, byte for byte (may be null)."),
        },
        "orderedState": {
            "name": "orderedState",
            "title": "Ordered worker state",
            "summary": "The ordered worker's state table (internal).",
            "description": (
                "Binary records of the state layout (state/codecs.py: key state, reorder "
                "buffer, seen ids, forgotten keys, processor state and outbox); a tombstone "
                "deletes. Read by a restoring worker, a standby and `seqkeeper compact`; "
                "written only by the worker."
            ),
            "contentType": "application/octet-stream",
            "payload": {"description": "state/codecs.py layout; null: a tombstone."},
        },
        "command": {
            "name": "command",
            "title": "Command Message",
            "summary": "A command for one entity (the partitionKey within its tenant).",
            "contentType": "application/json",
            "headers": _headers(
                tenant=_text("Set by a gateway: must equal tenantId."),
                authorization=_text(
                    f"`Bearer <JWT>` when {_setting('command_auth')}=jwt: claims tenant, "
                    "scope commands:<commandType> or commands:*, exp."
                ),
            ),
            "payload": _ref("schemas", "command"),
            "correlationId": {"location": "$message.payload#/correlationId"},
            "bindings": _kafka_key("partitionKey: the entity."),
        },
        "domainEvent": {
            "name": "domainEvent",
            "title": "Domain event",
            "summary": "An event a command handler emitted.",
            "contentType": "application/json",
            "headers": _headers(),
            "payload": _ref("schemas", "domainEvent"),
            "correlationId": {"location": "$message.payload#/correlationId"},
            "bindings": _kafka_key("The command's partitionKey."),
        },
        "reply": {
            "name": "reply",
            "title": "Command reply",
            "summary": "One per command with a replyTo; match it by causationId.",
            "contentType": "application/json",
            "headers": _headers(),
            "payload": _ref("schemas", "reply"),
            "correlationId": {"location": "$message.payload#/correlationId"},
            "bindings": _kafka_key("The command's partitionKey."),
        },
        "commandDeadLetter": {
            "name": "commandDeadLetter",
            "title": "Dead letter of the command topic",
            "summary": "The command record's key and value byte for byte, the reason in headers.",
            "description": (
                f"{spring} are binary big-endian integers as Spring Kafka writes them (base64 "
                "in this document). reply-undeliverable: the reply in place of its topic."
            ),
            "contentType": "application/octet-stream",
            "headers": _ref("schemas", "commandDeadLetterHeaders"),
            "payload": {"description": "The command's value byte for byte (may be null)."},
            "bindings": _kafka_key("The command record's key, byte for byte (may be null)."),
        },
        "commandState": {
            "name": "commandState",
            "title": "Command worker state",
            "summary": "The command worker's table (internal; `seqkeeper inspect` reads it).",
            "description": (
                "Binary records of state/command_records.py: entities with their outbox, "
                "receipts, retries, correlations; a tombstone deletes."
            ),
            "contentType": "application/octet-stream",
            "payload": {"description": "state/command_records.py layout; null: a tombstone."},
        },
    }

    channels = {
        "eventsIn": _channel(
            o.input_topic,
            "The ordered worker's input.",
            ["inputEvent"],
            _setting("input_topic"),
            partitions=partitions,
        ),
        "eventsRepartition": _channel(
            repartition,
            f"Internal, only with `{_setting('key_field')}`: the input keyed by its key field "
            "(the application id and input topic name it).",
            ["inputEvent"],
            None,
            partitions=partitions,
        ),
        "eventsOrdered": _channel(
            o.ordered_topic,
            "Every accepted message once, per key strictly in seq order; a range given up is "
            "a GapSkipped marker.",
            ["inputEvent", "gapSkipped"],
            _setting("ordered_topic"),
            partitions=partitions,
        ),
        "eventsDeduped": _channel(
            o.deduped_topic,
            "Every accepted message once, in arrival order.",
            ["inputEvent"],
            _setting("deduped_topic"),
            partitions=partitions,
        ),
        "eventsDlq": _channel(
            o.dlq_topic,
            "Dead letters of the input, and of the ordered processor (processor-failed).",
            ["eventDeadLetter"],
            _setting("dlq_topic"),
            partitions=partitions,
        ),
        "eventsLate": _channel(
            o.late_topic,
            f"Late arrivals, with `{_setting('late_policy')}=late-topic`.",
            ["eventDeadLetter"],
            _setting("late_topic"),
            partitions=partitions,
        ),
        "eventsProcessed": _channel(
            o.processed_topic,
            f"The ordered processor's outputs (with `{_setting('processor')}`).",
            ["processorOutput"],
            _setting("processed_topic"),
            partitions=partitions,
        ),
        "processorTopics": _channel(
            None,
            "The topics an ordered processor's `Output(topic=...)` names: one "
            f"`{_setting('processor_topics')}` allows ({', '.join(o.processor_topics) or 'none'}), "
            "never the worker's own; those named are created at start. The output envelope, or "
            "a value as the processor wrote it (`envelope=False`: a command, "
            "`seqkeeper.command_message`).",
            ["processorOutput", "command"],
            _setting("processor_topics"),
        ),
        "orderedChangelog": _channel(
            ordered_changelog,
            "Internal: the ordered worker's state (named by the application id).",
            ["orderedState"],
            None,
            compacted,
            partitions,
        ),
        "commandsIn": _channel(
            c.command_topic,
            "The command worker's input.",
            ["command"],
            _setting("command_topic"),
            partitions=partitions,
        ),
        "commandsEvents": _channel(
            c.events_topic,
            "Domain events of the command handlers.",
            ["domainEvent"],
            _setting("events_topic"),
            partitions=partitions,
        ),
        "commandsDlq": _channel(
            c.command_dlq_topic,
            "Dead letters of the command topic, and replies that could not be delivered.",
            ["commandDeadLetter"],
            _setting("command_dlq_topic"),
            partitions=partitions,
        ),
        "replies": _channel(
            None,
            "The topic a command's replyTo names: one that "
            f"`{_setting('reply_topics')}` allows ({', '.join(c.reply_topics)}), never the "
            "worker's own. Not created by seqkeeper.",
            ["reply"],
            _setting("reply_topics"),
        ),
        "commandsChangelog": _channel(
            commands_changelog,
            "Internal: the command worker's state, the Message Store of `seqkeeper inspect`.",
            ["commandState"],
            None,
            compacted,
            partitions,
        ),
    }

    ow, cw, rp, store = "ordered worker", "command worker", "repartitioner", "compact"
    ordered_outputs = [
        ("eventsOrdered", ["inputEvent", "gapSkipped"], "Send the ordered output."),
        ("eventsDeduped", ["inputEvent"], "Send the deduplicated output."),
        ("eventsDlq", ["eventDeadLetter"], "Dead-letter an input record."),
        ("eventsLate", ["eventDeadLetter"], "Send a late arrival."),
        ("eventsProcessed", ["processorOutput"], "Send the processor's outputs."),
        ("processorTopics", ["processorOutput", "command"], "Send outputs to the topics named."),
    ]
    operations: dict[str, Any] = {
        "receiveInput": _operation(
            "receive",
            "eventsIn",
            ["inputEvent"],
            ow,
            f"Read the input (without `{_setting('key_field')}`).",
            ordered.group_id,
        ),
        "repartitionInput": _operation(
            "receive",
            "eventsIn",
            ["inputEvent"],
            rp,
            f"Read the input (with `{_setting('key_field')}`).",
            group_of(ordered),
        ),
        "repartitionDeadLetter": _operation(
            "send", "eventsDlq", ["eventDeadLetter"], rp, "Dead-letter a record without its key."
        ),
        "sendRepartitioned": _operation(
            "send", "eventsRepartition", ["inputEvent"], rp, "Key the input by its key field."
        ),
        "receiveRepartitioned": _operation(
            "receive",
            "eventsRepartition",
            ["inputEvent"],
            ow,
            "Read the repartitioned input.",
            ordered.group_id,
        ),
        **{
            f"send{channel[0].upper()}{channel[1:]}": _operation(
                "send", channel, names, ow, summary
            )
            for channel, names, summary in ordered_outputs
        },
        "writeOrderedState": _operation(
            "send", "orderedChangelog", ["orderedState"], ow, "Write the state."
        ),
        "restoreOrderedState": _operation(
            "receive", "orderedChangelog", ["orderedState"], ow, "Restore the state, or follow it."
        ),
        "receiveCommand": _operation(
            "receive",
            "commandsIn",
            ["command"],
            cw,
            "Read a command; reply to its replyTo.",
            commands.group_id,
            reply={
                "address": {
                    "description": "The command's replyTo.",
                    "location": "$message.payload#/replyTo",
                },
                "channel": {"$ref": "#/channels/replies"},
                "messages": [{"$ref": "#/channels/replies/messages/reply"}],
            },
        ),
        "sendDomainEvent": _operation(
            "send", "commandsEvents", ["domainEvent"], cw, "Send a handler's events."
        ),
        "sendReply": _operation("send", "replies", ["reply"], cw, "Send a command's reply."),
        "deadLetterCommand": _operation(
            "send", "commandsDlq", ["commandDeadLetter"], cw, "Dead-letter a command."
        ),
        "writeCommandState": _operation(
            "send", "commandsChangelog", ["commandState"], cw, "Write the state."
        ),
        "restoreCommandState": _operation(
            "receive", "commandsChangelog", ["commandState"], cw, "Restore the state."
        ),
        **{
            f"store{name[0].upper()}{name[1:]}": _operation(
                "receive",
                name,
                list(channels[name]["messages"]),
                store,
                "Keep it in the Message Store (seqkeeper compact, no consumer group).",
            )
            for name in channels
            if name != "eventsRepartition"
        },
    }

    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "seqkeeper",
            "version": _version(),
            "description": (
                "Every Kafka topic seqkeeper's workers read and write, as their settings' "
                "defaults name them (`seqkeeper contracts` prints it for the settings in "
                "effect). Generated by seqkeeper.contracts from the JSON Schemas in schemas/ "
                "and the reason codes in the code. Header values are UTF-8 text, except "
                f"{spring} (binary, base64 here). Operations are tagged with the process "
                "that runs them."
            ),
            "license": {"name": "Apache-2.0"},
        },
        "defaultContentType": "application/json",
        "servers": {
            "kafka": {
                "host": "{bootstrap}",
                "protocol": "kafka",
                "description": f"The brokers of `{_setting('bootstrap')}`.",
                "variables": {
                    "bootstrap": {
                        "description": _setting("bootstrap"),
                        "examples": ["localhost:9092"],
                    }
                },
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": {component_name(n): _embedded(doc) for n, doc in schemas.items()},
            "messages": messages,
        },
    }


def _version() -> str:
    from importlib.metadata import version

    return version("seqkeeper")


def render(document: dict[str, Any], fmt: str = "json") -> str:
    """``document`` as JSON (2-space indent, keys in build order) or YAML
    (needs PyYAML: ``ModuleNotFoundError`` else)."""
    if fmt == "yaml":
        import importlib

        yaml: Any = importlib.import_module("yaml")  # (an optional dependency, untyped)
        # (through JSON: a dict used twice would be a YAML alias, which
        # some AsyncAPI tools refuse)
        plain = json.loads(json.dumps(document))
        return str(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, width=100))
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    """Write :data:`DOCUMENT` (``python -m seqkeeper.contracts``)."""
    DOCUMENT.write_text(render(build()))
    print(f"wrote {DOCUMENT}", file=sys.stderr)


if __name__ == "__main__":
    main()
