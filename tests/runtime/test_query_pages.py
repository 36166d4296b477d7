"""The worker's app serves state queries to whom its settings admit
(seqkeeper.runtime.query_routing.admit): none when they are off, only requests
carrying the bearer token when one is set; /health, /ready and /metrics
are served either way, without a token. No broker: the app is built,
never started, and its pages are called directly (a real worker:
tests/integration/test_state_queries.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from seqkeeper.processors.inventory import registry
from seqkeeper.runtime.wiring import build_app
from seqkeeper.settings import Settings
from seqkeeper.topologies import command_worker, ordered

TOKEN = "0123456789abcdef-token"
QUERY = "/state/{key}"


def built(tmp_path: Path, **overrides: Any) -> Any:
    settings = Settings.of(bootstrap="127.0.0.1:1", data_dir=tmp_path, web_port=6066, **overrides)
    return build_app(settings, ordered.wiring(settings))[0]


def ask(app: Any, headers: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, str]]:
    request = SimpleNamespace(headers=headers, query={}, rel_url="/state/k")
    response = asyncio.run(app.web.views[QUERY].get(request, key="k"))
    return response.status, json.loads(response.body), dict(response.headers)


def test_off_serves_no_query_but_health_readiness_and_metrics(tmp_path: Path) -> None:
    app = built(tmp_path, state_queries="off")
    assert QUERY not in app.web.views
    assert {"/health", "/ready", "/metrics"} <= set(app.web.views)
    settings = Settings.of(
        bootstrap="127.0.0.1:1",
        data_dir=tmp_path / "c",
        web_port=6067,
        topology="commands",
        state_queries="off",
    )
    views = build_app(settings, command_worker.wiring(settings, registry=registry))[0].web.views
    assert not [path for path in views if path.startswith(("/entities", "/commands"))]
    assert "/ready" in views


def test_a_token_guards_every_query_and_nothing_else(tmp_path: Path) -> None:
    app = built(tmp_path, http_token=TOKEN)
    status, body, headers = ask(app, {})
    assert status == 401 and headers["WWW-Authenticate"] == 'Bearer realm="seqkeeper"'
    assert "Authorization" in body["error"]
    status, body, _ = ask(app, {"Authorization": "Bearer wrong-token-wrong-token"})
    assert status == 401 and TOKEN not in json.dumps(body)
    # admitted: the query itself answers (nobody owns a partition: not started)
    assert ask(app, {"Authorization": f"Bearer {TOKEN}"})[0] == 503
    for path in ("/health", "/ready", "/metrics"):  # (they read no headers at all)
        assert asyncio.run(app.web.views[path].get(None)).status in (200, 503)


def test_without_a_token_queries_are_open(tmp_path: Path) -> None:
    assert ask(built(tmp_path), {})[0] == 503


def test_the_token_file_is_read_at_build(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")  # (as a mounted secret often ends)
    app = built(tmp_path, http_token_file=str(secret))
    assert ask(app, {"Authorization": f"Bearer {TOKEN}"})[0] == 503
    assert ask(app, {"Authorization": f"Bearer {TOKEN}\n"})[0] == 503
    assert ask(app, {})[0] == 401
