"""The ``commands`` group: the commands topology (command handler, outbox,
reply topics, command tokens)."""

from __future__ import annotations

from dataclasses import dataclass

from seqkeeper.processors.authorization import TokenPolicy
from seqkeeper.processors.return_address import parse_patterns
from seqkeeper.settings.variables import (
    Group,
    SettingError,
    choice,
    env_of,
    positive_integer,
    seconds,
    var,
)

#: The example domain's command handlers (inventory per SKU).
EXAMPLE_HANDLERS = "seqkeeper.processors.inventory:registry"


@dataclass(frozen=True)
class CommandSettings(Group):
    """The commands topology: command handler and outbox."""

    handlers: str = var(
        "SEQKEEPER_HANDLERS",
        "",
        "The command handlers, module:attribute naming a seqkeeper.Registry (the current "
        "directory is importable). The commands topology needs it; the example domain is "
        "seqkeeper.processors.inventory:registry.",
    )
    command_topic: str = var("SEQKEEPER_COMMAND_TOPIC", "commands.in", "Command topic.")
    events_topic: str = var(
        "SEQKEEPER_EVENTS_TOPIC", "commands.events", "Domain events emitted by command handlers."
    )
    command_dlq_topic: str = var(
        "SEQKEEPER_COMMAND_DLQ_TOPIC", "commands.dlq", "Dead letters of the command topic."
    )
    reply_topics: tuple[str, ...] = var(
        "SEQKEEPER_REPLY_TOPICS",
        "*replies",
        "Where a command's replyTo may point: comma-separated topic names, * standing for any "
        "run of characters (shop.replies,tenant-*.replies). Never the worker's own topics, "
        "its app id's G- prefix, nor __*, whatever this says. Others: dead-lettered "
        "invalid-reply-to, not applied.",
        parse_patterns,
    )
    command_attempts: int = var(
        "SEQKEEPER_COMMAND_ATTEMPTS",
        "5",
        "Attempts of a command handler (on transient errors) or ordered processor before the "
        "message is dead-lettered.",
        positive_integer,
    )
    command_retry_delay: float = var(
        "SEQKEEPER_COMMAND_RETRY_DELAY",
        "0.5",
        "First retry delay, doubled per attempt up to 30 s.",
        seconds,
        "s",
    )
    handler_timeout: float = var(
        "SEQKEEPER_HANDLER_TIMEOUT",
        "30",
        "How long a command handler or ordered processor may run before the attempt counts "
        "as failed (and is retried). A sync one runs in a worker thread, which cannot be "
        "stopped: its key waits until it returns.",
        seconds,
        "s",
    )
    receipt_max_age: float = var(
        "SEQKEEPER_RECEIPT_MAX_AGE",
        str(7 * 24 * 3600),
        "How long a dispatched command's receipt (its dedup marker) is kept (7 days).",
        seconds,
        "s",
    )
    command_auth: str = var(
        "SEQKEEPER_COMMAND_AUTH",
        "off",
        "Whether each command must carry a signed token: off, or jwt (an authorization: Bearer "
        "<JWT> record header; its tenant claim must equal tenantId, its scope allow the "
        "commandType, else the command is dead-lettered unauthorized; docs/security.md).",
        choice("off", "jwt"),
    )
    jwt_keys: str = var(
        "SEQKEEPER_JWT_KEYS",
        "",
        "The public keys that verify command tokens, by kid (several during a rotation): a "
        "JWKS file, or a directory of <kid>.pem files. Read at start.",
    )
    jwt_issuer: str = var(
        "SEQKEEPER_JWT_ISSUER", "", "The iss a command token must have. Empty: not checked."
    )
    jwt_audience: str = var(
        "SEQKEEPER_JWT_AUDIENCE",
        "",
        "The aud a command token must name. Empty: a token that names one is refused.",
    )
    jwt_leeway: float = var(
        "SEQKEEPER_JWT_LEEWAY",
        "30",
        "Clock skew allowed on a command token's exp, nbf and iat (exp is required).",
        seconds,
        "s",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        # The keys are read when the command worker starts (state.tokens,
        # load_keys): a mounted directory may be filled after the settings
        # are read. That some are named is checked here.
        if self.command_auth == "jwt" and not self.jwt_keys:
            raise SettingError(
                f"{env_of(CommandSettings, 'command_auth')}=jwt needs "
                f"{env_of(CommandSettings, 'jwt_keys')}: a JWKS file or a directory of "
                "<kid>.pem public keys"
            )

    def topics(self) -> list[str]:
        return [self.command_topic, self.events_topic, self.command_dlq_topic]

    def token_policy(self) -> TokenPolicy:
        """What a command's verified token is checked against
        (:func:`processors.authorization.authorize`)."""
        return TokenPolicy(self.jwt_leeway, self.jwt_issuer or None, self.jwt_audience or None)
