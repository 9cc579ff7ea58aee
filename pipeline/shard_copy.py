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
holding the other end went away: its SSH channel closed), or after `IDLE_TIMEOUT` without an
authenticated request, so it is never left listening.

What either end accepts (issue 48 row 2; docs/pipeline.md): a manifest of the right shape
(`check_manifest`: plain file names, sizes and sha256 of their types, `count` equal to the
files listed), a file served only when it is a regular file in hidden_states/ (no symlink
followed, nothing outside it), a file fetched only up to the size the manifest gives it, a
token only as `Authorization: Bearer TOKEN`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import http.server
import json
import os
import re
import shutil
import socket
import stat
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pipeline.diskfull import disk_full_message, is_disk_full
from pipeline.errors import CopyRefused, PipelineError, Unreachable
from pipeline.shards import SHARD_MANIFEST

IDLE_TIMEOUT = 600.0  # seconds without a request before the server gives up
CONNECT_TIMEOUT = 15.0  # seconds a fetch waits for the box to answer (a filtered port: silence)
CHUNK = 1 << 20
PROGRESS_EVERY = 10.0  # seconds between a fetch's progress lines
# The most one file of a manifest may claim: far above any sample's hidden states (a Kimi-size
# sample of 128k tokens is ~7 GiB), far below what a size can be made to say.
MAX_FILE_BYTES = 1 << 40
_SHA256 = re.compile(r"[0-9a-f]{64}")


def plain_name(name: object) -> bool:
    """A file name that stays in its directory: no separator, not `.`/`..`, no NUL, <= 240 B (room for ".part")."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
            and "\\" not in name and "\0" not in name and len(name.encode("utf-8", "replace")) <= 240)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_FILE_BYTES


def check_manifest(m: object, where: str) -> list[dict[str, Any]]:
    """The files of a shard manifest (shard.json), each `{name, size, sha256}` of those types
    with a plain name, listed once, as many as its `count`; or CopyRefused in one line naming
    the first thing wrong. Both ends of a copy and shard-gather ask it before using a name."""
    def refuse(why: str) -> CopyRefused:
        return CopyRefused(f"{where}: the shard manifest {why}: refused, nothing copied")

    if not isinstance(m, dict):
        raise refuse(f"is a JSON {type(m).__name__}, not an object")
    files = m.get("files")
    if not isinstance(files, list):
        raise refuse(f"has 'files' of type {type(files).__name__}, not a list")
    seen: set[str] = set()
    for i, f in enumerate(files):
        if not isinstance(f, dict):
            raise refuse(f"lists file {i} as a {type(f).__name__}, not an object")
        name = f.get("name")
        if not plain_name(name):
            raise refuse(f"names file {i} {str(name)[:120]!r}, not a plain file name (no '/', "
                         "'..' or absolute path)")
        assert isinstance(name, str)
        if name in seen:
            raise refuse(f"lists {name!r} twice")
        seen.add(name)
        if not _count(f.get("size")):
            raise refuse(f"gives {name!r} the size {str(f.get('size'))[:40]!r}, not a whole "
                         f"number of bytes from 0 to {MAX_FILE_BYTES}")
        if not isinstance(f.get("sha256"), str) or not _SHA256.fullmatch(f["sha256"]):
            raise refuse(f"gives {name!r} the sha256 {str(f.get('sha256'))[:70]!r}, not 64 "
                         "hex digits")
    count = m.get("count")
    if not _count(count) or count != len(files):
        raise refuse(f"says count {str(count)[:40]} but lists {len(files)} files")
    return files


def _open_regular(directory: Path, name: str) -> int:
    """A read fd on `directory/name` only when it is a regular file right there: neither the
    file nor `directory`'s last component may be a symlink (O_NOFOLLOW), a FIFO does not block
    the open (O_NONBLOCK) and is refused with anything else that is not a regular file."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    finally:
        os.close(dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{name} is not a regular file")
    return fd


def read_token() -> str:
    """The copy's token, the first line of stdin."""
    token = sys.stdin.readline().strip()
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
        """Only `Authorization: Bearer TOKEN`; only such a request keeps the server from its
        idle timeout (wrong tokens kept it listening for as long as they came)."""
        auth = self.headers.get("Authorization", "")
        given = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
        if given and hmac.compare_digest(given.encode("utf-8", "replace"),
                                         self.server.token.encode()):
            self.server.last = time.monotonic()
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
        name = self.path.removeprefix("/hidden_states/")
        if self.path == "/" + SHARD_MANIFEST:
            where, name = d, SHARD_MANIFEST
        elif self.path.startswith("/hidden_states/") and name in self.server.files:
            where = d / "hidden_states"
        else:  # only what the manifest lists: no path reaches anything else on the box
            self.send_error(404, "not a file of this shard")
            return
        try:
            fd = _open_regular(where, name)
        except OSError as exc:
            self.send_error(404, f"{name}: {exc.strerror or exc}")
            return
        with os.fdopen(fd, "rb") as fh:
            left = os.fstat(fd).st_size  # what is announced is what is sent, if it grows
            self.send_response(200)
            self.send_header("Content-Length", str(left))
            self.end_headers()
            while left > 0 and (chunk := fh.read(min(CHUNK, left))):
                self.wfile.write(chunk)
                left -= len(chunk)
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
            fd = _open_regular(shard_dir, SHARD_MANIFEST)
            with os.fdopen(fd, "rb") as fh:
                m = json.loads(fh.read())
        except (OSError, ValueError, RecursionError) as exc:
            raise CopyRefused(f"shard-serve: no finished shard in {shard_dir}: "
                              f"{str(exc)[:200]}") from None
        files = {f["name"] for f in check_manifest(m, f"shard-serve: {shard_dir}")}
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
    with contextlib.suppress(PipelineError):  # it also stops when its stdin closes or it idles out
        _request(f"{base}/done", token, method="POST", timeout=5).close()


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
        try:
            m = json.loads(raw)
        except (ValueError, RecursionError):
            raise CopyRefused(f"shard-fetch: the shard manifest from {base} is not JSON: "
                              "refused, nothing copied") from None
        files = check_manifest(m, f"shard-fetch: {base}")
        total = sum(int(f["size"]) for f in files)
        hs = dest / "hidden_states"
        hs.mkdir(parents=True)
        copied, said = 0, time.monotonic()
        for f in files:
            h = hashlib.sha256()
            part = hs / (f["name"] + ".part")
            size = int(f["size"])
            left = size
            with _request(f"{base}/hidden_states/{f['name']}", token, timeout=120) as r, \
                    open(part, "wb") as out:
                said_size = r.headers.get("Content-Length")
                if said_size is not None and said_size.strip() != str(size):
                    raise PipelineError(f"shard-fetch: {f['name']} is announced as "
                                        f"{said_size.strip()[:40]} B, the shard's manifest says "
                                        f"{size} B: refused, nothing placed")
                # Never more than the manifest's size (+1 byte to see a longer body): a body
                # without Content-Length once streamed 300 MB for a 19 B entry.
                while chunk := r.read(min(CHUNK, left + 1)):
                    if len(chunk) > left:
                        raise PipelineError(f"shard-fetch: {f['name']} is longer than the "
                                            f"shard's manifest says ({size} B): refused, "
                                            "nothing placed")
                    left -= len(chunk)
                    h.update(chunk)
                    out.write(chunk)
                    copied += len(chunk)
                    if time.monotonic() - said > PROGRESS_EVERY:
                        said = time.monotonic()
                        print(json.dumps({"copied": copied, "of": total}), flush=True)
            if part.stat().st_size != size or h.hexdigest() != f["sha256"]:
                raise PipelineError(f"shard-fetch: {f['name']} arrived with sha256 "
                                    f"{h.hexdigest()[:16]}... ({part.stat().st_size} B), the "
                                    f"shard's manifest says {str(f['sha256'])[:16]}... "
                                    f"({f['size']} B): refused, nothing placed")
            part.rename(hs / f["name"])
        (dest / SHARD_MANIFEST).write_bytes(raw)  # last: a complete staging directory
    except BaseException as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(exc, Exception) and not isinstance(exc, PipelineError) \
                and is_disk_full(exc, dest):
            raise PipelineError(disk_full_message("shard-fetch", dest)) from None
        raise
    finally:
        _say_done(base, token)
    return {"files": len(files), "copied": copied}
