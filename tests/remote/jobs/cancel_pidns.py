"""Run inside a PID namespace of its own (`unshare -pf --mount-proc`, as root), as its init:
the job helper's cancel and status against run directories whose pid files name pid 1 or a pid
reused by an unrelated process (issue 48 row 1). Inside the namespace a kill(-1) or a stray
killpg reaches only the processes this script started, never the machine's own.

`python -m tests.remote.jobs.cancel_pidns WORKDIR` prints one JSON object: per scenario, what
the helper answered and which bystanders (unrelated processes) are still alive. The namespace
ends with this process: the kernel kills whatever is left in it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from remote.jobs.helper_runs import reap  # as the namespace's init: reparented children

REPO = Path(__file__).resolve().parents[3]
HELPER = str(REPO / "remote" / "jobs" / "helper.py")
PY = sys.executable


def alive(pid: int) -> bool:
    reap()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def helper(*args: str) -> dict[str, Any]:
    out = subprocess.run([PY, HELPER, *args], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    lines = out.stdout.strip().splitlines()
    return {"rc": out.returncode, "lines": lines, "stderr": out.stderr,
            "record": json.loads(lines[-1]) if lines else None}


def launch(work: Path, name: str) -> tuple[Path, int, int]:
    got = helper("launch", str(work / "runs"), str(work / "locks"), name, "", "{}",
                 "sleep", "300")
    run_dir = work / "runs" / got["record"]["run_id"]
    return run_dir, int((run_dir / "pid").read_text()), int((run_dir / "supervisor.pid").read_text())


def bystander(at: int | None = None, session: bool = True) -> subprocess.Popen[bytes]:
    """An unrelated `sleep 300`; with `at`, made to get exactly that pid (ns_last_pid)."""
    if at is not None:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{at}").exists() and time.monotonic() < deadline:
            reap()
            time.sleep(0.02)
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(at - 1))
    proc = subprocess.Popen(["sleep", "300"], start_new_session=session)
    if at is not None and proc.pid != at:
        held = Path(f"/proc/{at}/stat")
        raise RuntimeError(f"wanted pid {at}, got {proc.pid} "
                           f"({held.read_text() if held.exists() else 'free'})")
    return proc


def kill_run(run_dir: Path, pid: int, sup: int) -> None:
    """The run goes stale: its supervisor and job die without exit.json (a box that lost them)."""
    os.kill(sup, signal.SIGKILL)
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while (alive(sup) or alive(pid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not (run_dir / "exit.json").exists()


def scenario_pid1(work: Path) -> dict[str, Any]:
    """A stale run whose pid file holds 1: killpg(1) would be kill(-1)."""
    others = [bystander(), bystander(session=False)]
    run_dir, pid, sup = launch(work, "one")
    kill_run(run_dir, pid, sup)
    (run_dir / "pid").write_text("1")
    status = helper("status", str(run_dir))
    cancel = helper("cancel", str(run_dir), "0.5")
    return {"status": status, "cancel": cancel, "alive": [alive(p.pid) for p in others]}


def scenario_pid1_running(work: Path) -> dict[str, Any]:
    """A running run (supervisor and job alive) whose pid file was overwritten with 1."""
    others = [bystander()]
    run_dir, pid, sup = launch(work, "one live")
    (run_dir / "pid").write_text("1")
    cancel = helper("cancel", str(run_dir), "0.5")
    out = {"cancel": cancel, "alive": [alive(p.pid) for p in others],
           "job_alive": alive(pid), "supervisor_alive": alive(sup),
           "cancel_flag": (run_dir / "cancel").exists()}
    (run_dir / "pid").write_text(str(pid))
    out["after"] = helper("cancel", str(run_dir), "0.5")
    out["job_alive_after"] = alive(pid)
    out["relaunch"] = helper("launch", str(work / "runs"), str(work / "locks"), "one live", "",
                             "{}", "true")
    return out


def scenario_recycled(work: Path, *, legacy: bool) -> dict[str, Any]:
    """A stale run whose job's and supervisor's pids now belong to unrelated processes, each
    leading its own session as the run's did. `legacy`: a run an older helper launched (no start
    records), its pid files written long before the bystanders started."""
    run_dir, pid, sup = launch(work, f"stale {legacy}")
    kill_run(run_dir, pid, sup)
    if legacy:
        for name in ("pid.start", "supervisor.start"):
            (run_dir / name).unlink(missing_ok=True)
        then = time.time() - 30
        for name in ("pid", "supervisor.pid"):
            os.utime(run_dir / name, (then, then))
    others = [bystander(at=pid), bystander(at=sup)]
    status = helper("status", str(run_dir))
    listed = helper("list", str(work / "runs"))
    cancel = helper("cancel", str(run_dir), "0.5")
    return {"status": status, "list": listed, "cancel": cancel, "pid": pid,
            "alive": [alive(p.pid) for p in others]}


def scenario_legacy_not_a_session(work: Path) -> dict[str, Any]:
    """An older helper's stale run whose pid now belongs to a process in someone else's session."""
    run_dir, pid, sup = launch(work, "legacy other")
    kill_run(run_dir, pid, sup)
    for name in ("pid.start", "supervisor.start"):
        (run_dir / name).unlink(missing_ok=True)
    others = [bystander(at=pid, session=False)]
    cancel = helper("cancel", str(run_dir), "0.5")
    return {"cancel": cancel, "alive": [alive(p.pid) for p in others]}


def scenario_client(work: Path) -> dict[str, Any]:
    """The laptop side (remote.jobs.client over the local transport): one line, exit code 4."""
    import asyncio

    sys.path.insert(0, str(REPO))
    from remote.errors import RemoteError
    from remote.jobs.client import Jobs
    from remote.link.transport import LocalTransport

    others = [bystander()]
    run_dir, pid, _ = launch(work / "client", "client")
    (run_dir / "pid").write_text("1")

    async def go() -> dict[str, Any]:
        t = LocalTransport()
        await t.connect()
        try:
            await Jobs(t, str(work / "client"), host="box", python=PY).cancel(run_dir.name)
        except RemoteError as exc:
            return {"error": type(exc).__name__, "message": str(exc), "exit_code": exc.exit_code}
        finally:
            await t.close()
        return {"error": None}

    got = asyncio.run(go())
    got["alive"] = [alive(p.pid) for p in others]
    got["job_alive"] = alive(pid)
    return got


def main() -> int:
    if os.getpid() != 1:
        print("run me as the init of a PID namespace: unshare -pf --mount-proc", file=sys.stderr)
        return 2
    work = Path(sys.argv[1])
    scenarios = {
        "pid1": lambda: scenario_pid1(work),
        "pid1_running": lambda: scenario_pid1_running(work),
        "recycled": lambda: scenario_recycled(work, legacy=False),
        "recycled_legacy": lambda: scenario_recycled(work, legacy=True),
        "legacy_not_a_session": lambda: scenario_legacy_not_a_session(work),
        "client": lambda: scenario_client(work),
    }
    out: dict[str, Any] = {}
    for name, run in scenarios.items():
        try:
            out[name] = run()
        except Exception as exc:  # the test names the scenario that could not run, and why
            out[name] = {"scenario_error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
