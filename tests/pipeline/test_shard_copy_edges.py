"""What a box-to-box shard copy accepts (issue 48 row 2; pipeline/shard_copy.py): both ends
refuse a manifest of the wrong shape or with a name that leaves its directory, the server never
follows a symlink nor serves past hidden_states/, the fetcher never writes past the size the
manifest gives a file nor outside its staging directory, a full disk is the project's one line,
a wrong or bare token neither gets an answer nor keeps the server from its idle timeout.

Real servers on loopback: the project's own (`serve`, in a thread) or, for a compromised shard
box, a plain http.server that says what the test makes it say.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pipeline import shard_copy
from pipeline.errors import CopyRefused, PipelineError
from tests.tmpfs import small_tmpfs

HOST = "127.0.0.5"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_shard(d: Path, sizes: tuple[int, ...] = (19, 1000)) -> dict[str, Any]:
    hs = d / "hidden_states"
    hs.mkdir(parents=True)
    files = []
    for i, n in enumerate(sizes):
        data = bytes([65 + i]) * n
        (hs / f"hs_{i}.safetensors").write_bytes(data)
        files.append({"name": f"hs_{i}.safetensors", "size": n, "sha256": _sha(data)})
    m = {"key": "k", "format": "0.9", "count": len(files), "files": files}
    (d / "shard.json").write_text(json.dumps(m))
    return m


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(shard: Path | None, *, idle: float = 60.0) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """The project's server in a thread: (base URL, token, what serve() returned once ended)."""
    token = "t" * 32
    port = free_port()
    r, w = os.pipe()
    ended: dict[str, Any] = {}

    def run() -> None:
        try:
            ended.update(shard_copy.serve(shard, HOST, port, token, idle_timeout=idle,
                                          stdin=os.fdopen(r)))
        except BaseException as exc:  # the test reads it
            ended["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    for _ in range(200):
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0 or ended:
                break
        time.sleep(0.02)
    try:
        yield f"http://{HOST}:{port}", token, ended
    finally:
        os.close(w)  # stdin EOF: the server stops
        t.join(30)


def get(url: str, auth: str | None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


BAD_MANIFESTS: list[tuple[object, str]] = [
    ([], "is a JSON list, not an object"),
    ({"files": [1], "count": 1}, "lists file 0 as a int, not an object"),
    ({"files": "x"}, "has 'files' of type str, not a list"),
    ({"count": 1, "files": [{"name": "../../victim/x", "size": 1, "sha256": "a" * 64}]},
     "names file 0 '../../victim/x', not a plain file name"),
    ({"count": 1, "files": [{"name": "/etc/hostname", "size": 1, "sha256": "a" * 64}]},
     "names file 0 '/etc/hostname', not a plain file name"),
    ({"count": 1, "files": [{"name": "..", "size": 1, "sha256": "a" * 64}]}, "names file 0 '..'"),
    ({"count": 1, "files": [{"name": "a", "size": "x", "sha256": "a" * 64}]},
     "gives 'a' the size 'x', not a whole number of bytes"),
    ({"count": 1, "files": [{"name": "a", "size": 10**400, "sha256": "a" * 64}]},
     "gives 'a' the size '1000"),
    ({"count": 1, "files": [{"name": "a", "size": True, "sha256": "a" * 64}]}, "size 'True'"),
    ({"count": 1, "files": [{"name": "a", "size": 1, "sha256": "zz"}]}, "the sha256 'zz'"),
    ({"count": 2, "files": [{"name": "a", "size": 1, "sha256": "a" * 64}] * 2}, "lists 'a' twice"),
    ({"count": 3, "files": [{"name": "a", "size": 1, "sha256": "a" * 64}]},
     "says count 3 but lists 1 files"),
    ({"files": []}, "says count None but lists 0 files"),
]


@pytest.mark.parametrize("m,why", BAD_MANIFESTS)
def test_a_manifest_of_the_wrong_shape_is_one_line(m: object, why: str) -> None:
    with pytest.raises(CopyRefused) as caught:
        shard_copy.check_manifest(m, "shard-fetch: http://x")
    message = str(caught.value)
    assert why in message and "\n" not in message and caught.value.exit_code == 2
    assert message.startswith("shard-fetch: http://x: the shard manifest ")
    assert message.endswith(": refused, nothing copied")


@pytest.mark.parametrize("m,why", BAD_MANIFESTS[:5])
def test_the_server_refuses_a_hostile_manifest_before_it_listens(
        tmp_path: Path, m: object, why: str) -> None:
    (tmp_path / "hidden_states").mkdir()
    (tmp_path / "shard.json").write_text(json.dumps(m))
    with serving(tmp_path) as (_, _, ended):
        pass
    assert isinstance(ended.get("error"), CopyRefused) and why in str(ended["error"])


def test_the_server_serves_no_symlink_and_nothing_outside_hidden_states(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"root:x:0:0\n")
    shard = tmp_path / "shard"
    m = make_shard(shard)
    link = shard / "hidden_states" / "hs_1.safetensors"
    link.unlink()
    link.symlink_to(secret)  # listed in the manifest, pointing out of the shard
    fifo = shard / "hidden_states" / "hs_0.safetensors"
    fifo.unlink()
    os.mkfifo(fifo)  # would block a plain open
    with serving(shard) as (base, token, _):
        auth = f"Bearer {token}"
        assert get(f"{base}/hidden_states/hs_1.safetensors", auth)[0] == 404
        assert get(f"{base}/hidden_states/hs_0.safetensors", auth)[0] == 404
        for path in ("/hidden_states/../../secret", "/hidden_states/%2e%2e/secret", "/secret",
                     "/hidden_states//etc/hostname"):
            assert get(base + path, auth)[0] == 404, path
        assert get(f"{base}/shard.json", auth) == (200, (shard / "shard.json").read_bytes())
        with pytest.raises(PipelineError) as caught:
            shard_copy.fetch(base, token, tmp_path / "dest", _sha((shard / "shard.json")
                                                                  .read_bytes()))
    assert "HTTP 404" in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "dest").exists() and m["count"] == 2
    # A hidden_states/ that is itself a symlink serves nothing either.
    other = tmp_path / "other"
    make_shard(other)
    (other / "hidden_states").rename(tmp_path / "elsewhere")
    (other / "hidden_states").symlink_to(tmp_path / "elsewhere")
    with serving(other) as (base, token, _):
        assert get(f"{base}/hidden_states/hs_0.safetensors", f"Bearer {token}")[0] == 404


def test_a_wrong_or_bare_token_gets_nothing_and_does_not_keep_the_server(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    make_shard(shard)
    with serving(shard, idle=1.0) as (base, token, ended):
        assert get(f"{base}/shard.json", token)[0] == 403  # no "Bearer "
        assert get(f"{base}/shard.json", "Bearer ")[0] == 403
        assert get(f"{base}/shard.json", f"Basic {token}")[0] == 403
        assert get(f"{base}/shard.json", f"Bearer {token}x")[0] == 403
        # Wrong tokens every 0.2 s for longer than the idle timeout: the server still ends.
        for _ in range(200):
            if ended:
                break
            try:
                get(f"{base}/shard.json", "Bearer wrong")
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        assert ended.get("ended") == "idle for 1 s"


class _Hostile(http.server.BaseHTTPRequestHandler):
    """A compromised shard box: answers every path from `routes` (bytes, or a callable that
    writes the response itself)."""

    routes: dict[str, bytes | Callable[[_Hostile], None]] = {}
    sent: list[int] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        what = self.routes.get(self.path)
        if what is None:
            self.send_error(404)
        elif callable(what):
            what(self)
        else:
            self.send_response(200)
            self.send_header("Content-Length", str(len(what)))
            self.end_headers()
            self.wfile.write(what)

    def do_POST(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


@contextmanager
def hostile(routes: dict[str, bytes | Callable[[_Hostile], None]],
            sent: list[int] | None = None) -> Iterator[str]:
    """Serves `routes`; what a callable route sent is appended to `sent`."""
    handler = type("H", (_Hostile,), {"routes": routes, "sent": [] if sent is None else sent})
    server = http.server.ThreadingHTTPServer((HOST, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{HOST}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("name", ["../../victim/x", "/ABS/x", "..", "a/../../../victim/y"])
def test_fetch_never_writes_outside_its_staging_directory(tmp_path: Path, name: str) -> None:
    data = b"pwned"
    m = json.dumps({"count": 1, "files": [{"name": name, "size": 5, "sha256": _sha(data)}]})
    raw = m.replace("/ABS", str(tmp_path / "abs")).encode()
    dest = tmp_path / "in" / "stage" / "shard-1"
    with hostile({"/shard.json": raw, f"/hidden_states/{name}": data}) as base, \
            pytest.raises(CopyRefused, match="not a plain file name") as caught:
        shard_copy.fetch(base, "tok", dest, _sha(raw))
    assert "\n" not in str(caught.value)
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert written == []  # refused before anything was written: no victim/, no abs/


def _endless(handler: _Hostile) -> None:
    """A body with no Content-Length that never ends (up to 200 MB), counting what it sent."""
    handler.send_response(200)
    handler.send_header("Connection", "close")
    handler.end_headers()
    block = b"x" * 65536
    try:
        for _ in range(3200):
            handler.wfile.write(block)
            handler.sent.append(len(block))
    except OSError:
        pass


def test_a_body_longer_than_its_manifest_entry_is_cut_at_that_size(tmp_path: Path) -> None:
    data = b"nineteen bytes here"
    raw = json.dumps({"count": 1, "files": [{"name": "hs_0.safetensors", "size": len(data),
                                              "sha256": _sha(data)}]}).encode()
    dest = tmp_path / "shard-1"
    sent: list[int] = []
    routes: dict[str, bytes | Callable[[_Hostile], None]] = {
        "/shard.json": raw, "/hidden_states/hs_0.safetensors": _endless}
    with hostile(routes, sent) as base, pytest.raises(
            PipelineError, match=r"hs_0.safetensors is longer than the shard's manifest says "
            r"\(19 B\): refused, nothing placed"):
        shard_copy.fetch(base, "tok", dest, _sha(raw))
    assert not dest.exists()
    assert sum(sent) < 200 * (1 << 20)  # the fetcher stopped reading: not all of it was sent
    # Announced with another length than the manifest's: refused before a byte is written.
    with hostile({"/shard.json": raw, "/hidden_states/hs_0.safetensors": data + b"!"}) as base, \
            pytest.raises(PipelineError, match="is announced as 20 B, the shard's manifest says 19 B"):
        shard_copy.fetch(base, "tok", dest, _sha(raw))
    assert not dest.exists()


def test_a_full_disk_on_the_fetching_box_is_the_projects_line(tmp_path: Path) -> None:
    shard = tmp_path / "shard"
    make_shard(shard, sizes=(19, 300_000))
    raw = (shard / "shard.json").read_bytes()
    with small_tmpfs(tmp_path / "small", "128k") as mnt, serving(shard) as (base, token, _):
        with pytest.raises(PipelineError) as caught:
            shard_copy.fetch(base, token, mnt / "incoming" / "shard-1", _sha(raw))
        message = str(caught.value)
        assert message.startswith(f"shard-fetch: disk full: no space left on the filesystem at "
                                  f"{mnt} ") and "\n" not in message
        assert caught.value.__cause__ is None and not (mnt / "incoming" / "shard-1").exists()
