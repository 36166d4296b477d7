"""``seqkeeper acls``: the ACLs a role needs (:mod:`seqkeeper.permissions`)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from seqkeeper.cli.errors import Usage
from seqkeeper.cli.options import AppIdOpt, BrokerOpt, flag, settings_of


def acls(
    broker: BrokerOpt = None,
    app_id: AppIdOpt = None,
    topology: Annotated[Optional[str], flag("topology")] = None,
    role: Annotated[
        str,
        typer.Option(
            help="Whose ACLs: worker (of --topology), command-worker, reader (verify, "
            "inspect), compactor (compact), replayer (replay --topic), client (send, "
            "seqkeeper.client)."
        ),
    ] = "worker",
    principal: Annotated[
        Optional[str],
        typer.Option(
            help="The user to grant (default: the one the broker authorizes with these "
            "settings: SEQKEEPER_SASL_USERNAME, or the client certificate's subject mapped "
            "by SEQKEEPER_SSL_PRINCIPAL_MAPPING_RULES)."
        ),
    ] = None,
    reply_topic: Annotated[
        Optional[list[str]],
        typer.Option(
            help="A replyTo topic the command worker writes, or the client's reply topic "
            "(repeat for each)."
        ),
    ] = None,
    topic: Annotated[
        Optional[str], typer.Option(help="The replayer's topic (replay --topic).")
    ] = None,
    create: Annotated[
        bool,
        typer.Option(help="--no-create: the topics are created by an admin (listed first)."),
    ] = True,
) -> None:
    """Print the kafka-acls.sh commands that grant a worker (or another
    --role) with these settings what it needs, and nothing more."""
    from seqkeeper.permissions import (
        ROLES,
        internal_topics,
        is_anonymous,
        pattern_grants,
        principal_of,
        role_grants,
    )
    from seqkeeper.principal import anonymous_reason

    if role not in ROLES:
        raise typer.BadParameter(f"expected one of {', '.join(ROLES)}", param_hint="--role")
    if role == "replayer" and not topic:
        raise typer.BadParameter("the replayer role needs --topic", param_hint="--topic")
    settings = settings_of(bootstrap=broker, app_id=app_id, topology=topology)
    if principal:
        user = principal
    elif is_anonymous(settings):
        protocol = settings.security.security_protocol
        raise Usage(f"no user to grant: {anonymous_reason(protocol)}; or give --principal")
    else:
        user = principal_of(settings)  # (rules or a certificate it cannot read: SettingError)
    bootstrap = settings.broker.bootstrap or "BOOTSTRAP"
    if role in ("worker", "command-worker"):
        worker = settings.with_overrides(topology="commands") if role != "worker" else settings
        if not create:
            typer.echo("# create these topics as an admin first (the changelog compacted):")
            for name in [*worker.topics(), *internal_topics(worker)]:
                typer.echo(f"#   {name}")
    grants = role_grants(
        settings, role, create=create, reply_topics=reply_topic or (), topic=topic or ""
    )
    for grant in grants:
        typer.echo(grant.command(user, bootstrap))
    if role == "worker" and settings.ordered.processor:
        _, others = pattern_grants(settings.ordered.processor_topics)
        if others:
            typer.echo(
                f"# no ACL expresses the processor topic pattern(s) {', '.join(others)} "
                "(only names and prefixes ending in *): grant Write on their topics by hand"
            )
