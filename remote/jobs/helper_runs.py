"""The run directory as the job helper reads and writes it (remote/jobs/helper.py describes it):
atomic writes, tolerant reads, whether the process a run file names is still that process
(`judge`), the run record built from the files, the run's process group (ended with its
leader: `end_group`) and a cancel's signals to it (`signal_job`, checked before each).

Box side like the helper: stdlib only, Python >= 3.8, uploaded beside it (remote/jobs/install.py).
"""

import calendar
import json
import os
import signal
import time
from contextlib import suppress


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
    """Whether some process has this pid (a zombie counts as gone). Says nothing about *which*
    process: a run's files are judged by `judge`, which also checks the process is the run's."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not reaped) counts as gone.
    stat = _stat_fields(pid)
    return not (stat and stat[0] == "Z")


def _stat_fields(pid):
    """/proc/<pid>/stat after the command name: [state, ppid, pgrp, session, ...]; field 22 of
    proc(5), starttime in clock ticks since boot, is index 19. None where unreadable."""
    stat = read_text(f"/proc/{pid}/stat")
    if not stat or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields if len(fields) > 19 else None


def boot_id():
    return (read_text("/proc/sys/kernel/random/boot_id") or "").strip()


def start_stamp(pid):
    """`PID TICKS BOOT_ID`: what identifies a process across pid reuse (the same pid number,
    started at the same tick of the same boot, is the same process). None without /proc."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return f"{pid} {fields[19]} {boot_id() or '-'}"


# The files naming a run's processes, and the file recording each one's start (written before
# the pid file, so a pid file with no start beside it was written by an older helper).
PID_FILES = {"pid": "pid.start", "supervisor.pid": "supervisor.start"}
# How far from its run's recorded times an older helper's process may have started (its start
# is only known to about a clock tick, and the boot time to a second): outside, it is not the run's.
LEGACY_SLACK = 2.0


def write_pid(run_dir, name, pid):
    """The pid file `name` of a run, with the process's start stamp written first beside it."""
    stamp = start_stamp(pid)
    if stamp is not None:
        write_atomic(os.path.join(run_dir, PID_FILES[name]), stamp + "\n")
    write_atomic(os.path.join(run_dir, name), str(pid))


def _iso_seconds(text):
    try:
        return calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))
    except (TypeError, ValueError):
        return None


def _started_at(fields):
    """The wall-clock time a process started, from its start tick and the uptime (to a tick)."""
    try:
        hz = os.sysconf("SC_CLK_TCK")
        uptime = float((read_text("/proc/uptime") or "").split()[0])
        return time.time() - uptime + int(fields[19]) / hz
    except (ValueError, IndexError, OSError):
        return None


def judge(run_dir, name):
    """(pid, verdict, why) for the process the run file `name` ("pid" or "supervisor.pid")
    names. verdict: "live" (that process, running), "gone" (no file, ended, a zombie, or the pid
    now belongs to a process started after it: nothing of the run's there), "bad" (a pid that
    cannot be a run's: <= 1, the file and its start record disagree). Never signals anything.

    Why: a stale run's pid may have been reused by an unrelated process, and a pid file holding
    1 makes killpg(1) kill(-1), every process the user may signal (issue 48). A run's job and
    supervisor each lead their own session (pid = process group = session id), started by a
    helper that recorded their start tick and boot id; an older helper's run (no start record)
    is judged by the session and by its start falling between the run's `started` and the pid
    file's write."""
    path = os.path.join(run_dir, name)
    label = f"the run's {name} file"
    text = read_text(path)
    if text is None or not text.strip():
        return None, "gone", "no pid recorded"
    try:
        pid = int(text.strip())
    except ValueError:
        return None, "bad", f"{label} holds {text.strip()[:40]!r}, not a pid"
    if pid <= 1:
        return pid, "bad", f"{label} names pid {pid}, which is never a job's"
    fields = _stat_fields(pid)
    if not alive(pid):
        return pid, "gone", f"pid {pid} has ended"
    if fields is None:  # no /proc (not Linux): the session is all there is to check
        try:
            ok = os.getsid(pid) == pid
        except OSError:
            return pid, "gone", f"pid {pid} has ended"
        return (pid, "live", "") if ok else (
            pid, "gone", f"pid {pid} does not lead its own session: it is not the run's")
    stamp = (read_text(os.path.join(run_dir, PID_FILES[name])) or "").split()
    if stamp:
        if stamp[0] != str(pid):
            return pid, "bad", (f"{label} names pid {pid} but its start record is for pid "
                                f"{stamp[0]}")
        boot = boot_id() or "-"
        if stamp[1:] != [fields[19], boot]:
            return pid, "gone", (f"pid {pid} is now another process (started after the run's, "
                                 "or in another boot)")
        return pid, "live", ""
    # An older helper's run: the same session, and started when the run started.
    if fields[3] != str(pid):
        return pid, "gone", f"pid {pid} does not lead its own session: it is not the run's"
    began = _started_at(fields)
    meta = read_json(os.path.join(run_dir, "meta.json")) or {}
    low = _iso_seconds(meta.get("started")) if isinstance(meta, dict) else None
    try:
        high = os.stat(path).st_mtime
    except OSError:
        high = None
    if began is not None and ((low is not None and began < low - LEGACY_SLACK)
                              or (high is not None and began > high + LEGACY_SLACK)):
        return pid, "gone", (f"pid {pid} is now another process (it started "
                             f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(began))}, "
                             "not when the run did)")
    return pid, "live", ""


def live(run_dir, name):
    """True while the process the run file `name` names is still that process, running."""
    return judge(run_dir, name)[1] == "live"


def record(run_dir):
    """The run as the box sees it right now."""
    meta = read_json(os.path.join(run_dir, "meta.json")) or {}
    argv = read_json(os.path.join(run_dir, "argv.json")) or []
    pid = read_int(os.path.join(run_dir, "pid"))
    done = read_json(os.path.join(run_dir, "exit.json"))
    log = os.path.join(run_dir, "log")
    try:
        size = os.stat(log).st_size
    except OSError:
        size = 0
    # Running: the supervisor or the job is still the process its file names (a stale run whose
    # pids were reused by unrelated processes reads as lost, not running).
    running = done is None and (live(run_dir, "supervisor.pid") or live(run_dir, "pid"))
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
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


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


def reap():
    """Collect every exited child without blocking (a subreaper inherits the orphans)."""
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
        reap()
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
    reap()
    if not group_alive(pgid):
        return False
    killpg(pgid, signal.SIGTERM)
    if not _wait_group(pgid, grace):
        killpg(pgid, signal.SIGKILL)
        _wait_group(pgid, 30.0)
    return True


# How long a cancel waits, at least, for the supervisor to let go of the run's name once the
# job ended (it writes exit.json, then exits; the kernel drops its lock on exit).
RELEASE_WAIT = 5.0


def wait_ended(run_dir, seconds):
    """Up to `seconds` for the run to end; whether it did."""
    deadline = time.time() + seconds
    while time.time() < deadline and ended(run_dir) is None:
        time.sleep(0.05)
    return ended(run_dir) is not None


def signal_job(run_dir, pid, grace):
    """TERM the job's process group, KILL after `grace`, each only after checking the group is
    still the run's: the leader is the process the run recorded (judge), or -- once the
    leader has ended -- the supervisor is still the run's and has not yet said the run ended
    (the group's id cannot be handed to a new process while a member of it is left)."""
    killpg(pid, signal.SIGTERM)
    if wait_ended(run_dir, grace):
        return
    if live(run_dir, "pid") or (live(run_dir, "supervisor.pid") and ended(run_dir) is None
                                and group_alive(pid)):
        killpg(pid, signal.SIGKILL)
    wait_ended(run_dir, 10 + GROUP_GRACE)
