"""A stub payment service on loopback, for the shop example (stdlib only).

    python payments.py [--port 8099]

``POST /charges`` with ``{"idempotencyKey", "amount", "card"}`` charges a
card: 201 and ``{"chargeId", "amount"}``, or 402 and ``{"error"}``. A
request with an idempotency key seen before gets the first answer again
and charges nothing, as real payment APIs do. Test cards:

- ``4242 4242 4242 4242``: charged.
- ``4000 0000 0000 0002``: declined.
- ``4000 0000 0000 0259``: charged, but the first answer for a key takes
  ``SLOW_SECONDS`` (longer than the shop's handler timeout), so the worker
  gives up on it and asks again.

``GET /charges`` lists every charge with the number of requests made for it.
"""

import argparse
import contextlib
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DECLINED = "4000 0000 0000 0002"
SLOW = "4000 0000 0000 0259"
SLOW_SECONDS = 5.0

_lock = threading.Lock()
_answers: dict[str, tuple[int, dict]] = {}  # idempotency key -> (status, body)
_calls: dict[str, int] = {}


def charge(key: str, amount: int, card: str) -> tuple[int, dict, bool]:
    """The answer to a charge request, and whether to answer slowly."""
    with _lock:
        _calls[key] = _calls.get(key, 0) + 1
        first = key not in _answers
        if first:
            if card == DECLINED:
                _answers[key] = (402, {"error": "card declined"})
            else:
                charge_id = "ch_" + hashlib.sha256(key.encode()).hexdigest()[:12]
                _answers[key] = (201, {"chargeId": charge_id, "amount": amount})
        status, body = _answers[key]
    return status, body, first and card == SLOW


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        if self.path != "/charges":
            return self.answer(404, {"error": "not found"})
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, body, slow = charge(request["idempotencyKey"], request["amount"], request["card"])
        if slow:
            time.sleep(SLOW_SECONDS)
        self.answer(status, body)

    def do_GET(self) -> None:
        if self.path != "/charges":
            return self.answer(404, {"error": "not found"})
        with _lock:
            charges = {
                key: {**body, "calls": _calls[key]}
                for key, (status, body) in _answers.items()
                if status == 201
            }
        self.answer(200, charges)

    def answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller gave up waiting (the slow card): it will ask again

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the shop's output is what matters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8099, help="0 picks a free port")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"payments at http://127.0.0.1:{server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: a quiet stop
        server.serve_forever()


if __name__ == "__main__":
    main()
