"""Command authorization: whether a command's verified token lets it act.

With ``SEQKEEPER_COMMAND_AUTH=jwt`` each command record carries a signed
token, a JWT in its ``authorization`` header (``Bearer <token>``). The
shell reads the header (:func:`bearer`), checks the signature against the
configured public keys (:mod:`seqkeeper.state.tokens`) and hands the
token's claims to :func:`authorize`, which decides, with the wall clock as
an argument, whether those claims allow this command:

* ``exp`` is required and must be after ``now``; ``nbf`` and ``iat``, when
  present, must not be after it (each with the policy's leeway for clock
  skew);
* ``iss`` must equal the policy's issuer, when it names one; ``aud`` (a
  string or a list) must name the policy's audience, when it names one,
  and a token naming an audience is refused when the policy names none
  (RFC 7519 4.1.3);
* the tenant claim (:data:`TENANT_CLAIM`) must equal the command's
  ``tenantId``;
* the ``scope`` claim, OAuth-style space-separated scopes, must allow the
  ``commandType``: ``commands:<commandType>`` allows that type (exactly,
  case-sensitively), ``commands:*`` every type;
* the ``value_sha256`` claim (:data:`VALUE_DIGEST_CLAIM`), when the token
  has one, must be the digest of the command record's value
  (:func:`value_digest`): such a token is bound to that one command, and
  whoever reads it off the topic cannot send another command under it.

A refusal raises :class:`Unauthorized`; its detail says why and never holds
the token (claim values are shortened). Nothing here reads the clock or a
key.

Invariants (``tests/processors/test_authorization.py``): a command is
allowed exactly when every rule above holds; changing any one claim to
break its rule refuses it.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

from seqkeeper.processors.values import value

#: The record header that carries the token (names compared in any case).
AUTHORIZATION = "authorization"
#: The claim naming the tenant the token acts for.
TENANT_CLAIM = "tenant"
#: A scope that allows every commandType; ``commands:<commandType>`` allows one.
ANY_COMMAND = "commands:*"
SCOPE_PREFIX = "commands:"
#: The claim that binds a token to one command's bytes (optional).
VALUE_DIGEST_CLAIM = "value_sha256"
#: Longest token read (a bound on the work one record can cause).
MAX_TOKEN_CHARS = 8192


class Unauthorized(ValueError):
    """A command whose token does not allow it; ``detail`` says why."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@value
class TokenPolicy:
    """What a command's token is checked against, besides its command:
    ``leeway`` seconds of clock skew on ``exp``, ``nbf`` and ``iat``, and
    the issuer and audience it must name (``None``: see the module)."""

    leeway: float = 30.0
    issuer: str | None = None
    audience: str | None = None


def shown(v: Any, limit: int = 64) -> str:
    """``repr(v)``, shortened: claim values come from whoever wrote the
    record and go into dead-letter headers."""
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def bearer(headers: Iterable[tuple[str, bytes | None]]) -> str:
    """The token of a record's ``authorization: Bearer <token>`` header;
    :class:`Unauthorized` when there is none, several, or another scheme."""
    found = [v for k, v in headers if k.lower() == AUTHORIZATION]
    if not found:
        raise Unauthorized("no authorization header: expected 'Bearer <JWT>'")
    if len(found) > 1:
        raise Unauthorized(f"{len(found)} authorization headers: expected one")
    if not found[0]:
        raise Unauthorized("the authorization header is empty: expected 'Bearer <JWT>'")
    raw = bytes(found[0])
    if len(raw) > MAX_TOKEN_CHARS + 7:
        raise Unauthorized(f"the authorization header is over {MAX_TOKEN_CHARS} characters")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise Unauthorized("the authorization header is not ASCII") from None
    scheme, _, token = text.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("the authorization header is not 'Bearer <JWT>'")
    return token.strip()


def value_digest(value: bytes) -> str:
    """What :data:`VALUE_DIGEST_CLAIM` holds for a record value: its SHA-256,
    base64url without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(value).digest()).rstrip(b"=").decode()


def scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """The token's scopes: its ``scope`` claim split on spaces (RFC 6749
    3.3); none when the claim is missing or not a string."""
    scope = claims.get("scope")
    return frozenset(scope.split(" ")) if isinstance(scope, str) else frozenset()


def scope_allows(granted: frozenset[str], command_type: str) -> bool:
    """Whether scopes ``granted`` allow a command of ``command_type``."""
    return ANY_COMMAND in granted or SCOPE_PREFIX + command_type in granted


def _time(claims: Mapping[str, Any], name: str) -> float | None:
    """A NumericDate claim (seconds since the epoch), ``None`` when absent."""
    if name not in claims:
        return None
    v = claims[name]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise Unauthorized(f"the token's {name} is not a number of seconds: {shown(v)}")
    return float(v)


def authorize(
    claims: Mapping[str, Any],
    tenant_id: str,
    command_type: str,
    now: float,
    policy: TokenPolicy = TokenPolicy(),
    value: bytes | None = None,
) -> None:
    """Return when verified ``claims`` allow a command of ``command_type``
    for ``tenant_id`` at ``now`` (seconds since the epoch), whose record
    value is ``value``; else raise :class:`Unauthorized` naming the first
    rule broken."""
    expires = _time(claims, "exp")
    if expires is None:
        raise Unauthorized("the token has no exp (expiry): a token must expire")
    if now >= expires + policy.leeway:
        raise Unauthorized(
            f"the token expired at {expires:.0f} (now {now:.0f}, leeway {policy.leeway:g} s)"
        )
    not_before = _time(claims, "nbf")
    if not_before is not None and now + policy.leeway < not_before:
        raise Unauthorized(
            f"the token is not valid before {not_before:.0f} (now {now:.0f}, "
            f"leeway {policy.leeway:g} s)"
        )
    issued = _time(claims, "iat")
    if issued is not None and now + policy.leeway < issued:
        raise Unauthorized(
            f"the token was issued in the future, at {issued:.0f} (now {now:.0f}, "
            f"leeway {policy.leeway:g} s)"
        )
    if policy.issuer is not None and claims.get("iss") != policy.issuer:
        raise Unauthorized(
            f"the token's issuer (iss) is {shown(claims.get('iss'))}, expected {policy.issuer!r}"
        )
    if "aud" in claims:
        aud = claims["aud"]
        named = [aud] if isinstance(aud, str) else aud
        if not isinstance(named, list) or not all(isinstance(a, str) for a in named):
            raise Unauthorized(f"the token's audience (aud) is not a string or list: {shown(aud)}")
        if policy.audience is None:
            raise Unauthorized(
                f"the token is meant for audience {shown(aud)}, and this worker expects none"
            )
        if policy.audience not in named:
            raise Unauthorized(
                f"the token's audience (aud) is {shown(aud)}, expected {policy.audience!r}"
            )
    elif policy.audience is not None:
        raise Unauthorized(f"the token has no audience (aud), expected {policy.audience!r}")
    tenant = claims.get(TENANT_CLAIM)
    if tenant != tenant_id:
        raise Unauthorized(
            f"the token acts for tenant {shown(tenant)}, the command's tenantId is "
            f"{shown(tenant_id)}"
        )
    if not scope_allows(scopes(claims), command_type):
        raise Unauthorized(
            f"the token's scope does not allow commandType {shown(command_type)} "
            f"(expected {shown(SCOPE_PREFIX + command_type)} or {ANY_COMMAND!r})"
        )
    if VALUE_DIGEST_CLAIM in claims and (
        value is None or claims[VALUE_DIGEST_CLAIM] != value_digest(value)
    ):
        raise Unauthorized(
            f"the token was signed for another command: its {VALUE_DIGEST_CLAIM} is not the "
            "digest of this command's value"
        )
