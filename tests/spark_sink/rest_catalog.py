"""An Iceberg REST catalog for tests: the REST protocol's HTTP endpoints
that pyiceberg's ``RestCatalog`` uses, served from this process over a SQL
catalog of its own (a SQLite file apart from the warehouse's).

No REST catalog server installs from PyPI (Polaris, Gravitino, Nessie and
the reference image are JVM services), so the client side is tested
against this one: ``SEQKEEPER_ICEBERG_CATALOG`` pointed at it takes the
code path a user's catalog takes (config, namespaces, staged creates,
commits with requirements, 409 on a conflict).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyiceberg.catalog.rest import CreateTableRequest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import CommitTableRequest

TABLE = re.compile(r"^/v1/namespaces/([^/]+)/tables/([^/]+)$")
TABLES = re.compile(r"^/v1/namespaces/([^/]+)/tables$")
NAMESPACE = re.compile(r"^/v1/namespaces/([^/]+)$")


class _Named:
    """What ``SqlCatalog.commit_table`` reads of the table it is given."""

    def __init__(self, identifier: tuple[str, ...]) -> None:
        self.identifier = identifier

    def name(self) -> tuple[str, ...]:
        return self.identifier


def _table(metadata_location: str | None, metadata: Any) -> bytes:
    return json.dumps(
        {
            "metadata-location": metadata_location,
            "metadata": json.loads(metadata.model_dump_json()),
            "config": {},
        }
    ).encode()


def handler(sql: SqlCatalog, requests: list[str]) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()  # (one request at a time: SQLite, and a commit's read-then-swap)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, code: int, body: bytes = b"") -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, code: int, exc: Exception) -> None:
            body = {"error": {"message": str(exc), "type": type(exc).__name__, "code": code}}
            self.reply(code, json.dumps(body).encode())

        def body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def route(self, method: str) -> None:
            path = urlparse(self.path).path
            requests.append(f"{method} {path}")
            with lock:
                try:
                    self.serve(method, path)
                except (NoSuchTableError, NoSuchNamespaceError) as e:
                    self.error(404, e)
                except (
                    CommitFailedException,
                    TableAlreadyExistsError,
                    NamespaceAlreadyExistsError,
                ) as e:
                    self.error(409, e)

        def serve(self, method: str, path: str) -> None:
            if path == "/v1/config" and method == "GET":
                return self.reply(200, b'{"defaults": {}, "overrides": {}}')
            if path == "/v1/namespaces" and method == "POST":
                wanted = json.loads(self.body())
                sql.create_namespace(tuple(wanted["namespace"]), wanted.get("properties") or {})
                return self.reply(200, json.dumps(wanted).encode())
            if found := NAMESPACE.match(path):
                ns = unquote(found[1])
                properties = sql.load_namespace_properties(ns)
                if method == "HEAD":
                    return self.reply(204)
                return self.reply(
                    200, json.dumps({"namespace": [ns], "properties": properties}).encode()
                )
            if (found := TABLES.match(path)) and method == "POST":
                ns = unquote(found[1])
                wanted = json.loads(self.body())
                for absent in ("location", "partition-spec", "write-order"):  # (left out when None)
                    wanted.setdefault(absent, None)
                create = CreateTableRequest.model_validate(wanted)
                args = {
                    "identifier": (ns, create.name),
                    "schema": create.table_schema,
                    "location": create.location,
                    "properties": create.properties,
                }
                if create.partition_spec is not None:
                    args["partition_spec"] = create.partition_spec
                if create.write_order is not None:
                    args["sort_order"] = create.write_order
                if create.stage_create:
                    if sql.table_exists((ns, create.name)):
                        raise TableAlreadyExistsError(f"{ns}.{create.name}")
                    staged = sql._create_staged_table(**args)
                    return self.reply(200, _table(staged.metadata_location, staged.metadata))
                table = sql.create_table(**args)
                return self.reply(200, _table(table.metadata_location, table.metadata))
            if found := TABLE.match(path):
                ident = (unquote(found[1]), unquote(found[2]))
                if method == "POST":
                    commit = CommitTableRequest.model_validate_json(self.body())
                    done = sql.commit_table(_Named(ident), commit.requirements, commit.updates)  # type: ignore[arg-type]
                    return self.reply(200, _table(done.metadata_location, done.metadata))
                table = sql.load_table(ident)
                if method == "HEAD":
                    return self.reply(204)
                return self.reply(200, _table(table.metadata_location, table.metadata))
            return self.reply(
                404, b'{"error": {"message": "no such route", "type": "NotFound", "code": 404}}'
            )

        def do_GET(self) -> None:
            self.route("GET")

        def do_HEAD(self) -> None:
            self.route("HEAD")

        def do_POST(self) -> None:
            self.route("POST")

    return Handler


@contextmanager
def rest_catalog(state: Path, warehouse: Path) -> Iterator[tuple[str, list[str]]]:
    """A REST catalog on a free port of 127.0.0.1, its tables under
    ``warehouse``, its own state under ``state``: (its URL, the requests
    it served as ``METHOD /path``)."""
    state.mkdir(parents=True, exist_ok=True)
    warehouse.mkdir(parents=True, exist_ok=True)
    sql = SqlCatalog(
        "rest", uri=f"sqlite:///{state / 'rest.db'}", warehouse=warehouse.resolve().as_uri()
    )
    requests: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(sql, requests))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", requests
    finally:
        server.shutdown()
        server.server_close()
