"""The ``spark`` group: the Spark side (compaction to Parquet, the audit
log and its keys, replay, the Iceberg catalog)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seqkeeper.processors.audit_retention import AuditRetention
from seqkeeper.settings.variables import Group, SettingError, env_of, names, var


@dataclass(frozen=True)
class SparkSettings(Group):
    """The Spark side: compaction to Parquet, audit log, replay."""

    audit_key: str = var(
        "SEQKEEPER_AUDIT_KEY",
        "",
        "Key that encrypts the sensitive fields in the audit log: 32 bytes, url-safe "
        "base64 (seqkeeper keygen). Empty: nothing is encrypted.",
        secret=True,
    )
    audit_key_file: str = var(
        "SEQKEEPER_AUDIT_KEY_FILE",
        "",
        "A file holding the audit key instead (a mounted secret; surrounding whitespace "
        "ignored). Set this or SEQKEEPER_AUDIT_KEY, not both.",
    )
    audit_decrypt_keys: tuple[str, ...] = var(
        "SEQKEEPER_AUDIT_DECRYPT_KEYS",
        "",
        "Comma-separated old audit keys that open data but never seal it (key rotation, "
        "docs/security.md).",
        names,
        secret=True,
    )
    audit_decrypt_keys_file: str = var(
        "SEQKEEPER_AUDIT_DECRYPT_KEYS_FILE",
        "",
        "A file holding the decrypt-only keys instead (one per line, or comma-separated).",
    )
    sensitive_fields: tuple[str, ...] = var(
        "SEQKEEPER_SENSITIVE_FIELDS",
        "",
        "Comma-separated value fields that the audit log stores encrypted (needs the key).",
        names,
    )

    audit_retention: AuditRetention = var(
        "SEQKEEPER_AUDIT_RETENTION",
        "",
        "How long compact keeps each category's audit rows, e.g. orders=90d,payments=7y,*=inf "
        "(units d, w, y; * the others; whole days; docs/spark.md). Empty: every row is kept.",
        AuditRetention.parse,
    )

    iceberg_catalog: str = var(
        "SEQKEEPER_ICEBERG_CATALOG",
        "",
        "URL of an Iceberg REST catalog for the warehouse's tables (docs/spark.md). Empty: "
        "an embedded SQL catalog on a SQLite file in the warehouse (catalog.db).",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        # a key given both inline and as a file is ambiguous: refused here,
        # when the settings are built
        for inline, file in (
            ("audit_key", "audit_key_file"),
            ("audit_decrypt_keys", "audit_decrypt_keys_file"),
        ):
            if getattr(self, inline) and getattr(self, file):
                raise SettingError(
                    f"both {env_of(SparkSettings, inline)} and {env_of(SparkSettings, file)} "
                    "are set: unset one of them"
                )

    # The key files are read when a key is needed, not when the settings are
    # built: they are mounted secrets, which may be written after the
    # settings are read, and most commands (the worker's among them) never
    # need a key.

    def audit_key_text(self) -> str:
        """The current audit key's text, from the variable or its file
        (empty: no key). Never echoes the key: errors name the variables
        and the file's path only."""
        return _secret_text(self.audit_key, self.audit_key_file, "audit_key_file")

    def audit_decrypt_key_texts(self) -> tuple[str, ...]:
        """The decrypt-only keys' texts, from the variable or its file."""
        if not self.audit_decrypt_keys_file:
            return self.audit_decrypt_keys
        text = _secret_text("", self.audit_decrypt_keys_file, "audit_decrypt_keys_file")
        return names(text.replace("\n", ","))


def _secret_text(value: str, path: str, file_name: str) -> str:
    """A secret given either inline (``value``) or as the file ``path``
    (the variable ``file_name`` of :class:`SparkSettings`; never both: see
    its ``__post_init__``); the file's surrounding whitespace (a trailing
    newline) is dropped."""
    file_env = env_of(SparkSettings, file_name)
    if not path:
        return value
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise SettingError(
            f"{file_env}={path!r}: cannot read it ({e.strerror or e}): mount the file there "
            f"or unset {file_env}"
        ) from None
    except UnicodeDecodeError:
        raise SettingError(f"{file_env}={path!r}: not a text file") from None
    if not text:
        raise SettingError(f"{file_env}={path!r}: the file is empty")
    return text
