"""Output messageIds are unique: a command's outputs are
scoped by its tenant, a processor's by its input key, since input
messageIds are unique only there; and they are deterministic, so an output
made again carries the same id."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.processors.command import Entity, Event, Registry, decide, parse_command
from seqkeeper.processors.envelope import output_id, unscoped
from seqkeeper.processors.processor import Message, results

#: what ids are made of: any text, separators and digits most of all
texts = st.text(alphabet=st.sampled_from(["a", "b", ":", "/", "1", "2", "é", "\x00"]), max_size=6)
suffixes = st.one_of(st.integers(1, 12).map(str), st.sampled_from(["reply", "dead-letter"]))


@given(texts, texts, suffixes, texts, texts, suffixes)
def test_distinct_inputs_give_distinct_ids(
    scope: str, mid: str, suffix: str, scope2: str, mid2: str, suffix2: str
) -> None:
    one, other = output_id(scope, mid, suffix), output_id(scope2, mid2, suffix2)
    assert (one == other) == ((scope, mid, suffix) == (scope2, mid2, suffix2))
    name, _, tail = one.rpartition(":")
    assert unscoped(name) == (scope, mid) and tail == suffix  # (it splits back)


def command_outputs(tenant: str, mid: str, events: int) -> list[str]:
    """The messageIds a command of ``tenant`` with ``mid`` dispatches, its
    handler emitting ``events`` events."""
    value = orjson.dumps(
        {
            "messageId": mid,
            "commandType": "Emit",
            "schemaVersion": 1,
            "correlationId": "c",
            "partitionKey": "k",
            "tenantId": tenant,
            "replyTo": "replies",
            "payload": events,
        }
    )
    emit = Registry()
    emit.register("Emit")(lambda state, c: (state, [Event("E") for _ in range(c.payload)]))
    d = decide(emit, Entity(), None, parse_command(b"k", value), 1.0)
    return [out.message_id for out in d.dispatch]


@given(
    st.lists(st.tuples(texts.filter(bool), texts.filter(bool)), min_size=1, max_size=6, unique=True)
)
def test_commands_of_distinct_tenant_and_message_id_never_share_an_output_id(
    commands: list[tuple[str, str]],
) -> None:
    ids = [i for tenant, mid in commands for i in command_outputs(tenant, mid, 3)]
    assert len(ids) == len(set(ids)) == 4 * len(commands)  # 3 events and a reply each
    # stable, and what the README's topic contracts say: <len(tenantId)>:<tenantId>/<commandId>:<n>
    tenant, mid = commands[0]
    expected = [f"{len(tenant)}:{tenant}/{mid}:{n}" for n in ("1", "2", "3", "reply")]
    assert command_outputs(tenant, mid, 3) == command_outputs(tenant, mid, 3) == expected


@given(
    st.lists(st.tuples(texts.filter(bool), texts.filter(bool)), min_size=1, max_size=6, unique=True)
)
def test_processor_outputs_of_distinct_key_and_message_id_never_share_an_id(
    inputs: list[tuple[str, str]],
) -> None:
    def ids(key: str, mid: str) -> list[str]:
        message = Message(key, 1, mid, "T", None, {}, ())
        _, records = results(message, (None, [1, 2, 3]))
        return [orjson.loads(value)["messageId"] for _, _, value, _ in records]

    made = [i for key, mid in inputs for i in ids(key, mid)]
    assert len(made) == len(set(made)) == 3 * len(inputs)
    # stable, and what the README's public API says: <len(key)>:<key>/<input messageId>:<n>
    key, mid = inputs[0]
    assert ids(key, mid) == ids(key, mid) == [f"{len(key)}:{key}/{mid}:{n}" for n in (1, 2, 3)]
