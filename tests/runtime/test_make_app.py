"""The Faust app a worker runs: what it publishes about itself, where and what it serves."""

from __future__ import annotations

from seqkeeper.runtime.app import make_app
from seqkeeper.settings import VARS, Settings


def test_the_advertised_url_is_what_the_group_assignment_publishes() -> None:
    bound = make_app(Settings.of(bootstrap="kafka:9092", web_host="0.0.0.0", web_port=7001))
    assert str(bound.conf.canonical_url) == "http://0.0.0.0:7001"  # unreachable from elsewhere
    named = make_app(
        Settings.of(
            bootstrap="kafka:9092",
            web_host="0.0.0.0",
            web_port=7001,
            advertised_url="http://worker-1:7001",
        )
    )
    assert str(named.conf.canonical_url) == "http://worker-1:7001"


def test_the_web_server_binds_loopback_by_default(monkeypatch) -> None:
    # state queries expose message data: reachable from elsewhere only when
    # SEQKEEPER_WEB_HOST says so (docker-compose.yml does, in a container)
    monkeypatch.delenv("SEQKEEPER_WEB_HOST", raising=False)
    assert VARS["web_host"].default == "127.0.0.1"
    app = make_app(Settings.of(bootstrap="kafka:9092", web_port=7001))
    assert app.conf.web_host == "127.0.0.1"


def test_faust_s_own_table_and_router_pages_are_not_served() -> None:
    # /table/<name>/<key>/ would read the state with no way to ask for a
    # token; /router/ lists the group's URLs
    app = make_app(Settings.of(bootstrap="kafka:9092", web_port=7001))
    assert not app.conf.web_tables_enabled and not app.conf.web_router_enabled
    served = [str(blueprint) for _, blueprint in app.web.blueprints._enabled]
    assert not [b for b in served if "tables" in b or "router" in b], served
    assert served  # (Faust's own index stays: {"status": "OK"})
