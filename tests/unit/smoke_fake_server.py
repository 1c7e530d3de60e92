"""A tiny OpenAI-style completions server on loopback, for the smoke unit tests."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    def __init__(self, fail_every: int = 0, delay_s: float = 0.0, api_key: str | None = None):
        self.fail_every = fail_every
        self.delay_s = delay_s
        self.api_key = api_key
        self.completions = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.bodies: list[dict] = []


def _handler(state: FakeServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _authorised(self) -> bool:
            if state.api_key and self.headers.get("Authorization") != f"Bearer {state.api_key}":
                self._send(401, {"error": "unauthorised"})
                return False
            return True

        def do_GET(self):
            if self.path == "/v1/models" and self._authorised():
                self._send(200, {"data": [{"id": "fake-model"}]})
            elif self.path != "/v1/models":
                self._send(404, {})

        def do_POST(self):
            if self.path != "/v1/completions":
                self._send(404, {})
                return
            if not self._authorised():
                return
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.completions += 1
                number = state.completions
                state.bodies.append(request)
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            time.sleep(state.delay_s)
            with state.lock:
                state.in_flight -= 1
            if state.fail_every and number % state.fail_every == 0:
                self._send(500, {"error": "engine dead"})
                return
            self._send(200, {"choices": [{"text": "ok"}], "usage": {"completion_tokens": request["max_tokens"]}})

    return Handler


@contextmanager
def fake_server(**kwargs):
    """Yields (base URL on 127.0.0.1, FakeServer state)."""
    state = FakeServer(**kwargs)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
