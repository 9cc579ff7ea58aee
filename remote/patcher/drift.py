"""Which container a patch was applied to, kept on the box beside it, to notice a redeploy.

A patch lives in the container's writable layer. When the container is recreated (a redeploy,
`docker rm` + `docker run` of the same image) the worker file is the image's original again and
the patch is silently gone: the usual way a fix is lost in production. So `patch apply` records
the container's id and start time in `$HOME/.eagle3-console/patches/NAME.json` on the box,
outside the container (it must survive the container), and `patch verify` compares that record
with what the runtime reports now.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from remote.link.container import ContainerTransport
from remote.link.container_identity import ContainerIdentity
from remote.link.transport import Transport

_DIR = '"$HOME/.eagle3-console/patches"'


def record_name(container: str) -> str:
    """A file name for any container name (names may hold spaces, `;` or `/`)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", container)
    return f"{safe or '_'}.json"


def container_of(transport: Transport) -> ContainerTransport | None:
    return transport if isinstance(transport, ContainerTransport) else None


async def write(transport: Transport, recipes: dict[str, list[str]]) -> None:
    """After an apply through a container: its id, start time and the recipes in effect."""
    c = container_of(transport)
    if c is None or c.identity is None:
        return
    ident = c.identity
    body = json.dumps({"container": c.container, "id": ident.id, "started_at": ident.started_at,
                       "created": ident.created, "applied_at": time.time(),
                       "recipes": recipes}, sort_keys=True)
    script = (f'd={_DIR}; mkdir -p "$d" && cat > "$d/$1.part" && mv -f "$d/$1.part" "$d/$1"')
    await c.inner.run(["sh", "-c", script, "sh", record_name(c.container)], input=body,
                      timeout=60, check=True)


async def clear(transport: Transport) -> None:
    """After a rollback that left nothing in effect: no patch to lose any more."""
    c = container_of(transport)
    if c is None:
        return
    await c.inner.run(["sh", "-c", f'rm -f {_DIR}/"$1"', "sh", record_name(c.container)],
                      timeout=60)


async def read(transport: Transport) -> dict[str, Any] | None:
    c = container_of(transport)
    if c is None:
        return None
    done = await c.inner.run(["sh", "-c", f'cat {_DIR}/"$1"', "sh", record_name(c.container)],
                             timeout=60)
    if done.returncode != 0:
        return None
    try:
        data = json.loads(done.stdout)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def drift_line(rec: dict[str, Any] | None, now: ContainerIdentity | None) -> str | None:
    """The one line `patch verify` says when the container the patch went into is gone."""
    if rec is None or now is None or rec.get("id") == now.id:
        return None
    was = str(rec.get("id") or "?")[:12]
    when = now.created or now.started_at
    return (f"not applied: container {now.name} was recreated at {when} "
            f"(was {was}, now {now.short_id}); run patch apply")
