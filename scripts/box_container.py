#!/usr/bin/env python3
"""A real container on this machine, standing for the deployed container of a GPU box.

    python scripts/box_container.py up NAME [--env vllm032|vllm016]  -> starts it (or keeps it)
    python scripts/box_container.py down NAME                        -> removes it
    python scripts/box_container.py status [NAME]                    -> lists them / one of them

Podman 4.3 from Debian runs here as root (docs/container.md has the recipe and its reasons):
no image registry is reachable, so the container's root filesystem is this machine's own `/`,
bind-mounted read-only at ROOTFS and used with `--rootfs ROOTFS:O`, an overlay that keeps every
write made inside the container (a patched worker file) in the container: the host's files stay
byte-identical, and recreating the container starts from a clean overlay, as a redeployed
production container does. The box environments (scripts/box_env.py) sit under the host's
home and so are inside it at the same paths.

`up` prints the container's python (the box environment's) and the console.toml lines of a host
that reaches it. Where podman is missing and cannot be installed, one line says why (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

ROOTFS = Path(os.environ.get("EAGLE3_CONTAINER_ROOTFS", "/var/lib/eagle3-console/rootfs"))
# crun (podman's default) refuses this kernel's hybrid cgroups; runc with cgroupfs works.
GLOBAL = ["--runtime", "runc", "--cgroup-manager=cgroupfs"]
# Podman's default ulimits (nofile 1048576) exceed the sandbox's hard limits, and setrlimit
# fails without CAP_SYS_RESOURCE: ask for at most what this process may have.
NOFILE_MAX = 20000
NPROC_MAX = 32768
HERE = Path(__file__).resolve().parent
PACKAGES = ("podman", "runc", "podman-docker")


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


def podman_argv(*args: str) -> list[str]:
    return ["podman", *GLOBAL, *args]


def ensure_podman() -> str | None:
    """None when podman, runc and podman-docker's `docker` are here; else why not (one line)."""
    def missing() -> list[str]:
        have = {"podman": shutil.which("podman"), "runc": shutil.which("runc") or
                (Path("/usr/sbin/runc").exists() or None),
                "podman-docker": Path("/usr/bin/docker").exists() or None}
        return [p for p in PACKAGES if not have[p]]

    need = missing()
    if not need:
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return (f"{', '.join(need)} not installed and cannot be installed here (not root, or no "
                "apt-get): apt-get install podman runc podman-docker")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
    done = subprocess.run(["apt-get", "install", "-y", "-qq", *PACKAGES], env=env,
                          capture_output=True, text=True)
    if missing():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"apt-get install {' '.join(PACKAGES)} failed: {tail}"
    return None


def ensure_rootfs() -> str | None:
    """A read-only bind mount of `/` at ROOTFS (`--rootfs /` itself fails: sysfs is busy)."""
    if os.path.ismount(ROOTFS):
        return None
    ROOTFS.mkdir(parents=True, exist_ok=True)
    for argv in (["mount", "--bind", "/", str(ROOTFS)],
                 ["mount", "-o", "remount,ro,bind", str(ROOTFS)]):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            return f"{' '.join(argv)}: {done.stderr.strip() or 'failed'}"
    return None


def inspect(name: str) -> dict[str, object] | None:
    done = subprocess.run(podman_argv("inspect", "--type", "container", name),
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None
    data = json.loads(done.stdout or "[]")
    return data[0] if data else None


def box_python(env: str) -> str:
    done = subprocess.run([sys.executable, str(HERE / "box_env.py"), env, "--quiet"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(fail(f"box environment {env}: {done.stderr.strip()[-300:]}"))
    return done.stdout.strip()


def limits() -> tuple[int, int]:
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    cap = lambda v, top: top if v == resource.RLIM_INFINITY else min(v, top)  # noqa: E731
    return cap(nofile, NOFILE_MAX), cap(nproc, NPROC_MAX)


def run_argv(name: str) -> list[str]:
    nofile, nproc = limits()
    # --network=host: vLLM's port is the host's, as with a box's `docker run --network=host`;
    # --ipc=host: vLLM's CPU workers share memory through /dev/shm (64 MB by default).
    return podman_argv("run", "-d", "--name", name, "--network=host", "--ipc=host",
                       "--ulimit", f"nofile={nofile}:{nofile}",
                       "--ulimit", f"nproc={nproc}:{nproc}",
                       "--label", "eagle3-console=box",
                       "--rootfs", f"{ROOTFS}:O", "sleep", "infinity")


def up(name: str, env: str | None) -> int:
    why = ensure_podman() or ensure_rootfs()
    if why:
        return fail(why)
    state = inspect(name)
    if state is not None and not state.get("State", {}).get("Running"):  # type: ignore[union-attr]
        subprocess.run(podman_argv("rm", "-f", name), capture_output=True)
        state = None
    if state is None:
        done = subprocess.run(run_argv(name), capture_output=True, text=True)
        if done.returncode != 0:
            return fail(f"podman run {name}: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        state = inspect(name)
    python = box_python(env) if env else sys.executable
    print(python)
    print(f"# console.toml: the container {name} on this machine (runtime podman; through sshd,"
          " add ssh = \"...\")", file=sys.stderr)
    print(f'[hosts.{name}]\nruntime = "podman"\ncontainer = "{name}"\npython = "{python}"',
          file=sys.stderr)
    return 0


def down(name: str) -> int:
    if shutil.which("podman") is None:
        return fail("podman is not installed (nothing to remove)")
    done = subprocess.run(podman_argv("rm", "-f", "-t", "0", name), capture_output=True, text=True)
    if done.returncode != 0 and inspect(name) is not None:
        return fail(f"podman rm {name}: {done.stderr.strip()}")
    return 0


def status(name: str | None) -> int:
    if shutil.which("podman") is None:
        return fail("podman is not installed (scripts/box_container.py up installs it)")
    argv = podman_argv("ps", "-a", "--filter", "label=eagle3-console=box", "--format",
                       "{{.Names}} {{.ID}} {{.Status}}")
    done = subprocess.run(argv, capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if name is None or ln.split()[0] == name]
    print("\n".join(lines) if lines else "no box container" + (f" named {name}" if name else ""))
    return 0 if lines or name is None else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="start the container NAME (kept when already running)")
    u.add_argument("name")
    u.add_argument("--env", choices=("vllm032", "vllm016"),
                   help="print this box environment's python (built once, cached)")
    d = sub.add_parser("down", help="remove the container NAME")
    d.add_argument("name")
    s = sub.add_parser("status", help="the box containers and their state")
    s.add_argument("name", nargs="?")
    args = p.parse_args(argv)
    if args.cmd == "up":
        return up(args.name, args.env)
    if args.cmd == "down":
        return down(args.name)
    return status(args.name)


if __name__ == "__main__":
    sys.exit(main())
