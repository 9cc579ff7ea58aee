"""Which container this process runs in, as seen from inside (stdlib, Python >= 3.8).

`/.dockerenv` alone proves nothing: some hosts carry one (this project's own test machine
does, outside any container). The evidence read here, strongest first:
  - `/run/.containerenv` (podman; `key="value"` lines with name, id, image when privileged);
  - the container's 64-hex id in `/proc/self/cgroup` (`docker/ID`, `libpod-ID`, `docker-ID.scope`)
    or in `/proc/self/mountinfo` (podman's `overlay-containers/ID/`, docker's `containers/ID/`
    behind /etc/hostname, /etc/hosts, /etc/resolv.conf).
A box counts as a container only with one of those; the console matches the id against the
runtime's own answer (`<runtime> inspect`, remote/link/container.py).
"""

import os
import re

_ID = re.compile(r"(?:docker[-/]|libpod-|overlay-containers/|/containers/)([0-9a-f]{64})")


def _read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except (OSError, IOError):
        return ""


def containerenv(path="/run/.containerenv"):
    """podman's file as a dict (empty when unprivileged), or None when absent."""
    if not os.path.exists(path):
        return None
    out = {}
    for line in _read(path).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def ids_in(text):
    return sorted(set(_ID.findall(text)))


# What a runtime mounts into its container from the container's own storage directory.
_OWN_MOUNTS = ("/", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/run/.containerenv")


def mount_ids(text):
    """Ids in the mounts of this process's own root and its runtime-provided files only: the
    host's mountinfo lists its containers' overlays too (under other mount points)."""
    found = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] in _OWN_MOUNTS:
            found.update(_ID.findall(line))
    return sorted(found)


def identify(root="/"):
    """{"in_container": bool, "evidence": [...], "id": ID or None, ...}."""
    env = containerenv(os.path.join(root, "run/.containerenv"))
    from_cgroup = ids_in(_read(os.path.join(root, "proc/self/cgroup")))
    from_mounts = mount_ids(_read(os.path.join(root, "proc/self/mountinfo")))
    evidence = [where for where, found in (("/run/.containerenv", env is not None),
                                           ("/proc/self/cgroup", from_cgroup),
                                           ("/proc/self/mountinfo", from_mounts)) if found]
    dockerenv = os.path.exists(os.path.join(root, ".dockerenv"))
    cid = (env or {}).get("id") or next(iter(from_cgroup or from_mounts), None)
    return {
        "in_container": bool(evidence),
        "evidence": evidence,
        "dockerenv": dockerenv,  # reported, never trusted alone
        "id": cid,
        "name": (env or {}).get("name"),
        "image": (env or {}).get("image"),
        "engine": (env or {}).get("engine") or ("podman" if env is not None else None),
        "hostname": _read(os.path.join(root, "etc/hostname")).strip() or None,
    }
