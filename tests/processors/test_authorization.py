"""The authorization decision (processors.authorization): verified claims
against a command and the wall clock. Valid claims pass; breaking any one
rule (tenant, scope, exp, nbf, iat, issuer, audience, the bound value) refuses, with a
detail that names the rule; the decision agrees with an independent
statement of the rules on arbitrary claims."""

from __future__ import annotations

import base64
import hashlib
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.processors.authorization import (
    TokenPolicy,
    Unauthorized,
    authorize,
    bearer,
    scope_allows,
    value_digest,
)

names = st.text(st.characters(codec="utf-8", exclude_characters=" \t\n\r\x0b\x0c"), min_size=1)
nows = st.floats(1e9, 4e9)
leeways = st.sampled_from([0.0, 1.0, 30.0, 120.0])
policies = st.builds(
    TokenPolicy,
    leeways,
    st.none() | st.sampled_from(["https://issuer.example", "iss-2"]),
    st.none() | st.sampled_from(["seqkeeper", "aud-2"]),
)


Case = tuple[dict[str, Any], str, str, float, TokenPolicy, bytes]


@st.composite
def valid_claims(draw: st.DrawFn) -> Case:
    """Claims that allow a command (tenant, commandType, record value) at
    ``now`` under a policy."""
    tenant, command_type, now, policy = draw(names), draw(names), draw(nows), draw(policies)
    value = draw(st.binary(max_size=64))
    grant = draw(st.sampled_from([f"commands:{command_type}", "commands:*"]))
    others = draw(st.lists(st.sampled_from(["read", "commands:Other", "openid"]), max_size=3))
    scope = " ".join(draw(st.permutations([grant, *others])))
    claims: dict[str, Any] = {
        "tenant": tenant,
        "scope": scope,
        # after now - leeway, up to a day ahead
        "exp": now - policy.leeway + draw(st.floats(0.5, 86400)),
    }
    if draw(st.booleans()):
        claims["nbf"] = now + policy.leeway - draw(st.floats(0, 3600))
    if draw(st.booleans()):
        claims["iat"] = now + policy.leeway - draw(st.floats(0, 3600))
    if policy.issuer is not None:
        claims["iss"] = policy.issuer
    if policy.audience is not None:
        claims["aud"] = draw(st.sampled_from([policy.audience, [policy.audience, "other"]]))
    if draw(st.booleans()):
        claims["value_sha256"] = value_digest(value)
    return claims, tenant, command_type, now, policy, value


@settings(max_examples=300)
@given(valid_claims())
def test_valid_claims_are_allowed(case: Case) -> None:
    claims, tenant, command_type, now, policy, value = case
    authorize(claims, tenant, command_type, now, policy, value)  # no exception


#: Each way to break one rule of valid claims, and a word its detail names.
BREAKS = [
    "wrong-tenant",
    "no-tenant",
    "missing-scope",
    "other-type-scope",
    "scope-not-a-string",
    "prefix-scope",
    "expired",
    "no-exp",
    "exp-not-a-number",
    "not-yet-valid",
    "issued-in-future",
    "wrong-issuer",
    "wrong-audience",
    "unexpected-audience",
    "missing-audience",
    "other-value",
]


def broken(
    how: str, claims: dict[str, Any], command_type: str, now: float, policy: TokenPolicy, d: Any
) -> tuple[dict[str, Any], TokenPolicy, str]:
    c = dict(claims)
    if how == "wrong-tenant":
        c["tenant"] = c["tenant"] + d(names)
        return c, policy, "tenant"
    if how == "no-tenant":
        del c["tenant"]
        return c, policy, "tenant"
    if how == "missing-scope":
        del c["scope"]
        return c, policy, "scope"
    if how == "other-type-scope":
        c["scope"] = f"commands:{command_type}x read commands:"
        return c, policy, "scope"
    if how == "scope-not-a-string":
        c["scope"] = [f"commands:{command_type}", "commands:*"]
        return c, policy, "scope"
    if how == "prefix-scope":  # a scope is a whole word, not a prefix
        c["scope"] = f"xcommands:{command_type} commands:*x"
        return c, policy, "scope"
    if how == "expired":
        c["exp"] = now - policy.leeway - d(st.floats(0, 1e6))
        return c, policy, "expired"
    if how == "no-exp":
        del c["exp"]
        return c, policy, "exp"
    if how == "exp-not-a-number":
        c["exp"] = d(st.sampled_from([str(int(c["exp"])), None, True, math.inf, math.nan]))
        return c, policy, "exp"
    if how == "not-yet-valid":
        c["nbf"] = now + policy.leeway + d(st.floats(1, 1e6))
        return c, policy, "not valid before"
    if how == "issued-in-future":
        c["iat"] = now + policy.leeway + d(st.floats(1, 1e6))
        return c, policy, "future"
    if how == "wrong-issuer":
        c["iss"] = d(st.sampled_from([None, "https://evil.example", 7]))
        return c, TokenPolicy(policy.leeway, "https://issuer.example", policy.audience), "iss"
    if how == "wrong-audience":
        c["aud"] = d(st.sampled_from(["evil", ["evil", "other"], 3, [3]]))
        return c, TokenPolicy(policy.leeway, policy.issuer, "seqkeeper"), "aud"
    if how == "unexpected-audience":
        c["aud"] = "seqkeeper"
        return c, TokenPolicy(policy.leeway, policy.issuer, None), "audience"
    if how == "missing-audience":
        c.pop("aud", None)
        return c, TokenPolicy(policy.leeway, policy.issuer, "seqkeeper"), "aud"
    assert how == "other-value"  # a token signed for another command's bytes
    c["value_sha256"] = value_digest(d(st.binary(min_size=65, max_size=80)))
    return c, policy, "signed for another command"


@settings(max_examples=600)
@given(valid_claims(), st.sampled_from(BREAKS), st.data())
def test_breaking_any_one_rule_refuses(case: Case, how: str, data: st.DataObject) -> None:
    claims, tenant, command_type, now, policy, value = case
    bad, policy, word = broken(how, claims, command_type, now, policy, data.draw)
    with pytest.raises(Unauthorized) as refused:
        authorize(bad, tenant, command_type, now, policy, value)
    assert word in refused.value.detail, (how, refused.value.detail)


def expected(
    claims: dict[str, Any], tenant: str, command_type: str, now: float, p: TokenPolicy, value: bytes
) -> bool:
    """The rules stated again, independently of the implementation."""

    def number(v: Any) -> bool:
        return type(v) in (int, float) and math.isfinite(v)

    if not number(claims.get("exp")) or not now < claims["exp"] + p.leeway:
        return False
    for late in ("nbf", "iat"):
        if late in claims and (not number(claims[late]) or claims[late] > now + p.leeway):
            return False
    if p.issuer is not None and claims.get("iss") != p.issuer:
        return False
    aud = claims.get("aud")
    if "aud" in claims or p.audience is not None:
        auds = [aud] if isinstance(aud, str) else aud
        if p.audience is None or not isinstance(auds, list) or p.audience not in auds:
            return False
        if not all(isinstance(a, str) for a in auds):
            return False
    if "value_sha256" in claims:
        digest = base64.urlsafe_b64encode(hashlib.sha256(value).digest()).decode().rstrip("=")
        if claims["value_sha256"] != digest:
            return False
    scope = claims.get("scope")
    words = scope.split(" ") if isinstance(scope, str) else []
    return claims.get("tenant") == tenant and (
        "commands:*" in words or f"commands:{command_type}" in words
    )


claim_values = st.none() | st.booleans() | st.integers(-5, 5) | st.floats() | names
times = st.floats(0.9e9, 4.1e9) | claim_values


@settings(max_examples=1000)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "tenant": st.sampled_from(["A", "B"]) | claim_values,
            "scope": st.sampled_from(["commands:T", "commands:*", "commands:U read", ""])
            | claim_values,
            "exp": times,
            "nbf": times,
            "iat": times,
            "iss": st.sampled_from(["https://issuer.example", "x"]) | claim_values,
            "aud": st.sampled_from(["seqkeeper", ["seqkeeper", "x"], ["x"], [1]]) | claim_values,
            "value_sha256": st.sampled_from([value_digest(b"v1"), value_digest(b"v2")])
            | claim_values,
        },
    ),
    st.sampled_from([b"v1", b"v2"]),
    st.sampled_from(["A", "B"]),
    st.sampled_from(["T", "U"]),
    st.floats(1e9, 4e9),
    policies,
)
def test_the_decision_agrees_with_the_rules(
    claims: dict[str, Any],
    value: bytes,
    tenant: str,
    command_type: str,
    now: float,
    policy: TokenPolicy,
) -> None:
    try:
        authorize(claims, tenant, command_type, now, policy, value)
        allowed = True
    except Unauthorized:
        allowed = False
    assert allowed == expected(claims, tenant, command_type, now, policy, value)


def test_the_boundaries_of_exp_nbf_and_iat() -> None:
    base = {"tenant": "A", "scope": "commands:T"}
    policy = TokenPolicy(leeway=10)
    authorize({**base, "exp": 100}, "A", "T", 109.9, policy)
    with pytest.raises(Unauthorized):
        authorize({**base, "exp": 100}, "A", "T", 110, policy)
    authorize({**base, "exp": 1000, "nbf": 110}, "A", "T", 100, policy)
    with pytest.raises(Unauthorized):
        authorize({**base, "exp": 1000, "nbf": 110.5}, "A", "T", 100, policy)
    with pytest.raises(Unauthorized):
        authorize({**base, "exp": 1000, "iat": 110.5}, "A", "T", 100, policy)


def test_scopes_are_whole_words() -> None:
    assert scope_allows(frozenset({"commands:AddStock"}), "AddStock")
    assert scope_allows(frozenset({"commands:*"}), "Anything")
    assert not scope_allows(frozenset({"commands:addstock"}), "AddStock")  # case-sensitive
    assert not scope_allows(frozenset({"commands:Add"}), "AddStock")
    assert not scope_allows(frozenset(), "AddStock")


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ([], "no authorization header"),
        ([("tenant", b"A")], "no authorization header"),
        (
            [("authorization", b"Bearer a.b.c"), ("Authorization", b"Bearer a.b.c")],
            "2 authorization",
        ),
        ([("authorization", b"Basic dXNlcjpwYXNz")], "not 'Bearer <JWT>'"),
        ([("authorization", b"Bearer ")], "not 'Bearer <JWT>'"),
        ([("authorization", None)], "empty"),
        ([("authorization", "Bearer é".encode())], "not ASCII"),
        ([("authorization", b"Bearer " + b"a" * 9000)], "over 8192"),
    ],
)
def test_a_missing_or_malformed_header_is_refused(headers: Any, why: str) -> None:
    with pytest.raises(Unauthorized) as refused:
        bearer(headers)
    assert why in refused.value.detail


def test_the_bearer_token_is_read_in_any_case() -> None:
    assert bearer([("Authorization", b"bearer a.b.c")]) == "a.b.c"
    assert bearer([("x", b"y"), ("authorization", b"Bearer  a.b.c ")]) == "a.b.c"
