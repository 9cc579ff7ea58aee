"""The box-to-box copy (remote/ops/shard_copy.py, pipeline/shard_copy.py) on this machine's own
transport: real `python -m pipeline shard-serve` / `shard-fetch` processes on loopback. The probe
reaching the server; a box the training box cannot reach (its python in a network namespace of
its own: what a firewall in between looks like); a port in use; a wrong token; a file whose bytes
differ from the shard's manifest (refused, nothing left to place). The fleet test
(tests/e2e/test_sharded_extract.py) copies real shards between boxes over SSH."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import sys
from pathlib import Path

import pytest

from pipeline import shard_copy as box_side
from pipeline.errors import PipelineError
from remote.errors import UsageError
from remote.link.hosts import HostConfig
from remote.link.transport import LocalTransport
from remote.ops import shard_copy, shard_route
from remote.pipeline_runner import PipelineRunner
from remote.spine.bus import EventBus

ADDRESS = "127.0.0.3"  # a loopback address of its own, as a shard box's


def make_shard(d: Path, n: int = 3) -> dict[str, object]:
    """A finished shard as shard-extract leaves it: files and shard.json (name, size, sha256)."""
    hs = d / "hidden_states"
    hs.mkdir(parents=True)
    files = []
    for i in range(n):
        data = bytes([i]) * (1000 + i) + b"states"
        (hs / f"hs_{i}.safetensors").write_bytes(data)
        files.append({"name": f"hs_{i}.safetensors", "size": len(data),
                      "sha256": hashlib.sha256(data).hexdigest()})
    m = {"key": "k", "format": "0.9", "count": n, "files": files}
    (d / "shard.json").write_text(json.dumps(m))
    return m


def runner(transport: LocalTransport, root: Path, python: str = sys.executable) -> PipelineRunner:
    host = HostConfig(name="local", python=python, workdir=str(root / "box"))
    return PipelineRunner(transport, host, EventBus(), in_place=True)


async def test_the_probe_reaches_a_server_with_its_token_and_the_server_stops(
        local_transport: LocalTransport, tmp_path: Path) -> None:
    box = runner(local_transport, tmp_path)
    assert await shard_copy.probe(box, box, ADDRESS, 0) == ""
    server = await shard_copy.start_server(box, None, ADDRESS, 0)
    rc, last, why = await shard_copy._fetch(
        box, ["--probe", "--url", shard_copy.url(ADDRESS, server.port)], "0" * 32)
    assert rc == 2 and "refused the token (HTTP 403" in why and not last  # a wrong token
    rc, last, _ = await shard_copy._fetch(
        box, ["--probe", "--url", shard_copy.url(ADDRESS, server.port)], server.token)
    assert rc == 0 and last["ok"] is True
    assert await asyncio.wait_for(server.proc.wait(), 30) == 0  # /done ended it, one-shot
    await server.stop()
    assert any("refused a request from" in s and "wrong token" in s for s in server.said)
    with socket.socket() as s:  # nothing listens there any more
        assert s.connect_ex((ADDRESS, server.port)) != 0


async def test_a_box_the_training_box_cannot_reach_falls_to_the_refusal(
        local_transport: LocalTransport, tmp_path: Path) -> None:
    """The shard box's python in a network namespace of its own: its server listens, but not
    where the training box can connect. The probe says why; the refusal line names it and both
    ways on."""
    wrapper = tmp_path / "python-apart"
    wrapper.write_text(f'#!/bin/sh\nexec unshare --net -- {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    box = runner(local_transport, tmp_path, python=str(wrapper))
    why = await shard_copy.probe(box, runner(local_transport, tmp_path), ADDRESS, 0)
    assert why.startswith(f"cannot reach the shard box at http://{ADDRESS}:") and "refused" in why
    line = str(shard_route.refuse_relay("box1", "/data/out", ["box3"], {"box3": why}))
    assert line.startswith("extract host box3 does not share box1's output storage (/data/out) "
                           "and box1 cannot reach it for a box-to-box copy (box3: cannot reach")
    assert "--relay-through-console" in line and "extract.addresses" in line
    assert "nothing started" in line and "\n" not in line


async def test_a_port_in_use_is_one_line(local_transport: LocalTransport, tmp_path: Path) -> None:
    box = runner(local_transport, tmp_path)
    with socket.socket() as held:
        held.bind((ADDRESS, 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(UsageError, match=rf"local: cannot serve its shard to the training "
                           rf"box: shard-serve: port {port} on {ADDRESS} is in use: set "
                           r"extract.copy_port"):
            await shard_copy.probe(box, box, ADDRESS, port)


async def test_a_file_whose_bytes_differ_is_refused_and_nothing_is_left(
        local_transport: LocalTransport, tmp_path: Path) -> None:
    """The manifest as the console read it must be the one served, and every file must match
    the manifest as it arrives: else the staging directory is removed, nothing to place."""
    box = runner(local_transport, tmp_path)
    shard = tmp_path / "shard"
    make_shard(shard)
    digest = hashlib.sha256((shard / "shard.json").read_bytes()).hexdigest()
    dest = tmp_path / "incoming" / "shard-2"

    async def fetch(sha: str) -> dict[str, object]:
        server = await shard_copy.start_server(box, str(shard), ADDRESS, 0)
        try:
            return await asyncio.to_thread(box_side.fetch, shard_copy.url(ADDRESS, server.port),
                                           server.token, dest, sha)
        finally:
            await server.stop()

    got = await fetch(digest)  # whole: every file there, the manifest last
    assert got == {"files": 3, "copied": sum((shard / "hidden_states" / f).stat().st_size
                                             for f in ("hs_0.safetensors", "hs_1.safetensors",
                                                       "hs_2.safetensors"))}
    assert (dest / "shard.json").read_bytes() == (shard / "shard.json").read_bytes()
    assert [p.name for p in sorted((dest / "hidden_states").iterdir())] == \
        ["hs_0.safetensors", "hs_1.safetensors", "hs_2.safetensors"]

    with pytest.raises(PipelineError, match="differs from the one the console read"):
        await fetch("0" * 64)
    assert not dest.exists()

    (shard / "hidden_states" / "hs_1.safetensors").write_bytes(b"\0" * 1001 + b"states")
    with pytest.raises(PipelineError, match=r"hs_1.safetensors arrived with sha256 .*the "
                       r"shard's manifest says .*refused, nothing placed"):
        await fetch(digest)
    assert not dest.exists()  # hs_0 had arrived whole: removed with the rest
