"""The run directory as the job helper reads and writes it (remote/jobs/helper.py describes it):
atomic writes, tolerant reads, whether a pid lives, the run record built from the files, and
the run's process group (ended with its leader: `end_group`).

Box side like the helper: stdlib only, Python >= 3.8, uploaded beside it (remote/jobs/install.py).
"""

import json
import os
import signal
import time


def now_iso():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}Z"


def write_atomic(path, text):
    tmp = f"{path}.tmp-{os.getpid()}"
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_text(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def read_json(path):
    text = read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def read_int(path):
    text = read_text(path)
    try:
        return int(text.strip()) if text else None
    except ValueError:
        return None


def alive(pid):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not reaped) counts as gone.
    stat = read_text(f"/proc/{pid}/stat")
    if stat:
        fields = stat.rsplit(")", 1)[-1].split()
        if fields and fields[0] == "Z":
            return False
    return True


def record(run_dir):
    """The run as the box sees it right now."""
    meta = read_json(os.path.join(run_dir, "meta.json")) or {}
    argv = read_json(os.path.join(run_dir, "argv.json")) or []
    pid = read_int(os.path.join(run_dir, "pid"))
    sup = read_int(os.path.join(run_dir, "supervisor.pid"))
    done = read_json(os.path.join(run_dir, "exit.json"))
    log = os.path.join(run_dir, "log")
    try:
        size = os.stat(log).st_size
    except OSError:
        size = 0
    running = done is None and (alive(sup) or alive(pid))
    if done is None and not running and meta:
        # Recheck: the supervisor may have written exit.json between our reads.
        done = read_json(os.path.join(run_dir, "exit.json"))
    if done is not None:
        state, rc, ended = done.get("state", "exited"), done.get("returncode"), done.get("ended")
    else:
        state, rc, ended = "running" if running else "lost", None, None
    return {
        "run_id": os.path.basename(run_dir.rstrip("/")),
        "name": meta.get("name", ""),
        "argv": argv,
        "pid": pid,
        "started": meta.get("started", ""),
        "state": state,
        "returncode": rc,
        "ended": ended,
        "log_path": log,
        "log_size": size,
    }


def ended(run_dir):
    """The final record once the job is over (exit.json written, or supervisor and job gone)."""
    if os.path.exists(os.path.join(run_dir, "exit.json")):
        return record(run_dir)
    rec = record(run_dir)
    return rec if rec["state"] in ("exited", "cancelled", "lost") else None


def killpg(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# How long what is left of a run's process group gets to end on SIGTERM after its leader ended,
# before SIGKILL (a stage cleaning up its partial directory is quick).
GROUP_GRACE = 5.0
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Linux: the run's orphans (a stage whose runner was killed) become this supervisor's
    children instead of init's, so it can wait for them and reap them (in a container whose
    PID 1 never reaps, a zombie would otherwise count as a live process of the run forever).
    Elsewhere a no-op: init reaps, the group is polled."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError, TypeError):
        return False


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _wait_group(pgid, timeout):
    deadline = time.time() + timeout
    while True:
        _reap()
        if not group_alive(pgid):
            return True
        if time.time() >= deadline:
            return False
        time.sleep(0.05)


def end_group(pgid, grace=GROUP_GRACE):
    """After the run's leader ended, end what is left of its process group (TERM, KILL after
    `grace`) and wait until no process of it is left. Returns whether any was left.

    Why the supervisor and not only the runner's children: the job is the group (its leader
    started it with a new session), and every process it starts -- a pipeline stage, the vLLM
    engine workers or torchrun ranks a stage starts in turn -- stays in it unless it makes a
    session of its own. A `kill -9` of the runner gives it no chance to end its stage; the stage
    used to run on, re-parented to init, and write its outputs after exit.json said the run had
    ended, beside the stage an immediate rerun started (issue 41). The supervisor outlives the
    leader by design, so it is the one place that sees the leader gone and can end the rest
    before it writes exit.json. (The runner also asks the kernel to kill a stage when the runner
    dies -- PR_SET_PDEATHSIG, pipeline/sequence.py -- for a supervisor killed as well.)"""
    _reap()
    if not group_alive(pgid):
        return False
    killpg(pgid, signal.SIGTERM)
    if not _wait_group(pgid, grace):
        killpg(pgid, signal.SIGKILL)
        _wait_group(pgid, 30.0)
    return True
