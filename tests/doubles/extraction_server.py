"""Test double of the extraction server (vLLM's OpenAI server with the extract_hidden_states
method), which needs CUDA: what pipeline/trainers/online.py's lifecycle sees of it, kept
faithful to that. It answers `GET /v1/models` as vLLM does (the readiness check), starts a
worker process as vLLM starts its engine core (a second process in its group that must go
too), and on SIGTERM stops its worker and exits, as vLLM's server does.

    python tests/doubles/extraction_server.py PORT PIDFILE [--exit-at-once]

PIDFILE gets "SERVER_PID WORKER_PID" once both run. --exit-at-once: exits 3 before answering
(a server that cannot start).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Models(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            self.send_error(404)
            return
        body = json.dumps({"object": "list", "data": [{"id": "double", "object": "model"}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *_args: object) -> None:
        pass


def main() -> int:
    port, pidfile = int(sys.argv[1]), sys.argv[2]
    if "--exit-at-once" in sys.argv:
        return 3
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(pidfile + ".part", "w") as fh:
        fh.write(f"{os.getpid()} {worker.pid}\n")
    os.replace(pidfile + ".part", pidfile)
    server = ThreadingHTTPServer(("127.0.0.1", port), Models)

    def on_term(_sig: int, _frame: object) -> None:
        worker.terminate()
        worker.wait()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
