"""The web server's log: a request aiohttp cannot parse is the client's
error, answered 400, not the worker's.

aiohttp 3.x (``aiohttp.web_protocol.RequestHandler.handle_error``, the
server Faust 0.15's web driver runs) logs every request its parser refuses
(a request line or header over 8190 bytes, a byte not allowed in a URL or
a header value, too many headers, a bad chunk) as an ERROR on
``aiohttp.server`` with a traceback, and the message quotes up to 100 bytes
of the offending line, an ``Authorization`` header's bearer token among
them. Anyone who reaches the web port could fill the worker's log with
tracebacks and write a token into it. :func:`quiet_bad_requests` turns each
into one DEBUG line naming the client and the error's class, never the
bytes; an error of a handler (500) keeps its traceback.

Test that fails without it: ``tests/security/test_http_hostile.py`` (no
traceback, and no token, in the worker's log after the campaign).
"""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError

#: aiohttp's server logger (``aiohttp.log.server_logger``).
SERVER_LOGGER = "aiohttp.server"

log = logging.getLogger("seqkeeper.web")


class BadRequests(logging.Filter):
    """Drops aiohttp's record of a request its parser refused, and logs one
    DEBUG line in its place."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, HttpProcessingError):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        client = args[0] if args else "?"
        log.debug(
            "a malformed request from %s answered %s (%s)",
            client,
            error.code or 400,
            type(error).__name__,
        )
        return False


_FILTER = BadRequests()


def quiet_bad_requests() -> None:
    """Install :class:`BadRequests` on aiohttp's server logger (once)."""
    logger = logging.getLogger(SERVER_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
