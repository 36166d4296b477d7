"""Encryption at rest of sensitive fields in the audit log and snapshots.

Fields are marked by dotted paths into a message's ``data`` (``payload`` for
commands), e.g. ``SEQKEEPER_SENSITIVE_FIELDS=email,card.number``; the key is
32 bytes, url-safe base64, from ``SEQKEEPER_AUDIT_KEY`` or the file named by
``SEQKEEPER_AUDIT_KEY_FILE`` (make one with ``seqkeeper keygen``). With both
a key and fields set:

* each marked field's value in ``data`` becomes the string
  ``enc:v2:<key id>:<base64>``, so the other fields stay queryable;
* the raw ``value`` bytes kept for replay (and the raw state values of the
  snapshots) are sealed whole, so nothing sensitive is left in clear;
* the readers (:mod:`spark_sink.store`, ``seqkeeper replay``) open them with
  the same key and refuse, with a clear error, without it.

AES-256-GCM with a synthetic nonce: HMAC-SHA256(key, context ‖ plaintext)
truncated to 96 bits. The context names the record and the field, so the
same record compacted twice gives the same bytes (reruns stay identical) and
a nonce repeats only for an identical (context, plaintext), which repeats
the identical ciphertext and so leaks nothing new.

Key rotation (docs/security.md): only the current key seals; the old keys
listed in ``SEQKEEPER_AUDIT_DECRYPT_KEYS`` only open. A token names the key
that sealed it (the first 8 hex digits of its public :attr:`Sealer.key_id`),
so opening picks the key without trying them all; ``enc:v1:`` tokens, from
before the id was written, are opened by trying the current key, then each
decrypt-only key. :meth:`Sealer.reseal` moves a token to the current key.

Per-stream keys (erasure, docs/security.md): in the audit log each stream's
values are sealed with a data key of its own, drawn at random when the
stream's first row is compacted and kept wrapped (sealed) by the audit key
in one small file per stream (:class:`StreamKeys`). Its tokens read
``enc:v3:<8 hex digits of the data key's id>:<base64>``. Deleting a
stream's file (``seqkeeper store forget``) leaves its tokens with no key
anywhere: readers show them as :data:`ERASED`. Rotating the audit key
rewraps these files and rewrites no data. State snapshots, rewritten whole
at every run, stay sealed with the audit key itself.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import secrets
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from seqkeeper.settings import VARS, SettingError, SparkSettings

#: The form every new token takes: ``enc:v2:<8 hex digits of the key id>:<base64>``.
PREFIX = "enc:v2:"
#: The form before key rotation: no key id (opened by trying each key).
PREFIX_V1 = "enc:v1:"
#: A value sealed with its stream's data key: ``enc:v3:<data key id>:<base64>``.
PREFIX_STREAM = "enc:v3:"
#: What readers show for a value of a forgotten stream (its key destroyed):
#: a field's value becomes this string; a raw value or a header value, ``None``.
ERASED = "[erased]"
KEY_ENV = VARS["audit_key"].env
KEY_FILE_ENV = VARS["audit_key_file"].env
DECRYPT_ENV = VARS["audit_decrypt_keys"].env
DECRYPT_FILE_ENV = VARS["audit_decrypt_keys_file"].env
FIELDS_ENV = VARS["sensitive_fields"].env
#: Hex digits of the key id a token carries.
TOKEN_ID_LENGTH = 8
#: The label of v1 tokens no given key opens (their key is not named in them).
UNKNOWN_V1 = "enc:v1 (key not given)"


class AuditKeyError(ValueError):
    """A missing, malformed or wrong audit key. Its message never holds a
    key: it names the variable (and the key's public id) instead."""


def new_key() -> str:
    """A fresh key in the form ``SEQKEEPER_AUDIT_KEY`` expects."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii")


def _decode_key(text: str, source: str = KEY_ENV) -> bytes:
    """The 32 key bytes of ``text``; ``source`` names where it came from in
    the error (which never quotes the text, nor the decoder's message,
    which can quote a character of it)."""
    try:
        raw = base64.urlsafe_b64decode(text.strip().encode("ascii"))
    except (ValueError, UnicodeEncodeError, binascii.Error):
        raise AuditKeyError(
            f"{source} is not url-safe base64: make a key with seqkeeper keygen"
        ) from None
    if len(raw) != 32:
        raise AuditKeyError(
            f"{source} must decode to 32 bytes, not {len(raw)}: make a key with seqkeeper keygen"
        )
    return raw


def fingerprint(key: bytes) -> str:
    """A key's public id: 16 hex digits that tell keys apart and reveal
    nothing of them (recorded with each run, carried by each token)."""
    return hashlib.sha256(b"seqkeeper-key-id" + key).hexdigest()[:16]


@dataclass(frozen=True)
class Sealer:
    """Seals with ``key`` only; opens with ``key`` or any of
    ``decrypt_keys`` (old keys during a rotation); ``fields`` are the marked
    paths. No key is part of its repr, so none reaches a log or an error."""

    key: bytes = field(repr=False)
    fields: tuple[str, ...] = ()
    decrypt_keys: tuple[bytes, ...] = field(default=(), repr=False)
    #: The tokens' form: :data:`PREFIX` (the audit key), :data:`PREFIX_STREAM`
    #: (a stream's data key, :meth:`for_stream`).
    prefix: str = PREFIX

    def for_stream(self, data_key: bytes) -> Sealer:
        """A sealer of the same fields with a stream's data key."""
        return Sealer(data_key, self.fields, prefix=PREFIX_STREAM)

    @classmethod
    def from_env(cls) -> Sealer | None:
        """The sealer the environment configures: ``None`` without a key
        (then marking fields is an error, not a silent clear-text write)."""
        try:
            spark = SparkSettings()
            text = spark.audit_key_text()
            olds = spark.audit_decrypt_key_texts()
        except SettingError as e:
            raise AuditKeyError(str(e)) from None
        fields = spark.sensitive_fields
        if not text:
            if fields:
                raise AuditKeyError(
                    f"{FIELDS_ENV} marks fields to encrypt but {KEY_ENV} is unset "
                    f"(and {KEY_FILE_ENV} too)"
                )
            if olds:
                raise AuditKeyError(
                    f"{DECRYPT_ENV} lists old keys but {KEY_ENV} is unset (and {KEY_FILE_ENV} "
                    "too): set the current key as well (the old ones only open data)"
                )
            return None
        source = KEY_FILE_ENV if spark.audit_key_file else KEY_ENV
        olds_source = DECRYPT_FILE_ENV if spark.audit_decrypt_keys_file else DECRYPT_ENV
        decrypt = tuple(
            _decode_key(old, f"{olds_source}, key {n}") for n, old in enumerate(olds, 1)
        )
        return cls(_decode_key(text, source), fields, decrypt)

    def __post_init__(self) -> None:
        # the current key first, each key once: opening tries them in this order
        unique = tuple(k for k in dict.fromkeys(self.decrypt_keys) if k != self.key)
        object.__setattr__(self, "decrypt_keys", unique)

    @property
    def key_id(self) -> str:
        """A public fingerprint of the current key (recorded with each run)."""
        return fingerprint(self.key)

    @property
    def decrypt_key_ids(self) -> tuple[str, ...]:
        """The public fingerprints of the decrypt-only keys."""
        return tuple(fingerprint(k) for k in self.decrypt_keys)

    def _keys(self) -> Iterator[bytes]:
        yield self.key
        yield from self.decrypt_keys

    def seal(self, plain: bytes, context: bytes) -> str:
        """``plain`` sealed with the current key, bound to ``context``;
        deterministic: the same (context, plain) gives the same token."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = hmac.new(self.key, context + b"\x00" + plain, hashlib.sha256).digest()[:12]
        sealed = AESGCM(self.key).encrypt(nonce, plain, context)
        body = base64.urlsafe_b64encode(nonce + sealed).decode("ascii")
        return f"{self.prefix}{self.key_id[:TOKEN_ID_LENGTH]}:{body}"

    def open(self, token: str, context: bytes) -> bytes:
        """The plaintext of ``token`` (either form), or an
        :class:`AuditKeyError` naming the key it needs."""
        return self._open(token, context)[0]

    def sealed_under(self, token: str, context: bytes) -> str | None:
        """The id of the key, among those given here, that sealed ``token``
        (``None``: none of them opens it)."""
        try:
            return fingerprint(self._open(token, context)[1])
        except AuditKeyError:
            return None

    def _open(self, token: str, context: bytes) -> tuple[bytes, bytes]:
        """(plaintext, the key that opened it). A v2 token names its key,
        so only a v1 token is tried with each key in turn."""
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        token_id, body = _parts(token)
        if token_id is None:
            candidates = list(self._keys())
        else:
            candidates = [k for k in self._keys() if fingerprint(k).startswith(token_id)]
            if not candidates:
                raise AuditKeyError(
                    f"cannot decrypt: wrong key: this value was sealed under key id "
                    f"{token_id}, which is neither {KEY_ENV} (id {self.key_id}) nor listed in "
                    f"{DECRYPT_ENV}: list the key that sealed it there"
                )
        raw = _b64(body)
        for key in candidates:
            try:
                return AESGCM(key).decrypt(raw[:12], raw[12:], context), key
            except InvalidTag:
                continue
        if token_id is None:
            raise AuditKeyError(
                f"cannot decrypt an enc:v1 value: wrong key (neither {KEY_ENV} nor the "
                f"{len(self.decrypt_keys)} keys in {DECRYPT_ENV} open it), or the row was "
                "altered: list the key that sealed it there"
            )
        raise AuditKeyError(
            f"cannot decrypt a value sealed under key id {token_id}: wrong record "
            "(the row was altered, or moved from another record)"
        )

    def is_current(self, token: str) -> bool:
        """Whether ``token`` is in the current form under the current key
        (then :meth:`reseal` leaves it as it is, without decrypting)."""
        token_id, _ = _parts(token)
        return (
            token.startswith(self.prefix)
            and token_id is not None
            and self.key_id.startswith(token_id)
        )

    def reseal(self, token: str, context: bytes) -> str:
        """``token`` sealed with the current key: unchanged if it already
        is; else opened (with whichever key sealed it) and sealed again,
        which gives the bytes a fresh compaction under this key would."""
        if self.is_current(token):
            return token
        return self.seal(self.open(token, context), context)

    def seal_bytes(self, plain: bytes | None, context: str) -> bytes | None:
        if plain is None:
            return None
        return self.seal(plain, b"value:" + context.encode()).encode("ascii")

    def open_bytes(
        self, sealed: bytes | None, context: str, stream: Sealer | None = None
    ) -> bytes | None:
        """Undo :meth:`seal_bytes`; a value sealed with a stream's data key
        is opened with ``stream`` (its sealer, :meth:`StreamKeys.load`),
        and is ``None`` when that key is gone (the stream was forgotten)."""
        if sealed is None or not is_sealed(sealed):
            return sealed
        token = sealed.decode("ascii")
        if token.startswith(PREFIX_STREAM):
            if stream is None or not stream.is_current(token):
                return None
            return stream.open(token, b"value:" + context.encode())
        return self.open(token, b"value:" + context.encode())

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

    def open_fields(self, data: Any, context: str, stream: Sealer | None = None) -> Any:
        """Undo :meth:`seal_fields` (whatever paths were marked then); a
        field sealed with a stream's data key is opened with ``stream``, or
        is :data:`ERASED` when that key is gone."""

        def walk(node: Any, path: str) -> Any:
            if isinstance(node, dict):
                return {k: walk(v, f"{path}.{k}" if path else k) for k, v in node.items()}
            if isinstance(node, str) and is_sealed(node):
                ctx = f"field:{context}:{path}".encode()
                if node.startswith(PREFIX_STREAM):
                    if stream is None or not stream.is_current(node):
                        return ERASED
                    return walk(orjson.loads(stream.open(node, ctx)), path)
                return walk(orjson.loads(self.open(node, ctx)), path)
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
    """Whether ``value`` is a token (either form)."""
    if value is None:
        return False
    head = value[:7] if isinstance(value, str) else value[:7].decode("latin-1")
    return head in (PREFIX, PREFIX_V1, PREFIX_STREAM)


def _parts(token: str) -> tuple[str | None, str]:
    """(the key id a token names, or ``None`` for v1; its base64 body)."""
    if token.startswith(PREFIX_V1):
        return None, token[len(PREFIX_V1) :]
    token_id, sep, body = token[len(PREFIX) :].partition(":")
    if not token.startswith((PREFIX, PREFIX_STREAM)) or not sep:
        raise AuditKeyError(f"not a sealed value (expected {PREFIX}<key id>:<base64>)")
    return token_id, body


def _b64(body: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(body.encode("ascii"))
    except (ValueError, UnicodeEncodeError, binascii.Error):
        raise AuditKeyError("cannot decrypt: the sealed value is not base64 (altered?)") from None


#: The directory of the per-stream data keys, in the warehouse.
KEYS_DIRECTORY = "keys"


class StreamKeys:
    """The per-stream data keys of a warehouse: one file per stream under
    ``<warehouse>/keys/``, named by a hash of the stream's name, holding the
    key wrapped (sealed) by the audit key. A key file is written once,
    atomically, and only ever replaced whole (a rewrap) or deleted
    (:meth:`forget`); nothing else holds the key, so deleting the file
    destroys it. ``sealer``: the audit key (None: only :meth:`forget`)."""

    def __init__(self, warehouse: Path, sealer: Sealer | None = None) -> None:
        self.directory = Path(warehouse) / KEYS_DIRECTORY
        self.sealer = sealer
        self._cache: dict[str, Sealer | None] = {}

    def path(self, stream: str) -> Path:
        """The file of ``stream``'s key (sharded by the hash's first two
        digits: millions of streams make no giant directory)."""
        name = hashlib.sha256(b"seqkeeper-stream\x00" + stream.encode()).hexdigest()[:40]
        return self.directory / name[:2] / f"{name}.key"

    def _wrap_context(self, stream: str) -> bytes:
        # the stream's name binds the wrapped key to it: a file copied over
        # another stream's does not open as that stream's key
        return b"stream-key:" + stream.encode()

    def _kek(self) -> Sealer:
        if self.sealer is None:
            raise AuditKeyError(f"the stream keys are wrapped by the audit key: set {KEY_ENV}")
        return self.sealer

    def load(self, stream: str) -> Sealer | None:
        """The sealer of ``stream``'s data key; ``None`` when it has none
        (forgotten, or never sealed). A warehouse without the key directory
        at all is an error, not an erasure (a copy that left it behind)."""
        if stream in self._cache:
            return self._cache[stream]
        if not self.directory.is_dir():
            raise AuditKeyError(
                f"values sealed with per-stream keys, but {self.directory} is missing: "
                "copy the warehouse's keys directory with its tables"
            )
        found = self._read(stream)
        self._cache[stream] = found
        return found

    def _read(self, stream: str) -> Sealer | None:
        try:
            doc = orjson.loads(self.path(stream).read_bytes())
        except FileNotFoundError:
            return None
        kek = self._kek()
        key = kek.open(str(doc["wrapped"]), self._wrap_context(stream))
        return kek.for_stream(key)

    def ensure(self, stream: str) -> Sealer:
        """``stream``'s key, drawn and stored first if it has none."""
        return self.ensure_all([stream])[stream]

    def ensure_all(self, streams: Iterable[str]) -> dict[str, Sealer]:
        """Each stream's key, those it has not drawn and stored first. Two
        runs drawing one at once: the first file stays, both use it (a file
        is linked into place, which fails if it exists). The new files'
        contents are made durable by one sync before any is linked, not by
        one fsync each (a run meets thousands of new streams)."""
        out: dict[str, Sealer] = {}
        missing = []
        exists = self.directory.is_dir()
        for stream in dict.fromkeys(streams):
            # (from the file, not the cache: a key forgotten since must not
            # seal new rows)
            found = self._read(stream) if exists else None
            if found is None:
                missing.append(stream)
            else:
                out[stream] = self._cache[stream] = found
        if not missing:
            return out
        kek = self._kek()
        written = []
        for stream in missing:
            # the stream's name is kept with its key, so a rewrap can bind
            # it again; forgetting deletes both
            wrapped = kek.seal(secrets.token_bytes(32), self._wrap_context(stream))
            final = self.path(stream)
            content = orjson.dumps({"stream": stream, "wrapped": wrapped})
            written.append((stream, final, self._write_tmp(final, content, sync=False)))
        os.sync()  # every new file whole on disk before it takes its name
        try:
            for _, final, tmp in written:
                with contextlib.suppress(FileExistsError):
                    os.link(tmp, final)
        finally:
            for _, _, tmp in written:
                tmp.unlink(missing_ok=True)
        for parent in {final.parent for _, final, _ in written}:
            _sync_directory(parent)
        for stream, _, _ in written:
            made = self._read(stream)
            if made is None:  # (forgotten in between: it is forgotten)
                raise AuditKeyError(f"the key of stream {stream!r} was deleted while drawn")
            out[stream] = self._cache[stream] = made
        return out

    def _write_tmp(self, final: Path, content: bytes, sync: bool = True) -> Path:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.{secrets.token_hex(6)}.tmp")
        with open(tmp, "wb") as f:
            f.write(content)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        return tmp

    def forget(self, stream: str) -> bool:
        """Destroy ``stream``'s key (its file): whether it had one. Every
        value sealed with it can no longer be opened; a later row of the
        stream gets a new key."""
        if not self.directory.is_dir():
            return False
        with self._lock():
            path = self.path(stream)
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            _sync_directory(path.parent)
        self._cache.pop(stream, None)
        return True

    def rewrap(self) -> tuple[int, Counter[str], str]:
        """Rewrap every key not under the current audit key with it (key
        rotation; no data is rewritten): (keys moved, keys no given audit
        key opens by the key id they name, the first error)."""
        kek = self._kek()
        moved, left, first = 0, Counter[str](), ""
        if not self.directory.is_dir():
            return moved, left, first
        with self._lock():  # (a forget waits: a rewrap never brings a key back)
            for path in sorted(self.directory.glob("*/*.key")):
                doc = orjson.loads(path.read_bytes())
                wrapped = str(doc["wrapped"])
                if kek.is_current(wrapped):
                    continue
                stream = self._stream_of(path, doc)
                try:
                    key = kek.open(wrapped, self._wrap_context(stream))
                except AuditKeyError as e:
                    left[wrapped[len(PREFIX) :][:TOKEN_ID_LENGTH]] += 1
                    first = first or str(e)
                    continue
                doc["wrapped"] = kek.seal(key, self._wrap_context(stream))
                os.replace(self._write_tmp(path, orjson.dumps(doc)), path)
                _sync_directory(path.parent)
                moved += 1
        self._cache.clear()
        return moved, left, first

    def _stream_of(self, path: Path, doc: dict[str, Any]) -> str:
        stream = str(doc["stream"])
        if self.path(stream) != path:
            raise AuditKeyError(f"{path} does not hold the key of the stream it names")
        return stream

    def _lock(self) -> Any:
        import fcntl

        @contextlib.contextmanager
        def held() -> Iterator[None]:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(self.directory / ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                yield

        return held()


def _sync_directory(directory: Path) -> None:
    """A rename, link or unlink in ``directory`` made durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
