"""Command tokens end to end, from the token's bytes to the decision
(state.tokens verifies the signature, processors.authorization decides):
a token signed by a trusted key for the command's tenant and type passes;
a wrong kid, a tampered signature or payload, ``alg: none``, HS256 signed
with the public key, an algorithm the key is not pinned to, a wrong tenant,
a missing scope or an expired token is refused. Rotation: the old and the
new key are both accepted while both are configured, the removed one is
refused. Key files that cannot be trusted fail to load in one line."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from seqkeeper.processors.authorization import TokenPolicy, Unauthorized, authorize
from seqkeeper.settings import SettingError
from seqkeeper.state.tokens import BadKey, TokenKeys, TokenSigner, load_keys

PRIVATE = {
    "old": ec.generate_private_key(ec.SECP256R1()),
    "new": ed25519.Ed25519PrivateKey.generate(),
    "rsa": rsa.generate_private_key(65537, 2048),
}
SIGNERS = {kid: TokenSigner(key, kid) for kid, key in PRIVATE.items()}
NOW = 1_800_000_000.0


def public_pem(kid: str) -> bytes:
    return (
        PRIVATE[kid]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def private_pem(key: Any) -> bytes:
    return key.private_bytes(  # type: ignore[no-any-return]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def jwk(kid: str) -> dict[str, Any]:
    return {**_jwk_of(kid), "kid": kid}


def _jwk_of(kid: str) -> dict[str, Any]:
    key = PRIVATE[kid].public_key()
    if isinstance(key, ec.EllipticCurvePublicKey):
        return json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key))  # type: ignore[no-any-return]
    if isinstance(key, rsa.RSAPublicKey):
        return json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key))  # type: ignore[no-any-return]
    return json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(key))  # type: ignore[no-any-return]


def jwks(*kids: str) -> TokenKeys:
    return TokenKeys.from_jwks({"keys": [jwk(k) for k in kids]})


def command(tenant: str, command_type: str) -> dict[str, Any]:
    return {"tenantId": tenant, "commandType": command_type, "messageId": "m-1"}


def token(kid: str, tenant: str = "A", command_type: str = "T", now: float = NOW) -> str:
    return SIGNERS[kid].sign(SIGNERS[kid].claims(command(tenant, command_type), now))


def decide(
    keys: TokenKeys, tok: str, tenant: str = "A", command_type: str = "T", now: float = NOW
) -> str | None:
    """None when the token allows the command, else why not."""
    try:
        authorize(keys.verify(tok), tenant, command_type, now, TokenPolicy(leeway=30))
    except Unauthorized as refused:
        assert len(tok) < 8 or tok not in refused.detail  # never echoed
        return refused.detail
    return None


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def crafted(header: dict[str, Any], claims: dict[str, Any], sign: Any) -> str:
    head = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    return head + "." + b64(sign(head.encode()))


ALL = jwks("old", "new", "rsa")
tenants = st.text(min_size=1, max_size=20)
types = st.text(st.characters(codec="ascii", exclude_characters=" "), min_size=1, max_size=20)
kids = st.sampled_from(sorted(PRIVATE))


@settings(max_examples=60, deadline=None)
@given(kids, tenants, types, st.floats(-3600, 3600))
def test_a_token_for_the_command_is_accepted(kid: str, tenant: str, ctype: str, ago: float) -> None:
    """Signed by any trusted key, up to a minute old (the signer's lifetime)."""
    age = abs(ago) % 60
    assert decide(ALL, token(kid, tenant, ctype, NOW - age), tenant, ctype) is None


@settings(max_examples=60, deadline=None)
@given(kids, tenants, types, st.sampled_from(["tenant", "scope", "expired"]), st.data())
def test_a_token_for_another_command_is_refused(
    kid: str, tenant: str, ctype: str, wrong: str, data: st.DataObject
) -> None:
    if wrong == "tenant":
        other = data.draw(tenants.filter(lambda t: t != tenant))
        why = decide(ALL, token(kid, other, ctype), tenant, ctype)
        assert why is not None and "tenant" in why
    elif wrong == "scope":
        other = data.draw(types.filter(lambda t: t != ctype and t != "*"))
        why = decide(ALL, token(kid, tenant, other), tenant, ctype)
        assert why is not None and "scope" in why
    else:  # signed more than lifetime + leeway ago
        old = NOW - 60 - 30 - data.draw(st.floats(0, 1e6))
        why = decide(ALL, token(kid, tenant, ctype, old), tenant, ctype)
        assert why is not None and "expired" in why


@settings(max_examples=60, deadline=None)
@given(kids, st.data())
def test_a_tampered_signature_is_refused(kid: str, data: st.DataObject) -> None:
    head, _, signature = token(kid).rpartition(".")
    at = data.draw(st.integers(0, len(signature) - 2))  # the last one may hold padding bits
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    char = data.draw(st.sampled_from(alphabet).filter(lambda c: c != signature[at]))
    tampered = head + "." + signature[:at] + char + signature[at + 1 :]
    why = decide(ALL, tampered)
    assert why is not None and "signature" in why


@settings(max_examples=30, deadline=None)
@given(kids, tenants.filter(lambda t: t != "A"))
def test_a_payload_swapped_under_a_signature_is_refused(kid: str, tenant: str) -> None:
    header, _, signature = token(kid, "A").split(".")
    mine = token(kid, tenant).split(".")[1]  # a valid token's payload, for another tenant
    why = decide(ALL, f"{header}.{mine}.{signature}", tenant)
    assert why is not None and "signature" in why


@settings(max_examples=40, deadline=None)
@given(kids, st.sampled_from(["unknown", "", None, 3]))
def test_a_key_id_that_is_not_trusted_is_refused(kid: str, named: Any) -> None:
    claims = SIGNERS[kid].claims(command("A", "T"), NOW)
    if named is None:  # no kid at all
        tok = jwt.encode(claims, PRIVATE[kid], algorithm=SIGNERS[kid].algorithm)
    elif isinstance(named, str):
        tok = jwt.encode(
            claims, PRIVATE[kid], algorithm=SIGNERS[kid].algorithm, headers={"kid": named}
        )
    else:  # PyJWT signs no such header; the token is made by hand
        header = {"alg": SIGNERS[kid].algorithm, "kid": named}
        tok = crafted(header, claims, lambda _: b"\0" * 64)
    why = decide(ALL, tok)
    assert why is not None and ("kid" in why or not isinstance(named, str | None))


@pytest.mark.parametrize(("signed_by", "named"), [("old", "new"), ("new", "rsa"), ("rsa", "old")])
def test_a_key_id_naming_another_trusted_key_is_refused(signed_by: str, named: str) -> None:
    claims = SIGNERS[signed_by].claims(command("A", "T"), NOW)
    tok = jwt.encode(
        claims, PRIVATE[signed_by], algorithm=SIGNERS[signed_by].algorithm, headers={"kid": named}
    )
    assert decide(ALL, tok) is not None


@pytest.mark.parametrize("alg", ["none", "None", "NONE", ""])
def test_alg_none_is_refused(alg: str) -> None:
    claims = SIGNERS["old"].claims(command("A", "T"), NOW)
    tok = crafted({"alg": alg, "kid": "old", "typ": "JWT"}, claims, lambda _: b"")
    why = decide(ALL, tok)
    assert why is not None and "not allowed" in why


@pytest.mark.parametrize("kid", sorted(PRIVATE))
@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512"])
def test_hmac_signed_with_the_public_key_is_refused(kid: str, alg: str) -> None:
    """The classic confusion: the verifier's public key used as an HMAC secret."""
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
    claims = SIGNERS[kid].claims(command("A", "T"), NOW)
    secret = public_pem(kid)
    tok = crafted({"alg": alg, "kid": kid}, claims, lambda m: hmac.new(secret, m, digest).digest())
    why = decide(ALL, tok)
    assert why is not None and "not allowed" in why


def test_an_algorithm_the_key_is_not_pinned_to_is_refused() -> None:
    """An ES256 key asked to verify ES384, an RS256 key PS256."""
    claims = SIGNERS["old"].claims(command("A", "T"), NOW)
    other = ec.generate_private_key(ec.SECP384R1())
    tok = jwt.encode(claims, other, algorithm="ES384", headers={"kid": "old"})
    assert "verifies ES256 tokens" in (decide(ALL, tok) or "")
    tok = jwt.encode(claims, PRIVATE["rsa"], algorithm="PS256", headers={"kid": "rsa"})
    assert "verifies RS256 tokens" in (decide(ALL, tok) or "")


@pytest.mark.parametrize("garbage", ["", "abc", "a.b", "a.b.c", "!!.!!.!!", "e30.e30.", "x" * 9000])
def test_what_is_not_a_token_is_refused(garbage: str) -> None:
    assert decide(ALL, garbage) is not None


def test_rotation_old_and_new_while_both_are_configured_then_only_the_new(tmp_path: Path) -> None:
    """With a JWKS file, and with a directory of <kid>.pem files."""
    both, after = tmp_path / "both.json", tmp_path / "after.json"
    both.write_text(json.dumps({"keys": [jwk("old"), jwk("new")]}))
    after.write_text(json.dumps({"keys": [jwk("new")]}))
    pems = tmp_path / "keys"
    pems.mkdir()
    for kid in ("old", "new"):
        (pems / f"{kid}.pem").write_bytes(public_pem(kid))
    (pems / "README").write_text("not a key: ignored")
    for rotating in (load_keys(str(both)), load_keys(str(pems))):
        assert decide(rotating, token("old")) is None
        assert decide(rotating, token("new")) is None
    (pems / "old.pem").unlink()
    for rotated in (load_keys(str(after)), load_keys(str(pems))):
        assert decide(rotated, token("new")) is None
        why = decide(rotated, token("old"))
        assert why is not None and "'old' is not a trusted key (trusted: new)" in why


def jwks_file(tmp_path: Path, *entries: Any) -> str:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": list(entries)}))
    return str(path)


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: str(p / "missing.json"), "cannot read it (No such file or directory)"),
        (lambda p: (p / "k.json").write_text("{") and str(p / "k.json"), "not JSON"),
        (lambda p: (p / "k.json").write_text("[]") and str(p / "k.json"), "not a JWKS"),
        (lambda p: jwks_file(p), "no keys"),
        (lambda p: jwks_file(p, {**jwk("old"), "kid": ""}), "has no kid"),
        (lambda p: jwks_file(p, jwk("old"), jwk("old")), "two keys have kid 'old'"),
        (lambda p: jwks_file(p, {"kty": "oct", "kid": "h", "k": "c2VjcmV0"}), "only EC, RSA"),
        (
            lambda p: jwks_file(p, {**jwk("old"), "d": "AAAA"}),
            "key 'old' holds a private key: give its public part only",
        ),
        (lambda p: jwks_file(p, {**jwk("old"), "alg": "HS256"}), "has alg 'HS256'"),
        (lambda p: jwks_file(p, {**jwk("old"), "alg": "ES384"}), "is a ES256 key"),
        (lambda p: jwks_file(p, {**jwk("old"), "use": "enc"}), "expected sig"),
        (lambda p: jwks_file(p, {**jwk("old"), "x": "AAAA"}), "not a valid EC public key"),
        (
            lambda p: jwks_file(p, {**_jwk_of_small_rsa(), "kid": "small"}),
            "RSA key of 1024 bits",
        ),
    ],
)
def test_keys_that_cannot_be_trusted_fail_to_load_in_one_line(
    tmp_path: Path, make: Any, why: str
) -> None:
    path = make(tmp_path)
    with pytest.raises(SettingError) as failed:
        load_keys(path)
    message = str(failed.value)
    assert why in message and "SEQKEEPER_JWT_KEYS=" in message and "\n" not in message


def _jwk_of_small_rsa() -> dict[str, Any]:
    small = rsa.generate_private_key(65537, 1024)
    return json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(small.public_key()))  # type: ignore[no-any-return]


def test_a_private_pem_among_the_keys_fails_to_load(tmp_path: Path) -> None:
    (tmp_path / "k1.pem").write_bytes(private_pem(PRIVATE["old"]))
    with pytest.raises(SettingError) as failed:
        load_keys(str(tmp_path))
    assert "k1.pem holds a private key" in str(failed.value)
    assert "BEGIN" not in str(failed.value)


def test_auth_without_keys_names_the_variable() -> None:
    with pytest.raises(SettingError, match="SEQKEEPER_COMMAND_AUTH=jwt needs SEQKEEPER_JWT_KEYS"):
        load_keys("")


def test_a_signer_from_a_file_signs_what_the_keys_verify(tmp_path: Path) -> None:
    path = tmp_path / "signer.pem"
    path.write_bytes(private_pem(PRIVATE["new"]))
    signer = TokenSigner.from_file(path, "new", issuer="iss", audience="aud", lifetime=5)
    name, value = signer.header(command("A", "T"), time.time())
    assert name == "authorization" and value.startswith(b"Bearer ")
    claims = ALL.verify(value.decode()[7:])
    assert claims["iss"] == "iss" and claims["aud"] == "aud" and claims["exp"] - claims["iat"] == 5
    with pytest.raises(BadKey, match="cannot read it"):
        TokenSigner.from_file(tmp_path / "nope.pem", "k")
    (tmp_path / "pub.pem").write_bytes(public_pem("old"))
    with pytest.raises(BadKey, match="not an unencrypted PEM private key"):
        TokenSigner.from_file(tmp_path / "pub.pem", "k")
