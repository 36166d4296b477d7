"""State queries over HTTP: which worker answers, as in Kafka Streams'
interactive queries. A topology names its queries (:class:`Query` in
its :class:`~seqkeeper.runtime.protocol.Wiring`); :mod:`.wiring` serves them
with :func:`answer`, which decides from a :class:`Placement` (no Faust call
here):

* the key's input partition is this worker's and its state is restored:
  the answer (200), or 404 when the state does not hold it;
* it is another worker's: 307 to the same path there, with a JSON body
  naming the owner (a client that follows redirects gets the answer);
* nobody owns it (a rebalance), or its state is still being restored here:
  503 with ``Retry-After``.

A query whose parameters name no key (a command's receipt by messageId:
the partition is its partitionKey's) is searched for: a point read in each
partition this worker owns, then a redirect to the owner of the first
partition not searched yet, the partitions searched so far in the
``searched`` parameter; so a chain of at most one hop per worker ends in the
answer, or in a 404 once every partition was searched.

Who may ask is decided first, by :func:`admit` from the worker's
:class:`Access` and the request's ``Authorization`` header: state queries
expose message data, so they can be turned off, or require a bearer token.
"""

from __future__ import annotations

import hmac
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from seqkeeper.adapter.routing import key_partition
from seqkeeper.runtime.protocol import BadQuery, Params, Query

#: What a 503 asks the client to wait, in seconds: a rebalance or a
#: partition's restore is usually over by then, and a client polls again.
RETRY_AFTER = 1
#: The parameter a search carries from worker to worker.
SEARCHED = "searched"


@dataclass(frozen=True)
class Placement:
    """The input's partitions as this worker knows them at a request."""

    #: this worker's web URL
    me: str
    #: each partition's owner (its web URL), from the group's assignment;
    #: empty during a rebalance (the assignment is about to change)
    owners: Mapping[int, str]
    #: this worker's partitions whose state is restored and current
    ready: Collection[int]
    #: the input topic's partition count
    partitions: int


@dataclass(frozen=True)
class Answer:
    """An HTTP response: status, JSON body, headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Access:
    """Who may ask this worker's state queries: nobody (``served`` false),
    anyone (``token`` ``None``), or only a request carrying exactly
    ``token`` as its bearer token (RFC 6750)."""

    served: bool = True
    #: printable ASCII without spaces (seqkeeper.settings.bearer_token)
    token: str | None = None

    def __repr__(self) -> str:  # (a token is never printed)
        return f"Access(served={self.served}, token={'***' if self.token else None})"


#: The realm a 401 names in its ``WWW-Authenticate`` challenge.
REALM = "seqkeeper"
#: What a request must carry when a token is set (the token itself is
#: never named in an answer).
EXPECTED = "an Authorization header: Bearer <token>"


def admit(access: Access, authorization: str | None) -> Answer | None:
    """``None`` when a request whose ``Authorization`` header is
    ``authorization`` (``None``: none) may be answered; else the refusal:
    404 when state queries are off, 401 with a ``WWW-Authenticate: Bearer``
    challenge when a token is set and the header does not carry exactly it.

    Invariants (tests/runtime/test_queries.py): with a token, no request is
    admitted unless its credentials equal the token; no refusal quotes the
    header or the token."""
    if not access.served:
        return Answer(404, {"error": "not found: state queries are off on this worker"})
    if access.token is None:
        return None
    if authorization is None or not authorization.strip():
        return _unauthorized(f"missing {EXPECTED}", error=None)
    scheme, _, credentials = authorization.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() != "bearer" or not credentials:
        return _unauthorized(f"expected {EXPECTED}", error="invalid_request")
    # The token is ASCII: anything else cannot be it (and compare_digest
    # takes ASCII strings only). compare_digest's time does not depend on
    # where the first difference is.
    if not (credentials.isascii() and hmac.compare_digest(credentials, access.token)):
        return _unauthorized("the bearer token is not this worker's", error="invalid_token")
    return None


def _unauthorized(why: str, error: str | None) -> Answer:
    challenge = f'Bearer realm="{REALM}"' + (f', error="{error}"' if error else "")
    return Answer(401, {"error": f"unauthorized: {why}"}, {"WWW-Authenticate": challenge})


def answer(
    query: Query, topology: Any, params: Params, target: str, placement: Placement
) -> Answer:
    """The response to ``GET target`` (its path and query string, as
    requested) for ``query`` with ``params``."""
    try:
        key = query.key(params)
        searched = _searched(params, placement.partitions)
    except BadQuery as exc:
        return Answer(400, {"error": str(exc)})
    if key is None:
        return _search(query, topology, params, target, placement, searched)
    partition = key_partition(key, placement.partitions)
    owner = placement.owners.get(partition)
    if owner is None:
        return _unavailable(partition, "nobody owns it (the group is rebalancing)")
    if owner != placement.me:
        return _redirect(owner, target, partition)
    if partition not in placement.ready:
        return _unavailable(partition, "its state is being restored")
    return _found(query.read(topology, partition, params), partition)


def _search(
    query: Query,
    topology: Any,
    params: Params,
    target: str,
    placement: Placement,
    searched: set[int],
) -> Answer:
    mine = sorted(
        p for p, owner in placement.owners.items() if owner == placement.me and p not in searched
    )
    for partition in mine:
        if partition not in placement.ready:
            return _unavailable(partition, "its state is being restored")
    for partition in mine:
        found = query.read(topology, partition, params)
        if found is not None:
            return Answer(200, found)
    searched.update(mine)
    rest = [p for p in range(placement.partitions) if p not in searched]
    if not rest:
        return Answer(404, {"error": "not found", "searched": sorted(searched)})
    owner = placement.owners.get(rest[0])
    if owner is None or owner == placement.me:  # (mine were searched: a stale map)
        return _unavailable(rest[0], "nobody owns it (the group is rebalancing)")
    return _redirect(owner, _with_searched(target, searched), rest[0])


def _searched(params: Params, partitions: int) -> set[int]:
    """The partitions a search searched already (its ``searched`` parameter)."""
    text = params.get(SEARCHED, "")
    try:
        found = {int(p) for p in text.split(",") if p}
    except ValueError:
        raise BadQuery(f"{SEARCHED}: expected partition numbers, comma-separated") from None
    return {p for p in found if 0 <= p < partitions}


def _with_searched(target: str, searched: set[int]) -> str:
    """``target`` with its ``searched`` parameter set to ``searched``."""
    parts = urlsplit(target)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != SEARCHED]
    query.append((SEARCHED, ",".join(map(str, sorted(searched)))))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _found(doc: dict[str, Any] | None, partition: int) -> Answer:
    if doc is None:
        return Answer(404, {"error": "not found", "partition": partition})
    return Answer(200, doc)


def _redirect(owner: str, target: str, partition: int) -> Answer:
    location = owner.rstrip("/") + target
    return Answer(
        307,
        {"owner": owner, "partition": partition, "location": location},
        {"Location": location},
    )


def _unavailable(partition: int, why: str) -> Answer:
    return Answer(
        503,
        {"error": f"partition {partition}: {why}", "partition": partition},
        {"Retry-After": str(RETRY_AFTER)},
    )
