"""Which container a host's name points at now: id, start time, image or rootfs.

Read from `<runtime> inspect --type container NAME` (a JSON list; docker and podman differ in
a few fields: docker's Name has a leading `/`, its image is Config.Image; podman names a
--rootfs container's root in Rootfs and its image in ImageName). The id and start time are
what a patch records (remote/patcher/drift.py): a recreated container has a new id and a
clean filesystem, which is how a patch is lost when a production container is redeployed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from remote.errors import ContainerError


@dataclass(frozen=True, slots=True)
class ContainerIdentity:
    name: str
    id: str
    started_at: str
    created: str
    running: bool
    status: str
    image: str | None
    rootfs: str | None

    @property
    def short_id(self) -> str:
        return self.id[:12]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def identity_from_inspect(stdout: str, name: str) -> ContainerIdentity:
    try:
        data = json.loads(stdout)
    except ValueError:
        raise ContainerError(f"inspect of container {name!r} printed no JSON: {stdout[:120]!r}"
                             ) from None
    if isinstance(data, list):
        data = data[0] if data else None
    if not isinstance(data, dict) or not isinstance(data.get("Id"), str):
        raise ContainerError(f"inspect of container {name!r} printed no container")
    state: dict[str, Any] = data["State"] if isinstance(data.get("State"), dict) else {}
    config: dict[str, Any] = data["Config"] if isinstance(data.get("Config"), dict) else {}
    image = data.get("ImageName") or config.get("Image") or None
    return ContainerIdentity(
        name=str(data.get("Name") or name).lstrip("/"), id=data["Id"],
        started_at=str(state.get("StartedAt") or ""), created=str(data.get("Created") or ""),
        running=state.get("Running") is True, status=str(state.get("Status") or "unknown"),
        image=str(image) if image else None, rootfs=data.get("Rootfs") or None)
