"""The run directory as the job helper reads and writes it (remote/jobs/helper.py describes it):
atomic writes, tolerant reads, whether a pid lives, and the run record built from the files.

Box side like the helper: stdlib only, Python >= 3.8, uploaded beside it (remote/jobs/install.py).
"""

import json
import os
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
    if done is not None:
        state, rc, ended = done.get("state", "exited"), done.get("returncode"), done.get("ended")
    elif alive(sup) or alive(pid):
        state, rc, ended = "running", None, None
    elif not meta:
        state, rc, ended = "lost", None, None
    else:
        # Recheck: the supervisor may have written exit.json between our reads.
        done = read_json(os.path.join(run_dir, "exit.json"))
        if done is not None:
            state, rc, ended = done.get("state", "exited"), done.get("returncode"), done.get("ended")
        else:
            state, rc, ended = "lost", None, None
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
