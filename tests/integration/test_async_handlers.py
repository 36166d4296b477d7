"""A user's ``async def`` command handlers, from a project outside this
package, run by the installed ``seqkeeper worker --topology commands
--handlers …``: each awaits an HTTP call to another service (a stub on
127.0.0.1). Asked through ``seqkeeper.client``, a command gets the reply its
handler's answer gives, a business refusal is a failure reply, and a call
that outlasts ``SEQKEEPER_HANDLER_TIMEOUT`` is retried, then dead-lettered
and answered with a failure naming the timeout."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from seqkeeper.client import CommandClient, SyncCommandClient
from seqkeeper.topics import create_topics, read_topic
from seqkeeper.worker import WorkerProcess

pytestmark = pytest.mark.integration

PRICES = {"apple": 3, "pear": 5}
#: How long the stub takes on /slow: past the handler timeout below.
SLOW = 5.0
TIMEOUT = 0.5

#: The project's handlers: the price comes from the pricing service.
HANDLERS = """
import aiohttp

from seqkeeper import Command, DomainError, Event, Registry

PRICING = "http://127.0.0.1:@PORT@"
registry = Registry()


async def _get(path: str):
    async with aiohttp.ClientSession() as session:
        async with session.get(PRICING + path) as response:
            if response.status == 404:
                return None
            response.raise_for_status()
            return await response.json()


@registry.register("Buy")
async def buy(state, command: Command):
    quote = await _get("/price/" + command.partition_key)
    if quote is None:
        raise DomainError("no price for " + command.partition_key)
    state = state or {"bought": 0, "spent": 0}
    quantity = command.payload["quantity"]
    new = {
        "bought": state["bought"] + quantity,
        "spent": state["spent"] + quantity * quote["price"],
    }
    return new, [Event("Bought", {"quantity": quantity, "price": quote["price"]})]


@registry.register("Appraise")
async def appraise(state, command: Command):
    await _get("/slow")
    return state, [Event("Appraised")]
"""


class Pricing(BaseHTTPRequestHandler):
    """The stub pricing service."""

    calls: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.calls.append(self.path)
        if self.path == "/slow":
            time.sleep(SLOW)
            body: object = {"appraisal": 1}
        elif self.path.removeprefix("/price/") in PRICES:
            body = {"price": PRICES[self.path.removeprefix("/price/")]}
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the handler gave up waiting

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def pricing() -> Iterator[tuple[int, list[str]]]:
    calls: list[str] = []
    handler = type("Stub", (Pricing,), {"calls": calls})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], calls
    finally:
        server.shutdown()
        server.server_close()


def write_project(root: Path, port: int) -> Path:
    package = root / "shop"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "handlers.py").write_text(HANDLERS.replace("@PORT@", str(port)))
    return root


def test_async_handlers_call_another_service_and_time_out(
    make_settings, names, tmp_path: Path, pricing: tuple[int, list[str]]
) -> None:
    port, calls = pricing
    tag = names["app_id"]
    settings = make_settings(
        topology="commands",
        handlers="shop.handlers:registry",
        handler_timeout=TIMEOUT,
        command_attempts=2,
        command_retry_delay=0.2,
    )
    bootstrap = settings.broker.bootstrap
    topic = settings.commands.command_topic
    asyncio.run(create_topics(bootstrap, settings.topics(), 2))
    project = write_project(tmp_path / "project", port)
    worker = WorkerProcess(settings, tmp_path / "worker.log", cwd=project).start()
    try:
        worker.wait_ready()

        async def shop() -> None:
            async with CommandClient(
                bootstrap, command_topic=topic, client_id=f"shop-{tag}", tenant="shop"
            ) as client:
                bought = await asyncio.gather(
                    *(
                        client.request("Buy", "apple", {"quantity": n}, timeout=60)
                        for n in (1, 2, 3)
                    ),
                    client.request("Buy", "pear", {"quantity": 4}, timeout=60),
                )
                assert all(r.success for r in bought), [r.message for r in bought]
                apples = bought[:3]
                assert sorted(r.version or 0 for r in apples) == [1, 2, 3]
                last = max(apples, key=lambda r: r.version or 0)
                assert last.data == {"bought": 6, "spent": 18}  # each applied once
                assert bought[3].data == {"bought": 4, "spent": 20} and bought[3].version == 1
                refused = await client.request("Buy", "plum", {"quantity": 1}, timeout=60)
                assert not refused.success and refused.message == "no price for plum"

        asyncio.run(shop())
        with SyncCommandClient(
            bootstrap, command_topic=topic, client_id=f"appraiser-{tag}", tenant="shop"
        ) as sync:
            started = time.monotonic()
            late = sync.request("Appraise", "apple", {}, timeout=60)
            took = time.monotonic() - started
        assert not late.success
        assert late.message == (
            f"handler failed 2 times; last error: builtins.TimeoutError: "
            f"handler ran past {TIMEOUT:g} s"
        )
        assert took < SLOW, "the runs were not stopped at the timeout"
        dead = asyncio.run(read_topic(bootstrap, settings.commands.command_dlq_topic))
        assert [r.header("seqkeeper.reason") for r in dead] == [b"handler-failed"]
        assert dead[0].header("kafka_dlt-exception-fqcn") == b"builtins.TimeoutError"
        assert dead[0].header("seqkeeper.attempts") == b"2"
        events = asyncio.run(read_topic(bootstrap, settings.commands.events_topic))
        kinds = sorted(json.loads(r.value or b"{}")["type"] for r in events)
        assert kinds == ["Bought"] * 4  # nothing from the refused or the timed-out runs
    except BaseException:
        worker.dump()  # its tasks in its log: where a missing reply was stuck
        print(worker.log()[-12000:])  # (shown with the failure)
        raise
    finally:
        assert worker.stop() == 0, worker.log()[-6000:]
    assert calls.count("/slow") == 2  # one run per attempt
    assert {c for c in calls if c.startswith("/price/")} == {
        "/price/apple",
        "/price/pear",
        "/price/plum",
    }
