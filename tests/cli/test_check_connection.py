"""The first connection a command makes before its own
(:func:`seqkeeper.cli.check_connection`), without a broker: none at all on
PLAINTEXT or with no broker named; on a broker that does not answer,
nothing printed and nothing raised, the command goes on (and meets it).
On a secured broker: tests/security/test_cli_errors.py."""

from __future__ import annotations

import asyncio
import logging

import pytest

import seqkeeper.wait
from seqkeeper.broker import free_port
from seqkeeper.cli import check_connection
from seqkeeper.settings import Settings
from seqkeeper.wait import first_connection


def test_no_connection_on_plaintext_or_without_a_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(address: str) -> None:
        raise AssertionError(f"connected to {address}")

    monkeypatch.setattr(seqkeeper.wait, "first_connection", refuse)
    check_connection(Settings.of(bootstrap="127.0.0.1:9", security_protocol="PLAINTEXT"))
    check_connection(
        Settings.of(
            bootstrap="",
            security_protocol="SASL_SSL",
            sasl_username="u",
            sasl_password="p",
        )
    )


def test_a_broker_that_does_not_answer_is_left_to_the_command(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    failed = asyncio.run(first_connection(address, timeout=2.0))
    assert failed is not None and address in str(failed)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert not [r for r in caplog.records if r.name.startswith("aiokafka")]

    settings = Settings.of(
        bootstrap=address, security_protocol="SASL_SSL", sasl_username="u", sasl_password="p"
    )
    check_connection(settings)  # returns: the command reports it its own way
    assert capfd.readouterr() == ("", "")
