"""The job helper on the box: resolve the workdir (`~` means the box user's home) and upload the
helper with its sibling modules once, into a directory named after their content, so an
unchanged helper is never sent again and consoles of two versions never share one."""

from __future__ import annotations

import hashlib
import posixpath
from pathlib import Path

from remote.errors import Dropped, JobHelperError, RemoteCommandError
from remote.link.transport import Transport
from remote.link.upload import probe_modules, upload_probe
from remote.spine.bus import EventBus

HELPER = Path(__file__).with_name("helper.py")

# One round trip before the first operation: the absolute workdir, and the sha256 of the helper
# already on the box (empty when absent). The upload puts the siblings first, so a helper with
# the right content in its directory has them beside it.
_RESOLVE = (
    "import hashlib,os,sys\n"
    "root=os.path.abspath(os.path.expanduser(sys.argv[1]))\n"
    "p=os.path.join(root,'.console',sys.argv[2])\n"
    "try:\n"
    "    d=hashlib.sha256(open(p,'rb').read()).hexdigest()\n"
    "except OSError:\n"
    "    d=''\n"
    "print(root)\n"
    "print(d)\n"
)


def helper_files() -> list[Path]:
    """The helper's sibling modules (what it imports from its own directory), then the helper."""
    return [*probe_modules(HELPER), HELPER]


def _digests() -> tuple[str, str]:
    """(sha256 of the helper, sha256 over the helper and its siblings: its directory's name)."""
    whole = hashlib.sha256()
    for path in helper_files():
        whole.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return hashlib.sha256(HELPER.read_bytes()).hexdigest(), whole.hexdigest()


async def install_helper(transport: Transport, workdir: str, *, python: str,
                         bus: EventBus | None, host: str) -> tuple[str, str]:
    """(absolute workdir, path of the helper on the box), uploading the helper when absent."""
    digest, whole = _digests()
    name = f"job_helper-{whole[:12]}/{HELPER.name}"
    done = await transport.run([python, "-c", _RESOLVE, workdir, name], timeout=60)
    out = done.stdout.splitlines()
    if done.returncode == 127:
        raise JobHelperError(f"{python} not found on {host or 'the box'} "
                             "(set the host's python in console.toml)")
    if done.returncode is None or (done.returncode < 0 and not transport.connected):
        raise Dropped(f"the resolve of {workdir} ended without an exit status")
    if done.returncode != 0 or len(out) != 2 or not out[0].startswith("/"):
        raise RemoteCommandError([python, "-c", "<resolve workdir>"],
                                 done.returncode, done.stderr or done.stdout)
    root = out[0]
    helper = posixpath.join(root, ".console", name)
    if out[1] != digest:
        await upload_probe(transport, HELPER, helper, python=python, bus=bus, host=host)
    return root, helper
