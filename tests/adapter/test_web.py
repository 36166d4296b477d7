"""A request aiohttp's parser refuses is one DEBUG line naming the client,
without the request's bytes; a handler's error keeps its traceback
(seqkeeper/adapter/web.py; the whole server: tests/security/test_http_hostile.py)."""

from __future__ import annotations

import logging

import pytest
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from seqkeeper.adapter.web import SERVER_LOGGER, quiet_bad_requests


def refuse(error: Exception) -> None:
    try:
        raise error
    except Exception as exc:
        logging.getLogger(SERVER_LOGGER).exception(
            "Error handling request from %s", "192.0.2.9", exc_info=exc
        )


def test_a_refused_request_is_one_debug_line_without_its_bytes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet_bad_requests()
    quiet_bad_requests()  # (once only)
    assert len(logging.getLogger(SERVER_LOGGER).filters) == 1
    secret = "Bearer a-token-in-a-header-0123456789"
    with caplog.at_level(logging.DEBUG):
        refuse(BadHttpMessage(f"Invalid header value char: {secret}\x00"))
        refuse(LineTooLong(secret, "8190"))
    assert [(r.name, r.levelname) for r in caplog.records] == [("seqkeeper.web", "DEBUG")] * 2
    assert caplog.records[0].getMessage() == (
        "a malformed request from 192.0.2.9 answered 400 (BadHttpMessage)"
    )
    assert secret not in caplog.text and not any(r.exc_info for r in caplog.records)


def test_a_handler_s_error_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    quiet_bad_requests()
    with caplog.at_level(logging.DEBUG):
        refuse(KeyError("a bug"))
    [record] = caplog.records
    assert (record.name, record.levelname) == (SERVER_LOGGER, "ERROR") and record.exc_info
