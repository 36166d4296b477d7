"""Which worker answers a state query (seqkeeper/runtime/query_routing.py): the
owner of the key's partition answers, the others redirect to it, nobody
answers while nobody owns it; a query without a key is searched for, one
hop per worker. Who may ask (:func:`admit`): nobody when queries are off,
only the bearer of the token when one is set."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from hypothesis import given
from hypothesis import strategies as st

from seqkeeper.adapter.routing import key_partition
from seqkeeper.runtime.protocol import BadQuery, Params, Query
from seqkeeper.runtime.query_routing import RETRY_AFTER, Access, Placement, admit, answer

A, B = "http://127.0.0.1:6001", "http://127.0.0.1:6002"
PARTITIONS = 4
#: the state of each worker: partition -> key -> value
STATE = {0: {"k0": 0}, 1: {"k1": 1}, 2: {"k2": 2}, 3: {"k3": 3}}


def read(topology: Any, partition: int, params: Params) -> dict[str, Any] | None:
    value = topology[partition].get(params["key"])
    return None if value is None else {"value": value, "partition": partition}


def need_tenant(params: Params) -> bytes | None:
    if "tenant" not in params:
        raise BadQuery("tenant: required")
    return None


BY_KEY = Query("/state/{key}", key=lambda p: p["key"].encode(), read=read)
SEARCHED = Query("/find/{key}", key=need_tenant, read=read)


def placement(me: str, ready: set[int] | None = None, owners: dict[int, str] | None = None):
    owners = {0: A, 1: B, 2: A, 3: B} if owners is None else owners
    mine = {p for p, o in owners.items() if o == me}
    return Placement(me, owners, mine if ready is None else ready, PARTITIONS)


def key_on(partition: int) -> str:
    """A key the default partitioner puts on ``partition``."""
    return next(k for i in range(1000) if key_partition((k := f"key{i}").encode(), 4) == partition)


def test_the_default_partitioner_is_murmur2() -> None:
    # Kafka's own cases (UtilsTest.testMurmur2), as signed 32-bit hashes
    cases = {b"21": -973932308, b"foobar": -790332482, b"abc": 479470107}
    for key, hashed in cases.items():
        assert key_partition(key, 1000) == (hashed & 0x7FFFFFFF) % 1000


def test_the_owner_answers_and_the_others_redirect_to_it() -> None:
    for partition in range(PARTITIONS):
        key = key_on(partition)
        state = {p: {key: p} for p in range(PARTITIONS)}
        owner, other = (A, B) if partition in (0, 2) else (B, A)
        got = answer(BY_KEY, state, {"key": key}, f"/state/{key}?x=1", placement(owner))
        assert (got.status, got.body) == (200, {"value": partition, "partition": partition})
        moved = answer(BY_KEY, state, {"key": key}, f"/state/{key}?x=1", placement(other))
        assert moved.status == 307
        assert moved.headers["Location"] == f"{owner}/state/{key}?x=1"
        assert moved.body["owner"] == owner and moved.body["partition"] == partition


def test_a_missing_key_is_a_404_of_its_owner_only() -> None:
    key = key_on(1)
    assert answer(BY_KEY, STATE, {"key": key}, "/", placement(B)).status == 404
    assert answer(BY_KEY, STATE, {"key": key}, "/", placement(A)).status == 307


def test_nobody_answers_during_a_rebalance_or_a_restore() -> None:
    key = key_on(0)
    for where in (placement(A, owners={}), placement(A, ready=set())):
        got = answer(BY_KEY, STATE, {"key": key}, "/", where)
        assert got.status == 503 and got.headers["Retry-After"] == str(RETRY_AFTER)
        assert got.body["partition"] == 0


def test_a_search_is_one_hop_per_worker_and_ends_in_a_404() -> None:
    def ask(me: str, key: str, target: str) -> Any:
        params = dict(parse_qsl(target.partition("?")[2]))
        return answer(SEARCHED, STATE, {**params, "key": key}, target, placement(me))

    found = ask(A, "k2", "/find/k2?tenant=t")
    assert found.status == 200 and found.body["partition"] == 2
    hop = ask(A, "k3", "/find/k3?tenant=t")  # A searched 0 and 2: on to 1's owner
    assert hop.status == 307
    assert hop.headers["Location"] == f"{B}/find/k3?tenant=t&searched=0%2C2"
    assert ask(B, "k3", "/find/k3?tenant=t&searched=0%2C2").status == 200
    missing = ask(B, "nope", "/find/nope?tenant=t&searched=0%2C2")
    assert missing.status == 404 and missing.body["searched"] == [0, 1, 2, 3]
    # B first: B's partitions, then A's
    hop = ask(B, "nope", "/find/nope?tenant=t")
    assert hop.headers["Location"] == f"{A}/find/nope?tenant=t&searched=1%2C3"


def test_bad_parameters_are_a_400() -> None:
    assert answer(SEARCHED, STATE, {"key": "k"}, "/", placement(A)).status == 400
    got = answer(SEARCHED, STATE, {"key": "k", "tenant": "t", "searched": "x"}, "/", placement(A))
    assert got.status == 400 and "searched" in got.body["error"]


TOKEN = "s3cr3t-t0ken-0123456789"
GUARDED = Access(token=TOKEN)


def test_without_a_token_anyone_is_admitted_and_off_is_a_404() -> None:
    for header in (None, "", "Bearer x", "Basic dXNlcjpwdw=="):
        assert admit(Access(), header) is None
        for access in (Access(served=False), Access(served=False, token=TOKEN)):
            refused = admit(access, header)
            assert refused is not None and refused.status == 404
    assert admit(Access(served=False, token=TOKEN), f"Bearer {TOKEN}") is not None


def test_with_a_token_only_its_bearer_is_admitted() -> None:
    assert admit(GUARDED, f"Bearer {TOKEN}") is None
    assert admit(GUARDED, f"bearer  {TOKEN} ") is None  # (the scheme is case-insensitive)
    cases = {
        None: ('Bearer realm="seqkeeper"', "missing an Authorization header"),
        "  ": ('Bearer realm="seqkeeper"', "missing an Authorization header"),
        "Bearer": ('Bearer realm="seqkeeper", error="invalid_request"', "expected an"),
        TOKEN: ('Bearer realm="seqkeeper", error="invalid_request"', "expected an"),
        f"Basic {TOKEN}": ('Bearer realm="seqkeeper", error="invalid_request"', "expected an"),
        f"Bearer {TOKEN}x": ('Bearer realm="seqkeeper", error="invalid_token"', "not this"),
        f"Bearer {TOKEN[:-1]}": ('Bearer realm="seqkeeper", error="invalid_token"', "not this"),
        f"Bearer {TOKEN.upper()}": ('Bearer realm="seqkeeper", error="invalid_token"', "not"),
        f"Bearer {TOKEN[:-1]}\u00e9": ('Bearer realm="seqkeeper", error="invalid_token"', "not"),
    }
    for header, (challenge, why) in cases.items():
        refused = admit(GUARDED, header)
        assert refused is not None, header
        assert refused.status == 401 and refused.headers == {"WWW-Authenticate": challenge}
        assert refused.body["error"].startswith("unauthorized: "), refused.body
        assert why in refused.body["error"], refused.body
        assert TOKEN[:8] not in str(refused), "a refusal quotes the token"
    assert TOKEN not in repr(GUARDED)


tokens = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=16, max_size=40)


@given(token=tokens, header=st.one_of(st.none(), st.text(max_size=60)), scheme=st.booleans())
def test_no_request_without_the_exact_token_is_admitted(
    token: str, header: str | None, scheme: bool
) -> None:
    if scheme and header is not None:
        header = f"Bearer {header}"
    refused = admit(Access(token=token), header)
    credentials = (header or "").strip().partition(" ")[2].strip()
    if refused is None:
        assert credentials == token and header is not None
        assert header.strip().partition(" ")[0].lower() == "bearer"
    else:
        assert refused.status == 401 and "WWW-Authenticate" in refused.headers
        # (no run of 16 characters without a space in the bodies' own words)
        assert token not in str(refused.body)


@given(token=tokens)
def test_the_exact_token_is_always_admitted(token: str) -> None:
    assert admit(Access(token=token), f"Bearer {token}") is None
    assert admit(Access(token=token), f"Bearer {token[1:]}") is not None
