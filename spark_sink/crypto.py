"""Encryption at rest of sensitive fields in the audit log and snapshots.

Fields are marked by dotted paths into a message's ``data`` (``payload`` for
commands), e.g. ``SEQKEEPER_SENSITIVE_FIELDS=email,card.number``; the key is
32 bytes, url-safe base64, from ``SEQKEEPER_AUDIT_KEY`` (make one with
``seqkeeper keygen``). With both set:

* each marked field's value in ``data`` becomes the string
  ``enc:v1:<base64>``, so the other fields stay queryable;
* the raw ``value`` bytes kept for replay (and the raw state values of the
  snapshots) are sealed whole, so nothing sensitive is left in clear;
* the readers (:mod:`spark_sink.store`, ``seqkeeper replay``) open them with
  the same key and refuse, with a clear error, without it.

AES-256-GCM with a synthetic nonce: HMAC-SHA256(key, context ‖ plaintext)
truncated to 96 bits. The context names the record and the field, so the
same record compacted twice gives the same bytes (reruns stay identical) and
a nonce repeats only for an identical (context, plaintext), which repeats
the identical ciphertext and so leaks nothing new.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

import orjson

from seqkeeper.settings import VARS, SparkSettings

PREFIX = "enc:v1:"
KEY_ENV = VARS["audit_key"].env
FIELDS_ENV = VARS["sensitive_fields"].env


class AuditKeyError(ValueError):
    """A missing, malformed or wrong audit key."""


def new_key() -> str:
    """A fresh key in the form ``SEQKEEPER_AUDIT_KEY`` expects."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii")


def _decode_key(text: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text.strip().encode("ascii"))
    except (ValueError, UnicodeEncodeError) as e:
        raise AuditKeyError(f"{KEY_ENV} is not url-safe base64: {e}") from None
    if len(raw) != 32:
        raise AuditKeyError(f"{KEY_ENV} must decode to 32 bytes, not {len(raw)}")
    return raw


@dataclass(frozen=True)
class Sealer:
    """Seals and opens values with one key; ``fields`` are the marked paths."""

    key: bytes
    fields: tuple[str, ...] = ()

    @classmethod
    def from_env(cls) -> Sealer | None:
        """The sealer the environment configures: ``None`` without a key
        (then marking fields is an error, not a silent clear-text write)."""
        spark = SparkSettings()
        fields, text = spark.sensitive_fields, spark.audit_key
        if not text:
            if fields:
                raise AuditKeyError(f"{FIELDS_ENV} marks fields to encrypt but {KEY_ENV} is unset")
            return None
        return cls(_decode_key(text), fields)

    @property
    def key_id(self) -> str:
        """A public fingerprint of the key (recorded with each run)."""
        return hashlib.sha256(b"seqkeeper-key-id" + self.key).hexdigest()[:16]

    def seal(self, plain: bytes, context: bytes) -> str:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = hmac.new(self.key, context + b"\x00" + plain, hashlib.sha256).digest()[:12]
        sealed = AESGCM(self.key).encrypt(nonce, plain, context)
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")

    def open(self, token: str, context: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        raw = base64.urlsafe_b64decode(token[len(PREFIX) :].encode("ascii"))
        try:
            return AESGCM(self.key).decrypt(raw[:12], raw[12:], context)
        except InvalidTag:
            raise AuditKeyError(
                f"cannot decrypt: wrong {KEY_ENV} (or the row was altered)"
            ) from None

    def seal_bytes(self, plain: bytes | None, context: str) -> bytes | None:
        if plain is None:
            return None
        return self.seal(plain, b"value:" + context.encode()).encode("ascii")

    def open_bytes(self, sealed: bytes | None, context: str) -> bytes | None:
        if sealed is None or not sealed.startswith(PREFIX.encode()):
            return sealed
        return self.open(sealed.decode("ascii"), b"value:" + context.encode())

    def seal_fields(self, data: Any, context: str) -> Any:
        """``data`` with each marked path's value sealed (paths absent or
        under a non-object are left alone)."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for path in dict.fromkeys(self.fields):
            *parents, leaf = path.split(".")
            node: Any = out
            for p in parents:
                child = node.get(p) if isinstance(node, dict) else None
                if not isinstance(child, dict):
                    node = None
                    break
                node[p] = child = dict(child)
                node = child
            if isinstance(node, dict) and leaf in node:
                ctx = f"field:{context}:{path}".encode()
                node[leaf] = self.seal(orjson.dumps(node[leaf]), ctx)
        return out

    def open_fields(self, data: Any, context: str) -> Any:
        """Undo :meth:`seal_fields` (whatever paths were marked then)."""

        def walk(node: Any, path: str) -> Any:
            if isinstance(node, dict):
                return {k: walk(v, f"{path}.{k}" if path else k) for k, v in node.items()}
            if isinstance(node, str) and node.startswith(PREFIX):
                return walk(orjson.loads(self.open(node, f"field:{context}:{path}".encode())), path)
            return node

        return walk(data, "")

    def seal_message(self, text: str | None, context: str) -> str | None:
        """A message's JSON text with its ``data`` (or ``payload``) fields sealed."""
        if text is None:
            return None
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            return self.seal(text.encode(), f"text:{context}".encode())
        if not isinstance(doc, dict):
            return text
        for part in ("data", "payload"):
            if part in doc:
                doc[part] = self.seal_fields(doc[part], f"{context}:{part}")
        return orjson.dumps(doc).decode()


def is_sealed(value: bytes | str | None) -> bool:
    if value is None:
        return False
    return (value if isinstance(value, str) else value[:7].decode("latin-1")).startswith(PREFIX)
