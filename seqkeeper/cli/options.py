"""What the commands share: their options (declared with the settings,
:mod:`seqkeeper.settings`), their settings and the first connection."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from seqkeeper.security import ClientSecurity, installed
from seqkeeper.settings import VARS, SettingError, Settings


def flag(name: str, *decls: str, **kw: Any) -> Any:
    """The option of the declared variable ``name`` (seqkeeper.settings):
    its help, environment variable and default come from the declaration."""
    return typer.Option(*decls, help=VARS[name].flag_help(), **kw)


BrokerOpt = Annotated[Optional[str], flag("bootstrap", "--broker", "-b")]
# the commands that use a running cluster (they start no broker): the same
# variable, and no default
ClusterOpt = Annotated[
    Optional[str],
    typer.Option(
        "--broker",
        "-b",
        help=f"Kafka bootstrap servers, host:port[,host:port] \\[env {VARS['bootstrap'].env}; "
        "required].",
    ),
]
AppIdOpt = Annotated[Optional[str], flag("app_id")]
InputTopicOpt = Annotated[Optional[str], flag("input_topic")]
OrderedTopicOpt = Annotated[Optional[str], flag("ordered_topic")]
DedupedTopicOpt = Annotated[Optional[str], flag("deduped_topic")]
DlqTopicOpt = Annotated[Optional[str], flag("dlq_topic")]
# where messages keep their key, sequence and messageId (the worker's and verify's)
KeyFieldOpt = Annotated[Optional[str], flag("key_field")]
SeqFieldOpt = Annotated[Optional[str], flag("seq_field")]
SeqHeaderOpt = Annotated[Optional[str], flag("seq_header")]
MessageIdFieldOpt = Annotated[Optional[str], flag("message_id_field")]
MessageIdHeaderOpt = Annotated[Optional[str], flag("message_id_header")]
CodecOpt = Annotated[Optional[str], flag("codec")]
# how the readers outside the worker read topics (compact, inspect, verify)
IsolationOpt = Annotated[Optional[str], flag("isolation")]


#: The settings of the command running (:func:`settings_of`): whom and
#: where :mod:`seqkeeper.cli.errors` names in a failure's line.
_command_settings: Settings | None = None


def command_settings() -> Settings | None:
    """The settings of the command running, once it read them."""
    return _command_settings


def forget_settings() -> None:
    """A command starts: it has read no settings yet."""
    global _command_settings
    _command_settings = None


def settings_of(
    *, connects: bool = False, needs_broker: bool = False, **overrides: Any
) -> Settings:
    """The environment's settings with the given flags (every command's
    broker and security settings are the worker's: ``KAFKA_BOOTSTRAP_SERVERS``
    and the ``SEQKEEPER_SECURITY_*`` variables, a flag given instead); a bad
    value, in the environment or in a flag, is one line and exit 2, not a
    traceback (:mod:`seqkeeper.cli.errors`). ``connects``: the command connects to the
    broker they name, first through :func:`check_connection`;
    ``needs_broker``: it starts none, so one must be named."""
    global _command_settings
    settings = Settings.of(**overrides)
    # how the command's clients connect (seqkeeper.security): a password
    # file or a TLS file that cannot be read is one line too
    ClientSecurity.of(settings.security).ssl_context()
    _command_settings = settings
    if needs_broker and not settings.broker.bootstrap:
        raise SettingError(
            f"no broker: give --broker or set {VARS['bootstrap'].env} (the workers' cluster)"
        )
    if connects:
        check_connection(settings)
    return settings


def check_connection(settings: Settings) -> None:
    """A failed authentication or an untrusted certificate at the broker
    of ``settings`` ends the command here: one line, exit 1.

    Why a connection of its own, before the command's: aiokafka logs the
    cause of a failed connection (``Unable connect to ...``) and raises only
    "Unable to bootstrap". Quieting its loggers for the whole command would
    hide what it says in normal running (a broker lost during a 15-minute
    demo); dropping only the security records for the whole command loses
    the cause whenever a command catches the exception itself (bench's
    sections and chaos's scenarios each report theirs and go on, failing
    one by one). So the first connection is this one, made as the worker's
    first attempt is (:func:`seqkeeper.wait.first_connection`: aiokafka's
    lines of it are kept from the output); a security failure is our one
    line, before Spark or any worker starts. Once it succeeded, aiokafka
    speaks as usual: a security failure later (a password changed mid-run)
    is news, printed by aiokafka and named again by :mod:`seqkeeper.cli.errors`.

    Any other failure is left to the command (it waits for the broker or
    reports it its own way). No broker (the command starts its own) or
    PLAINTEXT (nothing to fail): no check, and no extra connection."""
    import asyncio

    from seqkeeper.wait import first_connection

    bootstrap = settings.broker.bootstrap
    security = ClientSecurity.of(settings.security)
    if not bootstrap or security.protocol == "PLAINTEXT":
        return
    with installed(security):  # the environment's, unless a caller's settings differ
        asyncio.run(first_connection(bootstrap))  # (a SecurityFailure: one line, exit 1)


def audit_sealer() -> Any:
    """The audit key from the environment (a bad one: one line, exit 2)."""
    from seqkeeper.spark_sink.crypto import Sealer

    return Sealer.from_env()
