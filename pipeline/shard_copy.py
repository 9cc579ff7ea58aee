"""Box-to-box copy of a finished shard (docs/pipeline.md, "Offline, online, shared storage or
relay"): the shard box serves its shard once (`python -m pipeline shard-serve`), the training box
fetches it (`python -m pipeline shard-fetch`), and no hidden-state byte crosses the console.
Standard library only: both ends run with what the box's python has.

Why a one-shot server and a token, not SSH between the boxes: the boxes of a fleet hold no
credentials for one another (the console holds the only trusted link to each). The console
makes a random token per copy and hands it to both ends over those links (on stdin, never on a
command line that `ps` shows); the server answers only requests carrying it, and only for the
files its shard's manifest lists.

Why the console passes the manifest's sha256: the training box checks the manifest it receives
against what the shard box itself hashed over the console's SSH link, then every file against
that manifest as it arrives. A mismatch removes what was received; nothing is placed.

Lifetime: the server stops when the fetcher says it is done, when its stdin closes (the console
holding the other end went away: its SSH channel closed), or after `IDLE_TIMEOUT` without a
request, so it is never left listening.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import http.server
import json
import shutil
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pipeline.errors import CopyRefused, PipelineError, Unreachable
from pipeline.shards import SHARD_MANIFEST

IDLE_TIMEOUT = 600.0  # seconds without a request before the server gives up
CONNECT_TIMEOUT = 15.0  # seconds a fetch waits for the box to answer (a filtered port: silence)
CHUNK = 1 << 20
PROGRESS_EVERY = 10.0  # seconds between a fetch's progress lines


def read_token(stream: Any = None) -> str:
    """The copy's token, the first line of stdin."""
    token = (stream or sys.stdin).readline().strip()
    if not token:
        raise CopyRefused("no token on stdin (the console passes it there)")
    return token


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], token: str, shard_dir: Path | None,
                 files: set[str]) -> None:
        if ":" in address[0]:  # an IPv6 address (the class default is IPv4)
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.token = token
        self.shard_dir = shard_dir
        self.files = files
        self.last = time.monotonic()
        self.done = threading.Event()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per file would swamp the console's view of a shard of thousands

    def _allowed(self) -> bool:
        self.server.last = time.monotonic()
        given = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if hmac.compare_digest(given.encode(), self.server.token.encode()):
            return True
        print(f"shard-serve: refused a request from {self.client_address[0]}: wrong token",
              file=sys.stderr, flush=True)
        self.send_error(403, "wrong token")
        return False

    def do_GET(self) -> None:
        if not self._allowed():
            return
        if self.path == "/hello":
            body = json.dumps({"ok": True, "shard": self.server.shard_dir is not None}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        d = self.server.shard_dir
        if d is None:
            self.send_error(404, "a probe serves no files")
            return
        if self.path == "/" + SHARD_MANIFEST:
            path = d / SHARD_MANIFEST
        elif self.path.startswith("/hidden_states/") and \
                self.path.removeprefix("/hidden_states/") in self.server.files:
            path = d / "hidden_states" / self.path.removeprefix("/hidden_states/")
        else:  # only what the manifest lists: no path reaches anything else on the box
            self.send_error(404, "not a file of this shard")
            return
        try:
            fh = open(path, "rb")
        except OSError as exc:
            self.send_error(404, str(exc))
            return
        with fh:
            self.send_response(200)
            self.send_header("Content-Length", str(path.stat().st_size))
            self.end_headers()
            shutil.copyfileobj(fh, self.wfile, CHUNK)
        self.server.last = time.monotonic()

    def do_POST(self) -> None:
        if not self._allowed():
            return
        if self.path != "/done":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.server.done.set()


def _bind(bind: str, port: int, make: Any) -> tuple[_Server, str]:
    try:
        return make((bind, port)), bind
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise CopyRefused(f"shard-serve: port {port} on {bind} is in use: set "
                              "extract.copy_port to a free port (0: any free port)") from None
        if exc.errno != errno.EADDRNOTAVAIL:
            raise CopyRefused(f"shard-serve: cannot listen on {bind}:{port}: {exc}") from None
    # The address others reach this box by is not one of its own (a NAT, a container's
    # published address): listen on every interface; the token still guards it.
    try:
        return make(("", port)), "0.0.0.0"
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise CopyRefused(f"shard-serve: port {port} is in use: set extract.copy_port to a "
                              "free port (0: any free port)") from None
        raise CopyRefused(f"shard-serve: cannot listen on port {port}: {exc}") from None


def serve(shard_dir: Path | None, bind: str, port: int, token: str, *,
          idle_timeout: float = IDLE_TIMEOUT, stdin: Any = None) -> dict[str, Any]:
    """Serve one finished shard (`shard_dir`; None: a reachability probe) until the fetcher says
    done, stdin closes, or `idle_timeout` passes without a request. Prints one ready line
    ({"serving": true, "port": N, "bind": A}) once listening."""
    files: set[str] = set()
    if shard_dir is not None:
        try:
            m = json.loads((shard_dir / SHARD_MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            raise CopyRefused(f"shard-serve: no finished shard in {shard_dir}: {exc}") from None
        files = {str(f["name"]) for f in m.get("files", [])}
    server, bound = _bind(bind, port, lambda a: _Server(a, token, shard_dir, files))
    stdin = stdin or sys.stdin

    def watch_stdin() -> None:  # EOF: the console's channel closed
        while stdin.readline():
            pass
        server.done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                     daemon=True).start()
    print(json.dumps({"serving": True, "port": server.server_address[1], "bind": bound}),
          flush=True)
    why = "done"
    try:
        while not server.done.wait(1.0):
            if time.monotonic() - server.last > idle_timeout:
                why = f"idle for {idle_timeout:.0f} s"
                break
    finally:
        server.shutdown()
        server.server_close()
    return {"served": True, "ended": why}


def _request(url: str, token: str, *, method: str = "GET", timeout: float = CONNECT_TIMEOUT
             ) -> Any:
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"})
    try:
        return urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 403:
            raise CopyRefused(f"shard-fetch: the shard box refused the token (HTTP 403 from "
                              f"{url}): not copied") from None
        raise PipelineError(f"shard-fetch: {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unreachable(f"cannot reach the shard box at {url}: {reason}") from None


def _say_done(base: str, token: str) -> None:
    try:
        _request(f"{base}/done", token, method="POST", timeout=5).close()
    except PipelineError:
        pass  # the server also stops when its stdin closes or it idles out


def probe(base: str, token: str) -> dict[str, Any]:
    """One authenticated request: this box reaches the server at `base` and holds its token."""
    with _request(f"{base}/hello", token) as r:
        got = json.loads(r.read())
    _say_done(base, token)
    return {"reached": base, "ok": bool(got.get("ok"))}


def fetch(base: str, token: str, dest: Path, manifest_sha256: str) -> dict[str, Any]:
    """The shard at `base` into `dest` (emptied first): its manifest checked against
    `manifest_sha256`, every file against the manifest as it arrives. Any mismatch removes
    `dest` and raises: nothing is left to place."""
    shutil.rmtree(dest, ignore_errors=True)
    try:
        with _request(f"{base}/{SHARD_MANIFEST}", token) as r:
            raw = r.read()
        if hashlib.sha256(raw).hexdigest() != manifest_sha256:
            raise PipelineError(f"shard-fetch: the shard's manifest from {base} differs from the "
                                "one the console read on the shard box (sha256): nothing placed")
        m = json.loads(raw)
        files = list(m.get("files", []))
        total = sum(int(f["size"]) for f in files)
        hs = dest / "hidden_states"
        hs.mkdir(parents=True)
        copied, said = 0, time.monotonic()
        for f in files:
            h = hashlib.sha256()
            part = hs / (f["name"] + ".part")
            with _request(f"{base}/hidden_states/{f['name']}", token, timeout=120) as r, \
                    open(part, "wb") as out:
                while chunk := r.read(CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                    copied += len(chunk)
                    if time.monotonic() - said > PROGRESS_EVERY:
                        said = time.monotonic()
                        print(json.dumps({"copied": copied, "of": total}), flush=True)
            if part.stat().st_size != int(f["size"]) or h.hexdigest() != f["sha256"]:
                raise PipelineError(f"shard-fetch: {f['name']} arrived with sha256 "
                                    f"{h.hexdigest()[:16]}... ({part.stat().st_size} B), the "
                                    f"shard's manifest says {str(f['sha256'])[:16]}... "
                                    f"({f['size']} B): refused, nothing placed")
            part.rename(hs / f["name"])
        (dest / SHARD_MANIFEST).write_bytes(raw)  # last: a complete staging directory
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    finally:
        _say_done(base, token)
    return {"files": len(files), "copied": copied}
