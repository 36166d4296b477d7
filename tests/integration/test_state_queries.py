"""State queries over HTTP with two workers in one group: asked for any
key, worker A answers for the partitions it owns and redirects to B (307,
B's address from the group assignment) for the others, and following the
redirect gives the state; for the ordered and the command topology. With a
bearer token set, only requests carrying it are answered, redirects and
``seqkeeper inspect`` included; with state queries off, none are, while
/ready, /health and /metrics are."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest
from click.testing import Result
from typer.testing import CliRunner

from seqkeeper.broker import free_port
from seqkeeper.cli import app
from seqkeeper.demo import publish
from seqkeeper.settings import Settings
from seqkeeper.topics import create_topics
from seqkeeper.worker import WorkerProcess

pytestmark = pytest.mark.integration

KEYS = [f"key-{i}" for i in range(12)]  # over every one of 4 partitions


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def get(
    url: str, follow: bool = False, token: str | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, JSON body and headers of ``GET url`` (redirects not followed
    unless ``follow``), with ``Authorization: Bearer <token>`` if given
    (urllib sends it again when it follows a redirect)."""
    opener = urllib.request.build_opener() if follow else urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


def two_workers(base: Settings, tmp_path: Path) -> tuple[WorkerProcess, WorkerProcess]:
    a, b = (
        WorkerProcess(
            base.with_overrides(data_dir=tmp_path / name, web_port=free_port()),
            tmp_path / f"{name}.log",
        )
        for name in ("a", "b")
    )
    return a, b


def url(worker: WorkerProcess) -> str:
    return f"http://127.0.0.1:{worker.settings.runtime.web_port}"


def settled(
    a: WorkerProcess,
    b: WorkerProcess,
    path: Callable[[str], str],
    done: Callable[[dict[str, Any]], bool],
    timeout: float = 120,
    token: str | None = None,
) -> dict[str, tuple[int, dict[str, Any], dict[str, str]]]:
    """A's answers for every key once each is its own state (200) or a
    redirect to B, both occur, and every state is ``done``."""
    deadline = time.monotonic() + timeout
    while True:
        answers = {key: get(url(a) + path(key), token=token) for key in KEYS}
        statuses = {status for status, _, _ in answers.values()}
        ready = statuses == {200, 307} and all(
            done(body if status == 200 else get(url(a) + path(key), True, token)[1])
            for key, (status, body, _) in answers.items()
        )
        if ready:
            return answers
        for worker in (a, b):
            worker.check_alive()
        assert time.monotonic() < deadline, f"never settled: {answers}"
        time.sleep(1.0)


def check_redirects(
    a: WorkerProcess,
    b: WorkerProcess,
    answers: dict[str, tuple[int, dict[str, Any], dict[str, str]]],
    path: Callable[[str], str],
) -> dict[str, dict[str, Any]]:
    """Every redirect names B and leads to B's answer: the state, by key."""
    states = {}
    for key, (status, body, headers) in answers.items():
        if status == 307:
            assert body["owner"] == url(b), body
            assert headers["Location"] == url(b) + path(key)
            status, body, _ = get(headers["Location"])  # B answers itself
            assert status == 200, body
            followed = get(url(a) + path(key), follow=True)
            assert followed[:2] == (200, body)
        states[key] = body
    return states


def test_the_ordered_state_of_every_key_from_either_worker(make_settings, tmp_path) -> None:
    base = make_settings(partitions=4)
    asyncio.run(create_topics(base.broker.bootstrap, base.topics(), 4))
    records = []
    for key in KEYS:  # 1, 2, 2 again, 4: 3 is missing, 4 waits
        for seq in (1, 2, 2, 4):
            value = {"messageId": f"{key}:{seq}", "seq": seq, "type": "t"}
            records.append((key.encode(), orjson.dumps(value)))
    asyncio.run(publish(base.broker.bootstrap, base.ordered.input_topic, records))
    a, b = two_workers(base, tmp_path)
    try:
        a.start().wait_ready()
        b.start().wait_ready()

        def path(key: str) -> str:
            return f"/state/{quote(key)}"

        answers = settled(a, b, path, lambda state: state.get("next_expected") == 3)
        states = check_redirects(a, b, answers, path)
        partitions = {state["partition"] for state in states.values()}
        assert partitions == {0, 1, 2, 3}
        for key, state in states.items():
            assert state["key"] == key
            assert (state["next_expected"], state["buffered"], state["skipped"]) == (3, 1, [])
            assert state["seen"]["count"] == 3  # the copy of 2 was not remembered twice
            assert "processor" not in state
        status, body, _ = get(url(a) + path("never-sent"), follow=True)
        assert status == 404 and body["error"] == "not found"
    finally:
        a.stop()
        b.stop()


def command(sku: str, mid: str, quantity: int) -> tuple[bytes, bytes]:
    doc = {
        "messageId": mid,
        "commandType": "AddStock",
        "schemaVersion": 1,
        "correlationId": f"c-{mid}",
        "partitionKey": sku,
        "tenantId": "t1",
        "payload": {"quantity": quantity},
    }
    return sku.encode(), orjson.dumps(doc)


def test_entities_and_commands_from_either_worker(make_settings, tmp_path) -> None:
    base = make_settings(
        topology="commands", partitions=4, handlers="seqkeeper.processors.inventory:registry"
    )
    asyncio.run(create_topics(base.broker.bootstrap, base.topics(), 4))
    records = [command(key, f"add-{key}", n + 1) for n, key in enumerate(KEYS)]
    asyncio.run(publish(base.broker.bootstrap, base.commands.command_topic, records))
    a, b = two_workers(base, tmp_path)
    try:
        a.start().wait_ready()
        b.start().wait_ready()

        def entity_path(key: str) -> str:
            return f"/entities/t1/{quote(key)}"

        answers = settled(a, b, entity_path, lambda e: e.get("version") == 1 and not e["outbox"])
        entities = check_redirects(a, b, answers, entity_path)
        for n, key in enumerate(KEYS):
            assert entities[key]["id"] == key and entities[key]["tenant"] == "t1"
            assert entities[key]["state"]["available"] == n + 1

        # with its partitionKey a command is routed as its entity is
        def keyed(key: str) -> str:
            return f"/commands/add-{quote(key)}?tenant=t1&key={quote(key)}"

        found = check_redirects(a, b, {k: get(url(a) + keyed(k)) for k in KEYS}, keyed)
        for key in KEYS:
            receipt = found[key]["command"]
            assert (receipt["message_id"], receipt["status"]) == (f"add-{key}", "COMPLETED")
            assert receipt["attempts"] == 1 and receipt["dispatched"]
            assert found[key]["entity"]["version"] == 1
            assert found[key]["partition"] == entities[key]["partition"]

        # without it, A searches its partitions, then B searches the rest
        for key in KEYS:
            status, body, headers = get(url(a) + f"/commands/add-{quote(key)}?tenant=t1")
            if answers[key][0] == 200:  # the entity's partition is A's
                assert (status, body) == (200, found[key])
            else:
                assert status == 307 and headers["Location"].startswith(url(b) + "/commands/")
                assert get(headers["Location"])[:2] == (200, found[key])
        status, body, _ = get(url(a) + "/commands/nope?tenant=t1", follow=True)
        assert status == 404 and body["searched"] == [0, 1, 2, 3]
        status, body, _ = get(url(a) + "/commands/nope")
        assert status == 400 and "tenant" in body["error"]

        # seqkeeper inspect asks the worker (and is led to the owner)
        def inspect(*args: str) -> Result:
            argv = ["inspect", "-b", base.broker.bootstrap, "--app-id", base.runtime.app_id]
            return CliRunner().invoke(app, [*argv, *args])

        port = str(a.settings.runtime.web_port)
        for key in (KEYS[0], next(k for k in KEYS if answers[k][0] == 307)):
            shown = inspect("--message-id", f"add-{key}", "--tenant", "t1", "--web-port", port)
            assert shown.exit_code == 0, shown.output
            assert f"(asked the worker at {url(a)})" in shown.stderr
            assert orjson.loads(shown.stdout) == [found[key]]
        missing = inspect("--message-id", "nope", "--tenant", "t1", "--web-port", port)
        assert missing.exit_code == 1 and "asked the worker" in missing.stderr
        nobody = str(free_port())  # no worker there: the changelog is read
        shown = inspect("--message-id", f"add-{KEYS[0]}", "--tenant", "t1", "--web-port", nobody)
        assert shown.exit_code == 0 and "asked the worker" not in shown.stderr
        (from_changelog,) = orjson.loads(shown.stdout)
        assert from_changelog["command"] == found[KEYS[0]]["command"]
    finally:
        a.stop()
        b.stop()


TOKEN = "a-bearer-token-0123456789"


def test_with_a_token_only_its_bearer_is_answered_redirects_included(
    make_settings, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("SEQKEEPER_HTTP_TOKEN", raising=False)
    base = make_settings(topology="commands", partitions=4, http_token=TOKEN)
    asyncio.run(create_topics(base.broker.bootstrap, base.topics(), 4))
    records = [command(key, f"add-{key}", 1) for key in KEYS]
    asyncio.run(publish(base.broker.bootstrap, base.commands.command_topic, records))
    a, b = two_workers(base, tmp_path)
    try:
        a.start().wait_ready()
        b.start().wait_ready()

        def path(key: str) -> str:
            return f"/entities/t1/{quote(key)}"

        answers = settled(a, b, path, lambda e: e.get("version") == 1, token=TOKEN)
        mine = next(k for k in KEYS if answers[k][0] == 200)
        theirs = next(k for k in KEYS if answers[k][0] == 307)
        status, body, headers = get(url(a) + path(mine))
        assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="seqkeeper"'
        assert "Authorization" in body["error"]
        status, body, headers = get(url(a) + path(mine), token="not-the-token-0123456789")
        assert status == 401 and 'error="invalid_token"' in headers["WWW-Authenticate"]
        assert TOKEN not in json.dumps(body)
        assert get(url(a) + path(mine), token=TOKEN)[:2] == answers[mine][:2]
        # the owner refuses as well; a client re-sending its header is answered
        status, _, headers = get(url(a) + path(theirs), token=TOKEN)
        assert status == 307
        assert get(headers["Location"])[0] == 401
        status, body, _ = get(url(a) + path(theirs), follow=True, token=TOKEN)
        assert status == 200 and body["id"] == theirs
        assert get(url(a) + path(theirs), follow=True)[0] == 401  # (A refuses at once)
        for open_path in ("/health", "/ready", "/metrics"):
            with urllib.request.urlopen(url(a) + open_path, timeout=10) as response:
                assert response.status == 200, open_path

        # seqkeeper inspect sends the token of its settings, on every hop
        def inspect(token: str | None) -> Result:
            argv = ["inspect", "-b", base.broker.bootstrap, "--app-id", base.runtime.app_id]
            port = str(a.settings.runtime.web_port)
            env = {"SEQKEEPER_HTTP_TOKEN": token} if token else {}
            argv += ["--message-id", f"add-{theirs}", "--tenant", "t1", "--web-port", port]
            return CliRunner().invoke(app, argv, env=env)

        shown = inspect(TOKEN)
        assert shown.exit_code == 0, shown.output
        assert f"(asked the worker at {url(a)})" in shown.stderr
        assert orjson.loads(shown.stdout)[0]["command"]["message_id"] == f"add-{theirs}"
        refused = inspect(None)  # told why, then the changelog is read
        assert refused.exit_code == 0, refused.output
        assert f"the worker at {url(a)} refused the state query (401" in refused.stderr
        assert "SEQKEEPER_HTTP_TOKEN" in refused.stderr and "asked the worker" not in refused.stderr
        assert orjson.loads(refused.stdout)[0]["command"]["status"] == "COMPLETED"
        assert TOKEN not in a.log() + b.log()
    finally:
        a.stop()
        b.stop()


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_with_state_queries_off_none_is_served_but_readiness_is(make_settings, tmp_path) -> None:
    settings = make_settings(state_queries="off", web_port=free_port())
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    try:
        worker.start().wait_ready()
        base = url(worker)
        deadline = time.monotonic() + 60
        while status_of(base + "/ready") != 200:
            worker.check_alive()
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.5)
        assert status_of(base + "/state/key-0") == 404
        assert status_of(base + "/health") == 200
        assert status_of(base + "/metrics") == 200
    finally:
        worker.stop()
