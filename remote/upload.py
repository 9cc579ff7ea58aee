"""Content-hashed uploads: a file whose sha256 already matches on the box is not sent again.

Probes, the patcher's helpers and the pipeline are re-uploaded on every run; hashing first makes
that free when nothing changed, which matters over a slow link.
"""

from __future__ import annotations

import hashlib
import posixpath
from pathlib import Path

from remote import events as ev
from remote.bus import EventBus
from remote.transport import Transport

# Runs on the box with whatever python is there (>= 3.8); prints the hex digest or nothing.
_REMOTE_SHA = (
    "import hashlib,sys\n"
    "try:\n"
    "    f=open(sys.argv[1],'rb')\n"
    "except OSError:\n"
    "    sys.exit(0)\n"
    "h=hashlib.sha256()\n"
    "for b in iter(lambda: f.read(1<<20), b''):\n"
    "    h.update(b)\n"
    "print(h.hexdigest())\n"
)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


async def remote_sha256(transport: Transport, path: str, python: str = "python3") -> str | None:
    done = await transport.run([python, "-c", _REMOTE_SHA, path], timeout=120)
    digest = done.stdout.strip()
    return digest if done.returncode == 0 and len(digest) == 64 else None


async def upload(
    transport: Transport,
    local: Path,
    remote: str,
    *,
    python: str = "python3",
    bus: EventBus | None = None,
    host: str = "",
) -> bool:
    """Put `local` at `remote` unless identical content is already there. True if sent."""
    digest = sha256_file(local)
    if await remote_sha256(transport, remote, python) == digest:
        return False
    await transport.run(["mkdir", "-p", posixpath.dirname(remote) or "."], check=True)

    def progress(done: int, total: int) -> None:
        if bus is not None:
            bus.emit(ev.UPLOAD_PROGRESS, host, path=remote, done=done, total=total)

    await transport.put(local, remote, progress)
    return True
