"""Which way a shard's hidden states reach the training box (docs/pipeline.md, "Sharded
extraction"): straight onto storage the training box shares with the shard box, or, only when
the operator asks (`--relay-through-console`), through the console's own links.

Why a marker and not a guess from paths: two boxes can show the same path on different disks
(each its own /data), and one NFS export can sit under different paths. So the training box
writes a file with a fresh random token under its output directory, and each shard box reads
that path: only a box that sees the token there sees the training box's storage. The token is
new every run, so a stale marker on a box's own disk cannot pass.

A box that does not share it but that the training box can reach copies its shard box to box
(remote/ops/shard_copy.py): the console probes that route before anything starts.

Why the relay needs asking for: at Kimi-K2.5's width every token is ~57 KB of states; a real
dataset is terabytes, days through a laptop. Before it starts, the relay says how many bytes and
how long, from a transfer of `PROBE_BYTES` timed over each link it will use.
"""

from __future__ import annotations

import posixpath
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from remote.errors import StageFailed, UsageError
from remote.link.transport import Transport

MARKER_DIR = ".eagle3-shared-storage"
PROBE_BYTES = 4 << 20  # a few seconds on a slow link, enough to see its rate on a fast one


async def write_marker(home: Transport, output_dir: str) -> tuple[str, str]:
    """(path, token): a fresh marker under the training box's output directory."""
    token = secrets.token_hex(16)
    folder = posixpath.join(output_dir, MARKER_DIR)
    path = posixpath.join(folder, token)
    done = await home.run(["sh", "-c", 'mkdir -p "$1" && printf %s "$2" > "$1/$2"', "sh",
                           folder, token], timeout=60)
    if done.returncode != 0:
        raise StageFailed(f"cannot write under the output directory {output_dir} on the "
                          f"training box: {(done.stderr or done.stdout).strip()[-200:]}")
    return path, token


async def sees_marker(box: Transport, path: str, token: str) -> bool:
    done = await box.run(["cat", path], timeout=60)
    return done.returncode == 0 and done.stdout.strip() == token


async def remove_marker(home: Transport, path: str) -> None:
    await home.run(["sh", "-c", 'rm -f "$1"; rmdir "$(dirname "$1")" 2>/dev/null; true', "sh",
                    path], timeout=60)


def refuse_relay(home: str, output_dir: str, apart: list[str],
                 unreachable: dict[str, str] | None = None) -> UsageError:
    """The one line when boxes neither share the training box's storage nor can be reached by
    it for a box-to-box copy, and no relay was asked (`unreachable`: box -> why not)."""
    why = "; ".join(f"{b}: {w}" for b, w in (unreachable or {}).items())
    return UsageError(
        f"extract host{'s' if len(apart) > 1 else ''} {', '.join(apart)} "
        f"{'do' if len(apart) > 1 else 'does'} not share {home}'s output storage ({output_dir})"
        + (f" and {home} cannot reach {'them' if len(apart) > 1 else 'it'} for a box-to-box "
           f"copy ({why})" if why else "")
        + ": nothing started; no hidden states cross the console unless asked. Put output_dir "
        f"on storage every box mounts at the same path, let {home} reach "
        f"{'them' if len(apart) > 1 else 'it'} (extract.addresses, extract.copy_port), or run "
        "again with --relay-through-console (it prints the bytes and the time it would take "
        "first)")


@dataclass
class LinkRate:
    down: float  # bytes/s, shard box -> console
    up: float  # bytes/s, console -> training box


async def measure(box: Transport, home: Transport, scratch: str, home_scratch: str,
                  size: int = PROBE_BYTES) -> LinkRate:
    """Both legs a relay uses, timed with `size` random bytes (incompressible), then removed."""
    src = posixpath.join(scratch, f".eagle3-link-probe-{secrets.token_hex(4)}")
    dest = posixpath.join(home_scratch, posixpath.basename(src))
    made = await box.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && head -c "$2" /dev/urandom '
                          '> "$1"', "sh", src, str(size)], timeout=120)
    if made.returncode != 0:
        raise StageFailed(f"cannot measure the link: {made.stderr.strip()[-200:]}")
    try:
        with tempfile.TemporaryDirectory(prefix="eagle3-link-") as tmp:
            local = Path(tmp) / "probe"
            t0 = time.monotonic()
            await box.get(src, local)
            down = size / max(time.monotonic() - t0, 1e-6)
            await home.run(["mkdir", "-p", home_scratch], timeout=60)
            t0 = time.monotonic()
            await home.put(local, dest)
            up = size / max(time.monotonic() - t0, 1e-6)
    finally:
        await box.run(["rm", "-f", src], timeout=60)
        await home.run(["rm", "-f", dest], timeout=60)
    return LinkRate(down, up)


def estimate_seconds(by_box: dict[str, int], rates: dict[str, LinkRate]) -> float:
    """Each byte is pulled over its box's link and pushed over the training box's one: the pulls
    of different boxes may overlap, the pushes share one link, so the slowest pull plus every
    push (an estimate, not a bound)."""
    pull = max((n / rates[b].down for b, n in by_box.items() if n), default=0.0)
    push = sum(n / rates[b].up for b, n in by_box.items())
    return pull + push


def duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
