"""The Faust app a worker runs: what it publishes about itself, where and what it serves."""

from __future__ import annotations

from seqkeeper.runtime.wiring import make_app
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


def test_the_web_server_binds_to_the_web_host_only() -> None:
    # Faust listens on web_bind (its default: every interface); web_host is
    # only the name in the default canonical URL (tests/security/test_bind.py
    # checks the sockets of real workers)
    for host in ("127.0.0.1", "0.0.0.0", "192.0.2.10"):
        app = make_app(Settings.of(bootstrap="kafka:9092", web_host=host, web_port=7001))
        assert (app.conf.web_bind, app.conf.web_host) == (host, host)


def test_faust_s_own_environment_variables_change_nothing(monkeypatch) -> None:
    # Faust reads WEB_BIND, WEB_PORT, APP_WEB_TABLES_ENABLED, BROKER_URL...
    # over its arguments: the settings must be the only source
    monkeypatch.setenv("WEB_BIND", "0.0.0.0")
    monkeypatch.setenv("WEB_PORT", "1")
    monkeypatch.setenv("APP_WEB_TABLES_ENABLED", "true")
    monkeypatch.setenv("BROKER_URL", "kafka://elsewhere:9092")
    app = make_app(Settings.of(bootstrap="kafka:9092", web_host="127.0.0.1", web_port=7001))
    assert app.conf.web_bind == "127.0.0.1" and app.conf.web_port == 7001
    assert not app.conf.web_tables_enabled
    assert [str(url) for url in app.conf.broker] == ["kafka://kafka:9092"]
