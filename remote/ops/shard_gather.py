"""A finished shard's hidden states into the training box's extract directory (docs/pipeline.md,
"Sharded extraction"), renumbered and placed by `python -m pipeline shard-gather` there after
checking each file's sha256 against the shard's manifest.

A shard written on storage the training box shares (its own shard, or a box that saw the
training box's marker: remote/ops/shard_route.py) is renamed into place there: no byte crosses
the console. A shard box the training box can reach copies its shard straight there
(remote/ops/shard_copy.py), again with no byte through the console. Any other shard is relayed,
only when the operator asked for it: pulled from the
shard box over the console's own SSH link, checked here, sent to the training box, checked again
there. Why the console can relay at all: it is the one party holding a trusted link to every
box; boxes of a fleet need not trust or reach one another. Why not by default: at real width
that is terabytes through a laptop.
"""

from __future__ import annotations

import json
import posixpath
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote.errors import RemoteCommandError, StageFailed
from remote.link.transport import Transport
from remote.link.upload import sha256_file, upload_many
from remote.pipeline_runner import PipelineRunner, last_error
from remote.spine import events as ev

SHARD_MANIFEST = "shard.json"  # pipeline.shards.SHARD_MANIFEST, as the box writes it


@dataclass
class Gathered:
    shard: int
    host: str
    files: int
    bytes: int
    transferred: bool  # through the console (the relay)
    packages: dict[str, str]  # what the shard box extracted with (torch, transformers, vllm...)
    copied: bool = False  # box to box (remote/ops/shard_copy.py), not through the console


async def read_shard_manifest(transport: Transport, shard_dir: str) -> dict[str, Any]:
    done = await transport.run(["cat", posixpath.join(shard_dir, SHARD_MANIFEST)], timeout=60)
    try:
        return dict(json.loads(done.stdout))
    except ValueError:
        raise StageFailed(f"no shard manifest in {shard_dir}: {done.stderr.strip()[-200:]}") \
            from None


async def place(home: PipelineRunner, config: str, shard_dir: str, start: int, *,
                move: bool) -> dict[str, Any]:
    """`python -m pipeline shard-gather` on the training box: checks, renumbers, places."""
    args = ["shard-gather", "--config", config, "--dir", shard_dir, "--start", str(start)]
    rc, out, err = await home._direct(*args, *(["--move"] if move else []), timeout=3600)
    if rc != 0:
        raise StageFailed(f"gathering {shard_dir} on {home.host.name}: {last_error(out, err)}")
    try:
        return dict(json.loads(out.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        raise RemoteCommandError(["python", "-m", "pipeline", "shard-gather"], rc, out) from None


async def gather(home: PipelineRunner, config: str, extract_dir: str, *, shard: int, start: int,
                 host: str, transport: Transport, shard_dir: str,
                 shared: bool = False) -> Gathered:
    """Shard `shard` (its first sample `start`) from `shard_dir` on `host` into the training
    box (`home`). `shared`: `shard_dir` is on storage the training box sees at that path."""
    if host == home.host.name or shared:
        # On shared storage the shard's directory is moved (renamed) into place; a shard in the
        # training box's own workdir is linked (a copy across filesystems).
        got = await place(home, config, shard_dir, start, move=shared)
        where = (f"ran on {host} itself" if host == home.host.name
                 else f"written by {host} on storage {home.host.name} shares")
        home.bus.emit(ev.CONSOLE_INFO, host, message=f"shard {shard + 1}: {got['gathered']} "
                      f"files {where}, sha256 checked and placed from sample {start} with no "
                      "transfer", shard=shard + 1, file_count=int(got["gathered"]),
                      bytes=int(got["bytes"]))
        return Gathered(shard, host, int(got["gathered"]), int(got["bytes"]), False,
                        dict(got.get("packages") or {}))
    m = await read_shard_manifest(transport, shard_dir)
    staging = posixpath.join(extract_dir, ".incoming", f"shard-{shard + 1}")
    size = 0
    with tempfile.TemporaryDirectory(prefix="eagle3-shard-") as tmp:
        local = Path(tmp)
        (local / SHARD_MANIFEST).write_text(json.dumps(m))
        pairs = [(local / SHARD_MANIFEST, posixpath.join(staging, SHARD_MANIFEST))]
        for f in m.get("files", []):
            dest = local / "hidden_states" / f["name"]
            await transport.get(posixpath.join(shard_dir, "hidden_states", f["name"]), dest)
            if sha256_file(dest) != f["sha256"]:
                raise StageFailed(f"shard {shard + 1} from {host}: {f['name']} arrived with "
                                  "another sha256 than the shard's manifest says: not gathered")
            pairs.append((dest, posixpath.join(staging, "hidden_states", f["name"])))
            size += int(f["size"])
        # No per-file upload events: a shard has thousands of files; one line says it below.
        await upload_many(home.transport, pairs, python=home.python)
    got = await place(home, config, staging, start, move=True)
    home.bus.emit(ev.CONSOLE_INFO, host, message=f"shard {shard + 1}: {got['gathered']} files "
                  f"({size} bytes) pulled from {host}, sha256 checked here and on "
                  f"{home.host.name}, placed from sample {start}", shard=shard + 1,
                  file_count=int(got["gathered"]), bytes=size)
    return Gathered(shard, host, int(got["gathered"]), size, True,
                    dict(got.get("packages") or {}))


async def gather_direct(home: PipelineRunner, config: str, extract_dir: str, *, shard: int,
                        start: int, box: PipelineRunner, shard_dir: str, address: str,
                        port: int) -> Gathered:
    """Shard `shard` fetched by the training box straight from `box` at `address`, each file's
    sha256 checked on arrival against the shard's manifest, then placed from sample `start`."""
    from remote.ops import shard_copy

    staging = posixpath.join(extract_dir, ".incoming", f"shard-{shard + 1}")
    host = box.host.name

    def progress(copied: int, of: int) -> None:
        home.bus.emit(ev.CONSOLE_INFO, host, message=f"shard {shard + 1}: {copied} of {of} B "
                      f"copied from {host} to {home.host.name} box to box", shard=shard + 1,
                      copied=copied, of=of)

    got = await shard_copy.copy(home, config, box, shard_dir=shard_dir, staging=staging,
                                start=start, address=address, port=port, on_progress=progress)
    size = int(got["bytes"])
    home.bus.emit(ev.CONSOLE_INFO, host, message=f"shard {shard + 1}: {got['gathered']} files "
                  f"({size} bytes) copied box to box from {host} to {home.host.name} "
                  f"({shard_copy.url(address, port) if port else address}), sha256 checked on "
                  f"arrival, placed from sample {start}", shard=shard + 1,
                  file_count=int(got["gathered"]), bytes=size)
    return Gathered(shard, host, int(got["gathered"]), size, False,
                    dict(got.get("packages") or {}), copied=True)
