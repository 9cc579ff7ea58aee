#!/usr/bin/env python3
"""A fleet of test boxes on this machine: N OpenSSH servers on 127.0.0.2, 127.0.0.3, ...

Why loopback addresses: every 127.0.0.N answers on Linux without configuration, so boxes that
differ by address and host key (as real hosts do) need no network and never leave the machine
(docs/design.md §10). Each box is its own sshd with its own host key, pid file, log and workdir;
one operator key logs into all of them, as one operator's key would. `up` writes
DIR/console.toml with the hosts `box1..boxN` and the group `fleet`, and DIR/fleet.json (what
`down` stops). Stdlib only: it runs before the project's venv exists.

Usage:
  python scripts/box_fleet.py up N [--dir DIR] [--python PY] [--box-python I=PY ...]
  python scripts/box_fleet.py down [--dir DIR]
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SSHD = os.environ.get("EAGLE3_SSHD", "/usr/sbin/sshd")
DEFAULT_DIR = Path(os.environ.get("EAGLE3_FLEET_DIR", "/tmp/eagle3-fleet"))
MAX_BOXES = 250  # 127.0.0.2 .. 127.0.0.251: loopback only, never any other address


def address(i: int) -> str:
    """Box i (1-based) listens on 127.0.0.(i+1): 127.0.0.1 stays the operator's own."""
    if not 1 <= i <= MAX_BOXES:
        raise ValueError(f"box {i}: only 1..{MAX_BOXES} (loopback 127.0.0.2..)")
    return f"127.0.0.{i + 1}"


def free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> None:
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _sshd_config(box: Path, addr: str, port: int, authorized: Path) -> str:
    return "\n".join([
        f"ListenAddress {addr}", f"Port {port}",
        f"HostKey {box / 'ssh_host_ed25519_key'}", f"PidFile {box / 'sshd.pid'}",
        f"AuthorizedKeysFile {authorized}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no", "AllowTcpForwarding yes", "Subsystem sftp internal-sftp",
        "LogLevel VERBOSE", "MaxSessions 100", "MaxStartups 100:30:200", "",
    ])


def _wait_banner(addr: str, port: int, log: Path, deadline: float) -> None:
    while True:
        try:
            with socket.create_connection((addr, port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else "(no log)"
            raise SystemExit(f"error: sshd on {addr}:{port} did not start: {tail}")
        time.sleep(0.05)


def start_box(root: Path, i: int, client_pub: Path) -> dict[str, object]:
    """Box i's sshd, daemonized (it writes its own pid file): it outlives this script."""
    addr = address(i)
    box = root / f"box{i}"
    (box / "workdir").mkdir(parents=True, exist_ok=True)
    _keygen(box / "ssh_host_ed25519_key")
    authorized = box / "authorized_keys"
    authorized.write_text(client_pub.read_text())
    authorized.chmod(0o600)
    port = free_port(addr)
    (box / "sshd_config").write_text(_sshd_config(box, addr, port, authorized))
    log = box / "sshd.log"
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    subprocess.run([SSHD, "-f", str(box / "sshd_config"), "-E", str(log)], check=True)
    _wait_banner(addr, port, log, time.monotonic() + 10)
    host_key = " ".join((box / "ssh_host_ed25519_key.pub").read_text().split()[:2])
    return {"name": f"box{i}", "address": addr, "port": port, "dir": str(box),
            "workdir": str(box / "workdir"), "pid_file": str(box / "sshd.pid"),
            "known_host": f"[{addr}]:{port} {host_key}"}


def console_toml(root: Path, boxes: list[dict[str, object]], pythons: dict[int, str]) -> str:
    lines: list[str] = []
    for n, b in enumerate(boxes, start=1):
        lines += [f"[hosts.{b['name']}]", f"ssh = {json.dumps(b['name'])}",
                  f"ssh_config = {json.dumps(str(root / 'ssh_config'))}",
                  f"known_hosts = {json.dumps(str(root / 'known_hosts'))}",
                  f"workdir = {json.dumps(b['workdir'])}",
                  f"python = {json.dumps(pythons[n])}", ""]
    names = ", ".join(json.dumps(b["name"]) for b in boxes)
    lines += ["[groups]", f"fleet = [{names}]", ""]
    return "\n".join(lines)


def up(n: int, root: Path, python: str, box_python: dict[int, str]) -> Path:
    if sys.platform != "linux":
        raise SystemExit("error: the loopback fleet needs Linux (127.0.0.N answers there)")
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        raise SystemExit(f"error: {SSHD} or ssh-keygen not found (make sshd)")
    if not 1 <= n <= MAX_BOXES:
        raise SystemExit(f"error: N must be 1..{MAX_BOXES} (got {n})")
    bad = sorted(set(box_python) - set(range(1, n + 1)))
    if bad:
        raise SystemExit(f"error: --box-python names box {bad[0]}, but the fleet has 1..{n}")
    if (root / "fleet.json").exists():
        down(root)
    root.mkdir(parents=True, exist_ok=True)
    client = root / "id_ed25519"
    _keygen(client)
    boxes = [start_box(root, i, Path(f"{client}.pub")) for i in range(1, n + 1)]
    (root / "known_hosts").write_text("".join(f"{b['known_host']}\n" for b in boxes))
    user = getpass.getuser()
    (root / "ssh_config").write_text("".join(
        f"Host {b['name']}\n  HostName {b['address']}\n  Port {b['port']}\n  User {user}\n"
        f"  IdentityFile {client}\n" for b in boxes))
    pythons = {i: box_python.get(i, python) for i in range(1, n + 1)}
    (root / "console.toml").write_text(console_toml(root, boxes, pythons))
    (root / "fleet.json").write_text(json.dumps({"boxes": boxes}, indent=1))
    return root / "console.toml"


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def down(root: Path) -> int:
    """Stop every box's sshd (its listener and the sessions it serves); returns how many."""
    state = root / "fleet.json"
    if not state.exists():
        return 0
    stopped = 0
    for b in json.loads(state.read_text())["boxes"]:
        pid = _pid(Path(b["pid_file"]))
        if pid is None:
            continue
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
        for p in [pid, *map(int, children.stdout.split())]:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                continue
        stopped += 1
    state.unlink()
    return stopped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="start N boxes and write DIR/console.toml")
    u.add_argument("n", type=int)
    u.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    u.add_argument("--python", default=sys.executable, help="the boxes' python (default: this one)")
    u.add_argument("--box-python", action="append", default=[], metavar="I=PY",
                   help="box I's own python (e.g. another vLLM environment); repeatable")
    d = sub.add_parser("down", help="stop the boxes")
    d.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = ap.parse_args(argv)
    if args.cmd == "down":
        print(f"stopped {down(args.dir.resolve())} boxes")
        return 0
    box_python: dict[int, str] = {}
    for item in args.box_python:
        i, sep, py = item.partition("=")
        if not sep or not i.isdigit() or not py:
            raise SystemExit(f"error: --box-python {item!r}: expected I=PATH")
        box_python[int(i)] = py
    print(up(args.n, args.dir.resolve(), args.python, box_python))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
