"""Content-hashed uploads: a file whose sha256 already matches on the box is not sent again.

Probes, the patcher's helpers and the pipeline are re-uploaded on every run; hashing first makes
that free when nothing changed, which matters over a slow link.
"""

from __future__ import annotations

import hashlib
import posixpath
import time
from pathlib import Path

from remote.errors import RemoteError
from remote.link.transport import Transport
from remote.spine import events as ev
from remote.spine.bus import EventBus

# A multi-GB upload reports its progress once a second, not once per SFTP block (thousands
# of events in the session for one file); every upload reports its end.
PROGRESS_EVERY_S = 1.0

# Runs on the box with whatever python is there (>= 3.8), in one round trip for all the paths on
# argv: expands `~` (argv is quoted, so no shell does it), creates the parent directory, and
# prints, per path, the expanded path and the current digest ("-" when the file is absent). One
# round trip per tree, not per file: the pipeline's 31 modules checked one `python -c` at a time
# cost 6–12 s of every run over SSH with nothing to send.
_REMOTE_PREPARE = (
    "import hashlib,os,sys\n"
    "for a in sys.argv[1:]:\n"
    "    p=os.path.expanduser(a)\n"
    "    os.makedirs(os.path.dirname(p) or '.',exist_ok=True)\n"
    "    print(p)\n"
    "    try:\n"
    "        f=open(p,'rb')\n"
    "    except OSError:\n"
    "        print('-')\n"
    "        continue\n"
    "    h=hashlib.sha256()\n"
    "    with f:\n"
    "        for b in iter(lambda: f.read(1<<20), b''):\n"
    "            h.update(b)\n"
    "    print(h.hexdigest())\n"
)


def sha256_file(path: Path) -> str:
    """The file's sha256 on this machine (Python 3.11's file_digest; the box side, which may
    run an older python, hashes by hand: _REMOTE_PREPARE, pipeline.manifest.sha256_file)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


_EXPAND = "import os,sys\nprint(os.path.abspath(os.path.expanduser(sys.argv[1])))\n"


async def box_path(transport: Transport, path: str, python: str = "python3") -> str:
    """`path` as an absolute path on the box: `~` means the box user's home (or the
    container's), which only the box can expand; argv never goes through a shell that would,
    so a literal `~/eagle3` would otherwise become a directory named `~`. A relative path is
    made absolute there too: `-wd/probes/x.py` after the python would be read as an option."""
    if path.startswith("/"):
        return path
    done = await transport.run([python, "-c", _EXPAND, path], timeout=60)
    out = done.stdout.strip()
    if done.returncode != 0 or not out.startswith("/"):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RemoteError(f"cannot resolve {path!r} with {python} on the box: {tail}")
    return out


async def upload(
    transport: Transport,
    local: Path,
    remote: str,
    *,
    python: str = "python3",
    bus: EventBus | None = None,
    host: str = "",
) -> bool:
    """Put `local` at `remote` unless identical content is already there. True if sent.
    `remote` may start with `~` (expanded on the box)."""
    return await upload_many(transport, [(local, remote)], python=python, bus=bus, host=host) == 1


async def upload_many(
    transport: Transport,
    files: list[tuple[Path, str]],
    *,
    python: str = "python3",
    bus: EventBus | None = None,
    host: str = "",
) -> int:
    """`upload` of each (local, remote) pair, in order, with one round trip to learn what the box
    already has instead of one per file. Returns how many were sent."""
    if not files:
        return 0
    remotes = [remote for _, remote in files]
    done = await transport.run([python, "-c", _REMOTE_PREPARE, *remotes], timeout=120, check=True)
    lines = done.stdout.splitlines()
    if len(lines) != 2 * len(files):
        what = remotes[0] if len(remotes) == 1 else \
            f"{len(remotes)} files under {posixpath.dirname(remotes[0])}"
        raise RemoteError(f"{python} on the box gave no usable answer while preparing the upload "
                           f"of {what} (printed {done.stdout[:120]!r}): is it a working python?")
    sent = 0
    for i, (local, remote) in enumerate(files):
        expanded, current = lines[2 * i], lines[2 * i + 1]
        if current == sha256_file(local):
            continue

        last = [time.monotonic()]

        def progress(done: int, total: int, remote: str = remote, last: list[float] = last
                     ) -> None:
            # the end always; on the way, once a PROGRESS_EVERY_S (SFTP calls this per block)
            now = time.monotonic()
            if bus is not None and (done >= total or now - last[0] >= PROGRESS_EVERY_S):
                last[0] = now
                bus.emit(ev.UPLOAD_PROGRESS, host, path=remote, done=done, total=total)

        await transport.put(local, expanded, progress)
        sent += 1
    return sent


def probe_modules(script: Path) -> list[Path]:
    """The modules beside `script` that it imports, transitively (`import gpu_query`, `from .
    import gpu_query`), dependencies first: a probe runs on the box from its uploaded
    directory, so what it shares with other probes must be uploaded next to it. Read from the
    source, so a probe that starts sharing a module needs no list kept here."""
    found: list[Path] = []

    def visit(path: Path, seen: set[Path]) -> None:
        for name in _sibling_imports(path):
            module = path.with_name(f"{name}.py")
            if module.is_file() and module not in seen and module != script:
                seen.add(module)
                visit(module, seen)
                found.append(module)

    visit(script, set())
    return found


def _sibling_imports(path: Path) -> list[str]:
    import ast

    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names if "." not in a.name]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:
                names += [a.name for a in node.names]
            elif node.level <= 1 and node.module and "." not in node.module:
                names.append(node.module)
    return names


async def upload_probe(transport: Transport, script: Path, remote: str, *, python: str = "python3",
                       bus: EventBus | None = None, host: str = "") -> bool:
    """`upload` of a probe script to `remote` with the modules it imports from its own directory
    (probe_modules) beside it, those first, so the script never runs without them. True if
    anything was sent."""
    here = posixpath.dirname(remote)
    files = [(module, posixpath.join(here, module.name)) for module in probe_modules(script)]
    return await upload_many(transport, [*files, (script, remote)], python=python, bus=bus,
                             host=host) > 0
