"""Command tokens: the keys that verify them, and a signer that makes them.

A command token is a JWT (RFC 7519) signed with an asymmetric key: ES256,
ES384, ES512, RS256, RS384, RS512, PS256, PS384, PS512 or EdDSA
(:data:`ALGORITHMS`). Symmetric (HS*) and unsigned (``none``) tokens are
never accepted, so a public key can never be used as an HMAC secret.

:class:`TokenKeys` holds the public keys a worker trusts, each under its
key id (``kid``), and pins each key to one algorithm: a token is checked
only with the key its ``kid`` names, and only when its ``alg`` is that
key's. Several keys may be trusted at once (rotation: add the new key,
move the signers to it, then remove the old one). :func:`load_keys` reads
them from ``SEQKEEPER_JWT_KEYS``:

* a JWKS file (RFC 7517: ``{"keys": [...]}``), each key with a ``kid``;
  its ``alg``, when given, pins the algorithm (an RSA key without one is
  RS256); or
* a directory of PEM public keys named ``<kid>.pem`` (EC P-256/P-384/P-521:
  ES256/384/512, RSA: RS256, Ed25519 and Ed448: EdDSA).

A private key, a symmetric key, an RSA key under 2048 bits or a duplicate
``kid`` is refused when loaded, in one line naming the file.

:meth:`TokenKeys.verify` checks the signature only and returns the claims;
what the claims allow is decided by :func:`processors.authorization.authorize`
with the wall clock as an argument. :class:`TokenSigner` signs command
tokens with a private key (``seqkeeper.client``, ``seqkeeper send``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from seqkeeper.processors.authorization import (
    AUTHORIZATION,
    MAX_TOKEN_CHARS,
    SCOPE_PREFIX,
    TENANT_CLAIM,
    VALUE_DIGEST_CLAIM,
    Unauthorized,
    shown,
    value_digest,
)
from seqkeeper.settings import VARS, SettingError

#: The algorithms a command token may be signed with: asymmetric only.
ALGORITHMS = (
    *("ES256", "ES384", "ES512"),
    *("RS256", "RS384", "RS512"),
    *("PS256", "PS384", "PS512"),
    "EdDSA",
)
#: The smallest RSA key accepted (NIST SP 800-57: 112-bit security).
MIN_RSA_BITS = 2048
_CURVES = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
#: Only the signature is checked here; the claims are the core's to decide.
_SIGNATURE_ONLY: Any = {
    "verify_signature": True,
    "verify_exp": False,
    "verify_nbf": False,
    "verify_iat": False,
    "verify_aud": False,
    "verify_iss": False,
    "verify_sub": False,
    "verify_jti": False,
    "require": [],
}

PublicKey = (
    rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey
)
PrivateKey = (
    rsa.RSAPrivateKey
    | ec.EllipticCurvePrivateKey
    | ed25519.Ed25519PrivateKey
    | ed448.Ed448PrivateKey
)


class BadKey(ValueError):
    """A key that cannot be used; the message says why (never the key)."""


def algorithm_of(key: PublicKey | PrivateKey) -> str:
    """The one algorithm a PEM key signs or verifies with (RSA: RS256)."""
    if isinstance(key, rsa.RSAPublicKey | rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            raise BadKey(f"an RSA key of {key.key_size} bits: use at least {MIN_RSA_BITS}")
        return "RS256"
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        alg = _CURVES.get(key.curve.name)
        if alg is None:
            raise BadKey(f"an EC key on curve {key.curve.name}: use P-256, P-384 or P-521")
        return alg
    if isinstance(
        key,
        ed25519.Ed25519PublicKey
        | ed25519.Ed25519PrivateKey
        | ed448.Ed448PublicKey
        | ed448.Ed448PrivateKey,
    ):
        return "EdDSA"
    raise BadKey(f"a {type(key).__name__}: use an EC, RSA or Ed25519 key")


@dataclass(frozen=True)
class VerificationKey:
    """A trusted public key, its ``kid`` and the one algorithm it verifies."""

    kid: str
    algorithm: str
    key: PublicKey


def _from_jwk(entry: Any, n: int) -> VerificationKey:
    if not isinstance(entry, dict):
        raise BadKey(f"key {n} is not a JSON object")
    kid = entry.get("kid")
    if not isinstance(kid, str) or not kid:
        raise BadKey(f"key {n} has no kid: give every key a kid (its name in tokens)")
    kty = entry.get("kty")
    if kty == "oct" or kty not in ("EC", "RSA", "OKP"):
        raise BadKey(f"key {kid!r} has kty {shown(kty)}: only EC, RSA and OKP public keys")
    if any(part in entry for part in ("d", "p", "q", "dp", "dq", "qi")):
        raise BadKey(f"key {kid!r} holds a private key: give its public part only")
    if entry.get("use", "sig") != "sig":
        raise BadKey(f"key {kid!r} has use {shown(entry['use'])}: expected sig")
    alg = entry.get("alg")
    if alg is not None and alg not in ALGORITHMS:
        raise BadKey(f"key {kid!r} has alg {shown(alg)}: expected one of {', '.join(ALGORITHMS)}")
    try:
        jwk = jwt.PyJWK(entry)
    except jwt.PyJWTError:
        raise BadKey(f"key {kid!r} is not a valid {kty} public key") from None
    if jwk.algorithm_name not in ALGORITHMS or not isinstance(jwk.key, PublicKey):
        raise BadKey(f"key {kid!r} is not a public key for {', '.join(ALGORITHMS)}")
    pinned = algorithm_of(jwk.key)  # the key's own strength and curve checks
    if jwk.algorithm_name.startswith(("RS", "PS")) and pinned == "RS256":
        pinned = jwk.algorithm_name  # an RSA key verifies the RS/PS alg it names
    if pinned != jwk.algorithm_name:
        raise BadKey(f"key {kid!r} is a {pinned} key, its alg says {jwk.algorithm_name}")
    return VerificationKey(kid, pinned, jwk.key)


def _from_pem(path: Path) -> VerificationKey:
    data = path.read_bytes()
    if b"PRIVATE KEY" in data:
        raise BadKey(
            f"{path.name} holds a private key: give its public key "
            f"(openssl pkey -in {path.name} -pubout)"
        )
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        raise BadKey(f"{path.name} is not a PEM public key") from None
    if not isinstance(key, PublicKey):
        raise BadKey(f"{path.name}: a {type(key).__name__}, use an EC, RSA or Ed25519 key")
    try:
        return VerificationKey(path.stem, algorithm_of(key), key)
    except BadKey as e:
        raise BadKey(f"{path.name}: {e}") from None


class TokenKeys:
    """The public keys that verify command tokens, by ``kid``."""

    def __init__(self, keys: list[VerificationKey]) -> None:
        self.keys: dict[str, VerificationKey] = {}
        for k in keys:
            if k.kid in self.keys:
                raise BadKey(f"two keys have kid {k.kid!r}")
            self.keys[k.kid] = k
        if not self.keys:
            raise BadKey("no keys")

    @classmethod
    def from_jwks(cls, doc: Any) -> TokenKeys:
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
            raise BadKey('not a JWKS: expected {"keys": [...]}')
        return cls([_from_jwk(entry, n) for n, entry in enumerate(doc["keys"], 1)])

    @classmethod
    def from_directory(cls, directory: Path) -> TokenKeys:
        return cls([_from_pem(p) for p in sorted(directory.glob("*.pem"))])

    def verify(self, token: str) -> dict[str, Any]:
        """The claims of ``token`` once its signature verifies with the key
        its ``kid`` names, by that key's algorithm; else :class:`Unauthorized`
        (the claims' meaning is not checked here)."""
        if len(token) > MAX_TOKEN_CHARS:
            raise Unauthorized(f"the token is over {MAX_TOKEN_CHARS} characters")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthorized("the token is not a JWT (header.payload.signature)") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise Unauthorized(
                f"the token's algorithm {shown(alg)} is not allowed "
                f"(allowed: {', '.join(ALGORITHMS)})"
            )
        kid = header.get("kid")
        key = self.keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise Unauthorized(
                f"the token's key id (kid) {shown(kid)} is not a trusted key "
                f"(trusted: {', '.join(sorted(self.keys))})"
            )
        if alg != key.algorithm:
            raise Unauthorized(f"key {kid!r} verifies {key.algorithm} tokens, this one is {alg}")
        try:
            claims = jwt.decode(token, key.key, algorithms=[key.algorithm], options=_SIGNATURE_ONLY)
        except jwt.InvalidSignatureError:
            raise Unauthorized(f"the token's signature does not verify with key {kid!r}") from None
        except jwt.PyJWTError as e:
            raise Unauthorized(f"the token cannot be read ({type(e).__name__})") from None
        if not isinstance(claims, dict):
            raise Unauthorized("the token's claims are not a JSON object")
        return claims


def load_keys(path: str) -> TokenKeys:
    """The keys of ``SEQKEEPER_JWT_KEYS`` (a JWKS file or a directory of
    ``<kid>.pem``); a :class:`SettingError` in one line naming it."""
    env = VARS["jwt_keys"].env
    if not path:
        raise SettingError(
            f"{VARS['command_auth'].env}=jwt needs {env}: a JWKS file or a directory of "
            "<kid>.pem public keys"
        )
    where = Path(path)
    try:
        if where.is_dir():
            return TokenKeys.from_directory(where)
        return TokenKeys.from_jwks(json.loads(where.read_bytes()))
    except OSError as e:
        raise SettingError(
            f"{env}={path!r}: cannot read it ({e.strerror or e}): mount the keys there"
        ) from None
    except ValueError as e:  # BadKey, and JSON that does not parse
        why = str(e) if isinstance(e, BadKey) else "not JSON"
        raise SettingError(
            f"{env}={path!r}: {why}; expected a JWKS file or a directory of <kid>.pem "
            "public keys (docs/security.md)"
        ) from None


class TokenSigner:
    """Signs command tokens with a private key known to workers by
    ``key_id``: claims ``tenant``, ``scope`` (``commands:<commandType>``),
    ``iat``, ``exp`` (``lifetime`` seconds later), ``jti`` (the messageId),
    ``value_sha256`` (binds the token to the command's bytes, when given),
    and ``iss``/``aud`` when given."""

    def __init__(
        self,
        private_key: PrivateKey,
        key_id: str,
        *,
        lifetime: float = 60.0,
        issuer: str | None = None,
        audience: str | None = None,
    ) -> None:
        if not key_id:
            raise BadKey("a signing key needs its key id (kid)")
        self.algorithm = algorithm_of(private_key)
        self.private_key = private_key
        self.key_id = key_id
        self.lifetime = lifetime
        self.issuer = issuer or None
        self.audience = audience or None

    @classmethod
    def from_file(cls, path: str | Path, key_id: str, **options: Any) -> TokenSigner:
        """The signer of a PEM private key file (unencrypted); a
        :class:`BadKey` naming the file, never its content."""
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise BadKey(
                f"signing key {str(path)!r}: cannot read it ({e.strerror or e}): give the PEM "
                "private key file whose public key the workers trust"
            ) from None
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            raise BadKey(f"signing key {str(path)!r}: not an unencrypted PEM private key") from None
        if not isinstance(key, PrivateKey):
            raise BadKey(f"signing key {str(path)!r}: use an EC, RSA or Ed25519 key")
        try:
            return cls(key, key_id, **options)
        except BadKey as e:
            raise BadKey(f"signing key {str(path)!r}: {e}") from None

    def sign(self, claims: Mapping[str, Any]) -> str:
        """A token of ``claims`` as they are (tests make odd ones with it)."""
        return jwt.encode(
            dict(claims), self.private_key, algorithm=self.algorithm, headers={"kid": self.key_id}
        )

    def claims(
        self, command: Mapping[str, Any], now: float, value: bytes | None = None
    ) -> dict[str, Any]:
        """The claims of the token for ``command`` (an envelope) at ``now``;
        bound to the record value ``value`` when given."""
        claims: dict[str, Any] = {
            TENANT_CLAIM: command["tenantId"],
            "scope": SCOPE_PREFIX + command["commandType"],
            "iat": int(now),
            "exp": int(now + self.lifetime),
            "jti": command["messageId"],
        }
        if value is not None:
            claims[VALUE_DIGEST_CLAIM] = value_digest(value)
        if self.issuer:
            claims["iss"] = self.issuer
        if self.audience:
            claims["aud"] = self.audience
        return claims

    def header(
        self, command: Mapping[str, Any], now: float, value: bytes | None = None
    ) -> tuple[str, bytes]:
        """The ``authorization`` record header for ``command`` at ``now``
        (bound to its record value ``value`` when given)."""
        token = self.sign(self.claims(command, now, value))
        return AUTHORIZATION, b"Bearer " + token.encode("ascii")
