"""``seqkeeper store``: the Message Store read like message-db, a stream
forgotten, older snapshots expired; ``seqkeeper keygen``, its audit key."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from seqkeeper.cli.errors import Commands, Failed, NotFound, Usage, exit_with
from seqkeeper.cli.options import audit_sealer


def keygen() -> None:
    """Print a new audit encryption key (for SEQKEEPER_AUDIT_KEY)."""
    from seqkeeper.spark_sink.crypto import new_key

    typer.echo(new_key())


store_app = Commands(
    help="Read the audit log like message-db: streams, categories, versions; forget a "
    "stream's sensitive data; expire older snapshots.",
    no_args_is_help=True,
)
WarehouseOpt = Annotated[Path, typer.Option(help="Where compact wrote.")]
AsOfOpt = Annotated[
    Optional[str],
    typer.Option(help="Read the store as it was: a run number (as compact printed) or a UTC time."),
]


def _store(warehouse: Path, as_of: str | None = None) -> Any:
    from seqkeeper.spark_sink.store import MessageStore
    from seqkeeper.spark_sink.tables import LegacyWarehouse

    try:
        return MessageStore(warehouse, audit_sealer(), as_of)
    except FileNotFoundError as e:
        raise Failed(str(e)) from None
    except (ValueError, LegacyWarehouse) as e:
        raise Usage(str(e)) from None


def _read(call: Any) -> Any:
    """``call()``, with a wrong argument or a missing key as a clear error."""
    try:
        return call()
    except ValueError as e:  # includes AuditKeyError
        raise Usage(str(e)) from None


def _print(messages: list[Any]) -> None:
    import orjson

    for m in messages:
        typer.echo(orjson.dumps(m.to_json()).decode())


@store_app.command("stream")
def store_stream(
    name: Annotated[str, typer.Argument(help="Stream name, <category>-<id>.")],
    position: Annotated[int, typer.Option(help="From this stream position.")] = 0,
    batch_size: Annotated[int, typer.Option(help="At most this many.")] = 1000,
    warehouse: WarehouseOpt = Path("warehouse"),
    as_of: AsOfOpt = None,
) -> None:
    """A stream's messages from a position (get_stream_messages), JSON lines."""
    store = _store(warehouse, as_of)
    _print(_read(lambda: store.stream(name, position, batch_size)))


@store_app.command("category")
def store_category(
    name: Annotated[str, typer.Argument(help="Category (a topic name, '-' as '_').")],
    position: Annotated[int, typer.Option(help="From this global position.")] = 1,
    batch_size: Annotated[int, typer.Option(help="At most this many.")] = 1000,
    correlation: Annotated[
        Optional[str], typer.Option(help="Category of metadata.correlationStreamName.")
    ] = None,
    correlation_id: Annotated[Optional[str], typer.Option(help="metadata.correlationId.")] = None,
    member: Annotated[Optional[int], typer.Option(help="Consumer group member.")] = None,
    size: Annotated[Optional[int], typer.Option(help="Consumer group size.")] = None,
    warehouse: WarehouseOpt = Path("warehouse"),
    as_of: AsOfOpt = None,
) -> None:
    """A category's messages from a global position (get_category_messages)."""
    store = _store(warehouse, as_of)
    _print(
        _read(
            lambda: store.category(
                name, position, batch_size, correlation, member, size, correlation_id
            )
        )
    )


@store_app.command("last")
def store_last(
    name: Annotated[str, typer.Argument(help="Stream name.")],
    message_type: Annotated[Optional[str], typer.Option("--type", help="Of this type.")] = None,
    warehouse: WarehouseOpt = Path("warehouse"),
    as_of: AsOfOpt = None,
) -> None:
    """A stream's last message (get_last_stream_message); exit 1 if none."""
    store = _store(warehouse, as_of)
    found = _read(lambda: store.last(name, message_type))
    if found is None:
        exit_with(1)
    _print([found])


@store_app.command("version")
def store_version(
    name: Annotated[str, typer.Argument(help="Stream name.")],
    warehouse: WarehouseOpt = Path("warehouse"),
    as_of: AsOfOpt = None,
) -> None:
    """A stream's version: its last position (stream_version); exit 1 if none."""
    version = _store(warehouse, as_of).version(name)
    if version is None:
        raise NotFound("no such stream")
    typer.echo(version)


@store_app.command("forget")
def store_forget(
    name: Annotated[str, typer.Argument(help="Stream name, <category>-<id>.")],
    yes: Annotated[bool, typer.Option("--yes", help="Really destroy the stream's key.")] = False,
    warehouse: WarehouseOpt = Path("warehouse"),
) -> None:
    """Erase a stream's sensitive data: destroy its key, so its sealed fields,
    values and headers can never be opened again (docs/security.md). Other
    streams and all data files are left as they are."""
    from seqkeeper.spark_sink.crypto import ERASED, StreamKeys

    if not yes:
        raise Usage(
            f"forget destroys the key of stream {name!r} for good (its sealed fields "
            "can never be read again, by anyone): add --yes"
        )
    keys = StreamKeys(warehouse)
    if not keys.forget(name):
        raise Failed(
            f"no key for stream {name!r} under {warehouse}: nothing to forget (already "
            "forgotten, no sealed row, or another stream name or warehouse)"
        )
    typer.echo(
        f"forgot stream {name}: its key is destroyed; its sealed fields read {ERASED!r} from "
        "now on (a later message of the stream gets a new key). The Kafka topics keep their "
        "records until their own retention"
    )


@store_app.command("expire")
def store_expire(
    keep: Annotated[int, typer.Option(help="Keep the newest this many snapshots.", min=1)] = 1,
    yes: Annotated[bool, typer.Option("--yes", help="Really expire them.")] = False,
    warehouse: WarehouseOpt = Path("warehouse"),
) -> None:
    """Expire the tables' older snapshots and delete the data files only they
    name, so rows deleted by retention (and values moved by a reseal) leave
    the disk; --as-of can then no longer read the expired runs."""
    from seqkeeper.spark_sink.audit import expire_store

    if not yes:
        raise Usage(
            f"expire removes all but the newest {keep} snapshots of each table "
            "(--as-of cannot read them afterwards) and deletes the files only they name: "
            "add --yes"
        )
    done = expire_store(warehouse, keep)  # (a LegacyWarehouse: one line, exit 2)
    if not done:
        raise Failed(f"no tables under {warehouse}: run seqkeeper compact first")
    typer.echo(
        "expired: "
        + ", ".join(
            f"{name} {e.snapshots} snapshots, {e.files} files deleted"
            for name, e in sorted(done.items())
        )
    )
