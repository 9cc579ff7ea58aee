"""A counting proxy in front of a real vLLM server: every request is forwarded unchanged and
its answer returned unchanged; each chat request's body is recorded, so a test can count what
the server was asked (regeneration's "never generated twice", tests/pipeline/test_regenerate_vllm.py).
Not a stand-in: the answers are the real server's. `delay_s` holds each chat request before it
is forwarded, so a test can kill the client while requests are in flight.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CountingProxy:
    def __init__(self, upstream: str, *, delay_s: float = 0.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.delay_s = delay_s
        self.chats: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.endswith("/chat/completions"):
                    with proxy._lock:
                        proxy.chats.append(json.loads(body))
                    time.sleep(proxy.delay_s)
                self._forward(body)

            def _forward(self, body: bytes | None) -> None:
                req = urllib.request.Request(proxy.upstream + self.path, data=body,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=300) as resp:
                        status, data = resp.status, resp.read()
                except urllib.error.HTTPError as exc:
                    status, data = exc.code, exc.read()
                except OSError as exc:  # the server is gone: a gateway's answer, not a hang-up
                    status, data = 502, json.dumps({"error": str(exc)}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def count(self) -> int:
        with self._lock:
            return len(self.chats)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
