"""The topologies' state queries, served over HTTP by the worker that owns
the key (:mod:`seqkeeper.runtime.query_routing` routes them):

* ordered: ``GET /state/<key>``, a sequence key's state (:func:`key_state`);
* commands: ``GET /entities/<tenant>/<id>`` (:func:`entity`) and
  ``GET /commands/<messageId>?tenant=<tenant>`` (:func:`command`, the
  receipt with its entity; ``&key=<partitionKey>`` finds its partition at
  once, else every partition is searched).

Each function reads one partition's state, point reads only, and writes
nothing (a command receipt in the old layout is read where it is, not
moved, see :mod:`state.command_records`); ``None`` when the state does not hold
what was asked for. Reads see every step written so far: a query is served
between two processing steps, never in the middle of one.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Protocol

import orjson

from seqkeeper.processors.command import Entity, Receipt, entity_key, receipt_id
from seqkeeper.processors.deduplicator import UNKNOWN
from seqkeeper.runtime.protocol import BadQuery, Params, Query
from seqkeeper.state import codecs
from seqkeeper.state.command_records import CommandStore, decode_entity, find_receipt
from seqkeeper.state.command_records import entity_key as entity_store_key
from seqkeeper.state.stores import Stores


class OrderedState(Protocol):
    """What the ordered query reads of :class:`~seqkeeper.topologies.ordered.OrderedTopology`."""

    @property
    def stores(self) -> Stores: ...

    @property
    def stage(self) -> object | None:
        """The ordered processor's shell, when one is configured."""
        ...


class CommandState(Protocol):
    """What the command queries read of :class:`~seqkeeper.topologies.command_worker.CommandTopology`."""

    @property
    def store(self) -> CommandStore: ...


def key_state(topology: OrderedState, partition: int, key: str) -> dict[str, Any] | None:
    """A sequence key's state: the next sequence expected, how far the
    ordered output is confirmed, how many messages wait, the ranges given
    up, the seen ids remembered (the FIFO window), and, with an ordered
    processor, its cursor (the last sequence processed) and state."""
    stores = topology.stores
    found = stores.peek(partition, key)
    processed = None
    if topology.stage is not None:
        processed = stores.state.get(partition, codecs.processed_key(key))
    if found is None and processed is None:
        return None
    doc: dict[str, Any] = {"key": key, "partition": partition}
    if found is not None:
        state, window = found
        doc |= {
            "next_expected": state.next_expected,
            "confirmed": state.confirmed,
            "buffered": state.buffered,
            "gap_since": state.gap_since,
            "skipped": [[first, last] for first, last in state.skipped],
            "seen": {
                "count": window.size,
                "head": window.head,
                "tail": window.tail,
                "oldest": None if window.oldest == UNKNOWN else window.oldest,
            },
        }
    if topology.stage is not None:
        cursor, user_state = codecs.decode_processed(processed)
        doc["processor"] = {
            "cursor": cursor,
            "state": None if user_state is None else orjson.loads(user_state),
        }
    return doc


def entity(
    topology: CommandState, partition: int, tenant: str, partition_key: str
) -> dict[str, Any] | None:
    """A tenant's entity: version, state, and its outbox (the messages of
    commands not dispatched yet, by command messageId)."""
    scoped = entity_key(tenant, partition_key)
    raw = topology.store.store.get(partition, entity_store_key(scoped))
    if raw is None:
        return None
    return {
        "tenant": tenant,
        "id": partition_key,
        "partition": partition,
        **entity_doc(decode_entity(raw)),
    }


def command(
    topology: CommandState, partition: int, tenant: str, message_id: str
) -> dict[str, Any] | None:
    """A tenant's command by messageId: its receipt (status, attempts,
    error, reply, timestamps) and its entity, as ``seqkeeper inspect``
    shows them."""
    store = topology.store.store
    hit = find_receipt(lambda key: store.get(partition, key), receipt_id(tenant, message_id))
    if hit is None:
        return None
    receipt = hit[0]
    found = decode_entity(store.get(partition, entity_store_key(receipt.entity)))
    return {
        "command": receipt_doc(receipt),
        "entity": {"id": receipt.entity, **entity_doc(found)},
        "partition": partition,
    }


def receipt_doc(receipt: Receipt) -> dict[str, Any]:
    """A receipt as JSON (the command's and the reply's bytes as text)."""
    doc = asdict(receipt)
    doc["reply"] = None if receipt.reply is None else receipt.reply.value.decode("utf-8", "replace")
    doc["value"] = None if receipt.value is None else receipt.value.decode("utf-8", "replace")
    return doc


def entity_doc(e: Entity) -> dict[str, Any]:
    """An entity as JSON: version, state, outbox (messages as text)."""
    return {
        "version": e.version,
        "state": e.state,
        "outbox": {
            cid: [m.value.decode("utf-8", "replace") for m in msgs] for cid, msgs in e.outbox
        },
    }


# -- the routes ---------------------------------------------------------------


def _key(params: Params) -> bytes:
    return params["key"].encode("utf-8")


def _entity_id(params: Params) -> bytes:
    """An entity's partition is its partitionKey's (the commands' Kafka key)."""
    return params["id"].encode("utf-8")


def _command_key(params: Params) -> bytes | None:
    """A command's partition is its partitionKey's, when the query names it."""
    if not params.get("tenant"):
        raise BadQuery("tenant: required (commands are kept per tenant)")
    key = params.get("key")
    return None if key is None else key.encode("utf-8")


ORDERED = (
    Query(
        "/state/{key}",
        key=_key,
        read=lambda topology, partition, params: key_state(topology, partition, params["key"]),
    ),
)

COMMANDS = (
    Query(
        "/entities/{tenant}/{id}",
        key=_entity_id,
        read=lambda topology, partition, params: entity(
            topology, partition, params["tenant"], params["id"]
        ),
    ),
    Query(
        "/commands/{message_id}",
        key=_command_key,
        read=lambda topology, partition, params: command(
            topology, partition, params["tenant"], params["message_id"]
        ),
    ),
)
