"""``seqkeeper send`` (a command to the command worker, its reply) and
``seqkeeper inspect`` (commands looked up in the Message Store)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from seqkeeper.cli.errors import Failed, NotFound, exit_with
from seqkeeper.cli.options import (
    AppIdOpt,
    BrokerOpt,
    ClusterOpt,
    IsolationOpt,
    check_connection,
    flag,
    settings_of,
)


def send(
    command_type: Annotated[str, typer.Option("--type", help="The command's commandType.")],
    key: Annotated[str, typer.Option(help="The entity: partitionKey and Kafka key.")],
    payload: Annotated[str, typer.Option(help="The command's payload, as JSON.")] = "{}",
    tenant: Annotated[str, typer.Option(help="The command's tenantId.")] = "default",
    wait: Annotated[
        float,
        typer.Option(min=0, help="Seconds to wait for the reply; 0: send, ask for none."),
    ] = 30.0,
    broker: BrokerOpt = None,
    command_topic: Annotated[Optional[str], flag("command_topic")] = None,
    reply_topic: Annotated[
        str, typer.Option(help="Where the reply is sent (created when missing).")
    ] = "seqkeeper-send.replies",
    schema_version: Annotated[int, typer.Option(min=1, help="The schemaVersion.")] = 1,
    expected_version: Annotated[
        Optional[int], typer.Option(help="Apply only at this entity version.")
    ] = None,
    signing_key: Annotated[
        Optional[Path],
        typer.Option(
            help="Sign the command: a PEM private key (EC, RSA or Ed25519) whose public key "
            "the workers trust (SEQKEEPER_COMMAND_AUTH=jwt); needs --key-id."
        ),
    ] = None,
    key_id: Annotated[
        Optional[str], typer.Option(help="The signing key's kid, as the workers know it.")
    ] = None,
) -> None:
    """Send a command to the command worker and print its reply as JSON:
    exit 0 on a success reply, 1 on a failure reply, 3 when none came in
    time (2: a usage error)."""
    import asyncio
    import json

    from aiokafka.errors import KafkaError

    from seqkeeper.client import CommandClient
    from seqkeeper.state.tokens import TokenSigner

    try:
        body = json.loads(payload)
    except ValueError as e:
        raise typer.BadParameter(f"not JSON: {e}", param_hint="--payload") from None
    settings = settings_of(bootstrap=broker, command_topic=command_topic, needs_broker=True)
    signer = None
    if (signing_key is None) != (key_id is None):
        raise typer.BadParameter("give both or neither", param_hint="--signing-key, --key-id")
    if signing_key is not None and key_id is not None:
        # the token names the issuer and audience the workers check (a key
        # it cannot use, BadKey: one line, exit 2)
        signer = TokenSigner.from_file(
            signing_key,
            key_id,
            issuer=settings.commands.jwt_issuer,
            audience=settings.commands.jwt_audience,
        )
    check_connection(settings)  # after the key: a key it cannot use is said before any broker
    options: dict[str, Any] = {"tenant": tenant, "schema_version": schema_version}
    if expected_version is not None:
        options["expected_version"] = expected_version

    async def run() -> int:
        client = CommandClient(
            settings.broker.bootstrap,
            command_topic=settings.commands.command_topic,
            client_id="seqkeeper-send",
            reply_topic=reply_topic,
            signer=signer,
        )
        try:
            await asyncio.wait_for(client.start(), 30)
        except (TimeoutError, OSError, KafkaError) as e:
            await client.stop()
            raise Failed(
                f"the broker at {settings.broker.bootstrap} does not answer ({e!r})"
            ) from None
        try:
            if not wait:
                message_id = await client.send(command_type, key, body, **options)
                typer.echo(json.dumps({"messageId": message_id}))
                return 0
            # (none in time, ReplyTimeout: one line, exit 3)
            reply = await client.request(command_type, key, body, timeout=wait, **options)
            typer.echo(json.dumps(reply.to_json()))
            return 0 if reply.success else 1
        finally:
            await client.stop()

    exit_with(asyncio.run(run()))


def inspect(
    broker: ClusterOpt = None,
    message_id: Annotated[Optional[str], typer.Option(help="A command's messageId.")] = None,
    correlation_id: Annotated[
        Optional[str], typer.Option(help="Every command of a correlationId.")
    ] = None,
    tenant: Annotated[
        Optional[str], typer.Option(help="Only this tenant's commands (default: every tenant's).")
    ] = None,
    app_id: AppIdOpt = None,
    web_port: Annotated[
        Optional[int],
        typer.Option(
            help="The command worker's web port \\[env SEQKEEPER_WEB_PORT]: a command "
            "named by --message-id and --tenant is asked of the worker first; "
            "0, or no answer: the changelog is read."
        ),
    ] = None,
    web_host: Annotated[
        Optional[str],
        typer.Option(help="The command worker's web host \\[env SEQKEEPER_WEB_HOST]."),
    ] = None,
    isolation: IsolationOpt = None,
) -> None:
    """Look commands up in the Message Store: status, timestamps, error,
    reply, and the entity's state and outbox."""
    import asyncio

    from rich.console import Console

    from seqkeeper.inspect import ask_worker, changelog_topic, load, lookup, worker_url

    if not message_id and not correlation_id:
        raise typer.BadParameter("give --message-id or --correlation-id")
    settings = settings_of(
        needs_broker=True,
        bootstrap=broker,
        app_id=app_id,
        web_port=web_port,
        web_host=web_host,
        isolation=isolation,
    )

    def say(line: str) -> None:
        typer.echo(f"({line}; reading the changelog)", err=True)

    found = None
    if message_id and tenant and not correlation_id:
        found = ask_worker(settings, message_id, tenant, say=say)  # (the token's file: exit 2)
        if found is not None:
            typer.echo(f"(asked the worker at {worker_url(settings)})", err=True)
    if found is None:
        from seqkeeper.access import check_topics

        check_connection(settings)
        # Read on the changelog; missing: no command worker of this app id here (exit 2)
        asyncio.run(check_topics(settings, reads=[changelog_topic(settings)]))
        store = asyncio.run(load(settings))
        found = lookup(store, message_id, correlation_id, tenant)
    if not found:
        raise NotFound("no such command in the Message Store")
    import orjson

    Console().print_json(orjson.dumps(found).decode())
