"""The Faust app a worker runs: what it publishes about itself."""

from __future__ import annotations

from seqkeeper.runtime.app import make_app
from seqkeeper.settings import Settings


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
