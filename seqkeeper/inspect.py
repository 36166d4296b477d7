"""``seqkeeper inspect``: look commands up in the Message Store (the command
worker's changelog topic, compacted here: latest value per key, tombstones
delete), by messageId or correlationId (of every tenant, or of one), with
their entity's state and outbox. Receipts of both layouts of
:mod:`state.command_records` are found; a receipt id's receipt in the new layout
hides an old copy of it.

A command named by messageId and tenant is asked of a running command
worker first (:func:`ask_worker`, its state query ``GET /commands/...``):
its answer is current and costs a point read per partition, where reading
the changelog costs the whole topic. It sends the bearer token of the
settings (``SEQKEEPER_HTTP_TOKEN`` or its file) when one is set, on every
hop of a redirect too.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlencode

from seqkeeper.processors.command import receipt_id, unscoped
from seqkeeper.settings import VARS, Settings
from seqkeeper.state.command_records import (
    CORRELATION,
    RECEIPT,
    decode_entity,
    decode_receipt,
    entity_key,
    find_receipt,
    old_correlation_prefix,
    old_receipt_key,
)
from seqkeeper.topics import read_topic
from seqkeeper.topologies.state_queries import entity_doc, receipt_doc


def changelog_topic(settings: Settings) -> str:
    return f"{settings.with_overrides(topology='commands').group_id}-commands-changelog"


async def load(settings: Settings) -> dict[bytes, bytes]:
    """The command table as of now: the changelog compacted in memory, read
    as ``SEQKEEPER_ISOLATION`` says (read_committed: a write of an aborted
    transaction, such as a worker killed mid-transaction left, is not the
    command's state)."""
    table: dict[bytes, bytes] = {}
    for rec in sorted(
        await read_topic(
            settings.broker.bootstrap,
            changelog_topic(settings),
            isolation=settings.broker.isolation,
        ),
        key=lambda r: (r.partition, r.offset),
    ):
        if rec.key is None:
            continue
        if rec.value is None:
            table.pop(rec.key, None)
        else:
            table[rec.key] = rec.value
    return table


def _scoped(table: dict[bytes, bytes], family: bytes) -> Iterator[tuple[str, str, str]]:
    """The keys of a tenant-scoped ``family``: (tenant, name, what follows a
    NUL), e.g. (tenant, correlationId, messageId) for the correlation index."""
    for key in table:
        if key[:1] == family:
            head, _, tail = key[1:].partition(b"\x00")
            try:
                tenant, name = unscoped(head.decode("utf-8"))
            except ValueError:
                continue  # not a seqkeeper key
            yield tenant, name, tail.decode("utf-8")


def lookup(
    table: dict[bytes, bytes],
    message_id: str | None = None,
    correlation_id: str | None = None,
    tenant: str | None = None,
) -> list[dict[str, Any]]:
    """Each matching command (of ``tenant``, or of every tenant): its
    receipt and its entity (state, outbox)."""
    rids: list[str] = []
    if message_id:
        if tenant is not None:
            rids.append(receipt_id(tenant, message_id))
        else:
            mine = [receipt_id(t, m) for t, m, _ in _scoped(table, RECEIPT) if m == message_id]
            old = decode_receipt(table.get(old_receipt_key(message_id)))
            if old is not None:
                mine.append(old.receipt_id)
            rids += sorted(mine)
    if correlation_id:
        related = [
            receipt_id(t, mid)
            for t, c, mid in _scoped(table, CORRELATION)
            if c == correlation_id and tenant in (None, t)
        ]
        prefix = old_correlation_prefix(correlation_id)
        for key in table:
            if key.startswith(prefix):
                old = decode_receipt(table.get(old_receipt_key(key[len(prefix) :].decode())))
                if old is not None and tenant in (None, old.tenant):
                    related.append(old.receipt_id)
        rids += sorted(related)
    found = []
    for rid in dict.fromkeys(rids):  # a receipt in both layouts: the new one
        hit = find_receipt(table.get, rid)
        if hit is None:
            continue
        receipt = hit[0]
        entity = decode_entity(table.get(entity_key(receipt.entity)))
        found.append(
            {
                "command": receipt_doc(receipt),
                "entity": {"id": receipt.entity, **entity_doc(entity)},
            }
        )
    return found


def worker_url(settings: Settings) -> str | None:
    """Where the command worker's web server is, if the settings say (a web
    port of 0 is picked at start: not known here)."""
    port = settings.runtime.web_port
    if not port:
        return None
    host = settings.runtime.web_host
    if host in ("", "0.0.0.0", "::"):  # a bind address: the worker is local
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def ask_worker(
    settings: Settings,
    message_id: str,
    tenant: str,
    timeout: float = 5.0,
    say: Callable[[str], None] = lambda line: None,
) -> list[dict[str, Any]] | None:
    """A tenant's command as the command worker owning it answers (its
    receipt and entity; redirects to the owner followed): ``[]`` when no
    partition holds it; ``None`` when no command worker answers for all
    partitions at the settings' web address (none runs, another topology's,
    a rebalance, a refusal: ``say`` is told why), so the caller reads the
    changelog. A token that cannot be read is a ``SettingError``."""
    base = worker_url(settings)
    if base is None:
        return None
    url = f"{base}/commands/{quote(message_id, safe='')}?{urlencode({'tenant': tenant})}"
    request = urllib.request.Request(url)
    token = settings.runtime.query_token()
    if token is not None:
        # (add_header, not add_unredirected_header: urllib sends it again to
        # the owner a 307 names, a worker of the same group)
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return [json.loads(response.read())]
    except urllib.error.HTTPError as error:
        if error.code == 401:
            say(
                f"the worker at {base} refused the state query (401: "
                f"{_json_of(error).get('error', 'unauthorized')}); set "
                f"{VARS['http_token'].env} or {VARS['http_token_file'].env} to the workers' token"
            )
            return None
        # a search's 404 says which partitions it searched: all of them
        searched = error.code == 404 and "searched" in _json_of(error)
        return [] if searched else None
    except (OSError, ValueError):  # not listening, timed out, not JSON
        return None


def _json_of(error: urllib.error.HTTPError) -> dict[str, Any]:
    """An error response's JSON body (empty when it has none)."""
    if error.headers.get_content_type() != "application/json":
        return {}
    try:
        body = json.loads(error.read())
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}
