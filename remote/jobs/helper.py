"""Box-side half of remote.jobs.client: uploaded to the box and run with the box's (or container's) python.

Stdlib only, Python >= 3.8, never imports console/ or remote/. One process per operation keeps
the laptop side to a single remote command per stream (root's .bashrc can cost 150-200 ms a
command), and the supervisor it starts keeps the box's own truth in the run directory:

    <workdir>/runs/<run-id>/argv.json   the command, as a JSON list
                            meta.json   name, cwd, started, env keys (never values: they
                                        reach the supervisor through a pipe, not the disk)
                            pid         the job's pid (= its process group and session id)
                            pid.start   `PID TICKS BOOT_ID`: the job's start (written first)
                            supervisor.pid, supervisor.start  the same for the supervisor
                            log         stdout and stderr of the job, appended
                            cancel      present once a cancel was requested
                            exit.json   {returncode, state, ended}, written atomically at the end
    <workdir>/locks/<sha256(name)[:16]>.lock   flock held by the supervisor while the job runs

Commands (argv after the script path):
    launch RUNS LOCKS NAME CWD ENV_JSON ARGV...   -> one JSON run record on stdout; exit 75 if locked
    supervise RUN_DIR WFD ENVFD                    (internal) runs the job, writes exit.json
Run directories are 0700 and their files 0600: a run's argv and log are the operator's.
    status RUN_DIR... / list RUNS                  -> JSON run records, one per line
    tail RUN_DIR OFFSET FOLLOW                     -> raw log bytes on stdout (whole lines only,
                                                  the unterminated rest once the job ended), then
                                                  `END {json}` on stderr
    wait RUN_DIR                                   -> the JSON run record once the job ended
    serve                                          launch/status/list requests as JSON lines
    cancel RUN_DIR GRACE                           -> TERM the process group, KILL after GRACE s,
                                                  then wait until the name is free (the record,
                                                  with "refused" or "held" when it could not)
Every blocking command exits when its stdin closes: a dropped SSH connection leaves nothing behind.
"""

import errno
import fcntl
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from contextlib import suppress

if __package__:  # imported as remote.jobs.helper (the console's tests)
    from . import helper_runs as runs_io
else:  # run as a script on the box, its sibling uploaded beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import helper_runs as runs_io  # type: ignore[no-redef]

EXIT_LOCKED = 75
POLL = 0.05
CHUNK = 1 << 20


# Where emit() writes: stdout, or the reply buffer of the request `serve` is answering.
_out = []  # type: list[list[str]]


def emit(obj):
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    if _out:
        _out[-1].append(line)
        return
    sys.stdout.write(line)
    sys.stdout.flush()


SERVED = ("launch", "status", "list")


def cmd_serve():
    """Answer requests until stdin closes: one long-lived process for the quick operations, so
    each costs a round trip instead of a new remote command (and the login shell's rc files).

    Request: a JSON list (command and arguments) per line. Reply: {"rc": int, "out": str} per line.
    """
    stdin = sys.stdin.buffer
    while True:
        raw = stdin.readline()
        if not raw:
            return 0
        reply = {"rc": 2, "out": ""}
        try:
            argv = json.loads(raw)
            if not isinstance(argv, list) or not argv or argv[0] not in SERVED:
                raise ValueError(f"not a served request: {raw[:200]!r}")
            _out.append([])
            try:
                reply["rc"] = main([str(a) for a in argv])
            finally:
                reply["out"] = "".join(_out.pop())
        except Exception as exc:  # a bad request must not end the session
            reply = {"rc": 1, "out": "", "error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def safe_name(name):
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40]
    return out.strip("._") or "job"


def stdin_closed(timeout):
    """Sleep up to timeout; True when the laptop side went away (stdin EOF)."""
    try:
        ready, _, _ = select.select([0], [], [], timeout)
    except (OSError, ValueError):
        time.sleep(timeout)
        return False
    if ready:
        try:
            data = os.read(0, 4096)
        except OSError:
            return True
        return data == b""
    return False


def cmd_launch(runs, locks, name, cwd, env_json, *argv):
    runs = os.path.expanduser(runs)
    locks = os.path.expanduser(locks)
    os.makedirs(runs, mode=0o700, exist_ok=True)
    os.makedirs(locks, mode=0o700, exist_ok=True)
    lock_path = os.path.join(locks, hashlib.sha256(name.encode()).hexdigest()[:16] + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise
        holder = (runs_io.read_text(lock_path) or "").strip()
        emit({"error": "locked", "name": name, "run_id": holder})
        return EXIT_LOCKED
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run_id = f"{stamp}-{safe_name(name)}-{os.urandom(3).hex()}"
    run_dir = os.path.join(runs, run_id)
    os.makedirs(run_dir, mode=0o700)
    os.chmod(run_dir, 0o700)  # whatever the umask: argv and log are the operator's
    os.ftruncate(fd, 0)
    os.pwrite(fd, (run_id + "\n").encode(), 0)
    env = json.loads(env_json) if env_json else {}
    runs_io.write_atomic(os.path.join(run_dir, "argv.json"), json.dumps(argv))
    # Keys only: values (tokens) go to the supervisor through a pipe and are never on disk.
    runs_io.write_atomic(
        os.path.join(run_dir, "meta.json"),
        json.dumps({"name": name, "cwd": cwd or None, "started": runs_io.now_iso(),
                    "env": sorted(env)}),
    )
    os.close(os.open(os.path.join(run_dir, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    rfd, wfd = os.pipe()
    env_r, env_w = os.pipe()
    devnull = os.open(os.devnull, os.O_RDWR)
    sup = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "supervise", run_dir, str(wfd), str(env_r)],
        stdin=devnull, stdout=devnull, stderr=devnull,
        pass_fds=(fd, wfd, env_r), start_new_session=True, close_fds=True,
    )
    os.close(wfd)
    os.close(env_r)
    os.close(devnull)
    os.close(fd)  # the supervisor holds the lock now
    # BrokenPipeError: the supervisor died at start; its exit.json says why.
    with os.fdopen(env_w, "w") as pipe, suppress(BrokenPipeError):
        pipe.write(json.dumps(env))
    with os.fdopen(rfd) as pipe:
        pipe.read()  # the supervisor closes its end once the job is started (or failed to)
    del sup  # not waited for: it outlives this process, reparented to init
    emit(runs_io.record(run_dir))
    return 0


def _read_env(envfd):
    """The run's environment values, from the launcher's pipe (never from meta.json)."""
    with os.fdopen(int(envfd), "r") as pipe:
        text = pipe.read()
    try:
        env = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


def cmd_supervise(run_dir, wfd, envfd):
    wfd = int(wfd)
    runs_io.become_subreaper()
    extra = _read_env(envfd)
    runs_io.write_pid(run_dir, "supervisor.pid", os.getpid())
    argv = runs_io.read_json(os.path.join(run_dir, "argv.json")) or []
    meta = runs_io.read_json(os.path.join(run_dir, "meta.json")) or {}
    env = dict(os.environ)
    env.update(extra)
    log = os.open(os.path.join(run_dir, "log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=meta.get("cwd") or None,
            env=env, start_new_session=True, close_fds=True,
        )
    except OSError as exc:
        os.write(log, f"console: cannot start {argv[:1]}: {exc}\n".encode())
        runs_io.write_atomic(os.path.join(run_dir, "exit.json"), json.dumps(
            {"returncode": 127, "state": "exited", "ended": runs_io.now_iso(), "error": str(exc)}))
        os.close(wfd)
        return 0
    runs_io.write_pid(run_dir, "pid", proc.pid)
    os.close(wfd)
    os.close(log)
    rc = proc.wait()
    # exit.json only once no process of the run is left: it says the run ended.
    left = runs_io.end_group(proc.pid)
    state = "cancelled" if os.path.exists(os.path.join(run_dir, "cancel")) else "exited"
    done = {"returncode": rc, "state": state, "ended": runs_io.now_iso()}
    if left:
        done["ended_group"] = True  # processes outlived the leader and were ended
    runs_io.write_atomic(os.path.join(run_dir, "exit.json"), json.dumps(done))
    return 0


def cmd_status(*run_dirs):
    for run_dir in map(os.path.expanduser, run_dirs):
        if not unknown(run_dir):
            emit(runs_io.record(run_dir))
    return 0


def cmd_list(runs):
    runs = os.path.expanduser(runs)
    try:
        names = sorted(os.listdir(runs))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(runs, name)
        if os.path.isfile(os.path.join(path, "meta.json")):
            emit(runs_io.record(path))
    return 0


def cmd_tail(run_dir, offset, follow):
    run_dir = os.path.expanduser(run_dir)
    if not os.path.isdir(run_dir):
        sys.stderr.write("ERROR " + json.dumps({"error": "unknown run"}) + "\n")
        return 2
    offset = int(offset)
    follow = follow == "1"
    out = sys.stdout.buffer
    fh = open(os.path.join(run_dir, "log"), "rb")
    fh.seek(offset)
    pending = b""
    while True:
        data = fh.read(CHUNK)
        if data:
            data = pending + data
            cut = data.rfind(b"\n") + 1
            if cut:
                out.write(data[:cut])
                out.flush()
                offset += cut
            pending = data[cut:]
            continue
        final = runs_io.ended(run_dir)
        if final is not None:
            # Everything the job wrote is in the log before exit.json appears: drain once more.
            rest = pending + fh.read()
            while rest:
                out.write(rest)
                offset += len(rest)
                rest = fh.read()
            out.flush()
            return _trailer(final, end=offset)
        if not follow:
            return _trailer(runs_io.record(run_dir), end=offset, partial=True)
        if stdin_closed(POLL):
            return 0


def _trailer(rec, **extra):
    """The END line a tail ends with on stderr: the run record and where the stream stopped."""
    sys.stderr.write("END " + json.dumps({**rec, **extra}) + "\n")
    sys.stderr.flush()
    return 0


def unknown(run_dir):
    """True (said as a record) when there is no such run directory."""
    if os.path.isdir(run_dir):
        return False
    emit({"error": "unknown", "run_id": os.path.basename(run_dir)})
    return True


def cmd_wait(run_dir):
    run_dir = os.path.expanduser(run_dir)
    if unknown(run_dir):
        return 2
    while True:
        final = runs_io.ended(run_dir)
        if final is not None:
            emit(final)
            return 0
        if stdin_closed(0.1):
            return 0


def cmd_cancel(run_dir, grace):
    """Stop a run and return once its name can be launched again.

    Before any signal, the pid file must name the run's own job (runs_io.judge): pid 1 or a
    recycled pid is refused in the record's "refused", never signalled. After the job ended,
    the supervisor still holds the name's lock until it exits: the cancel waits for that too,
    and says so in "held" when it did not happen within max(GRACE, runs_io.RELEASE_WAIT) seconds."""
    run_dir = os.path.expanduser(run_dir)
    if unknown(run_dir):
        return 2
    grace = float(grace)
    refused = None
    if runs_io.ended(run_dir) is None:
        flag = os.path.join(run_dir, "cancel")
        asked = not os.path.exists(flag)
        open(flag, "w").close()
        deadline = time.time() + 5
        while (runs_io.read_text(os.path.join(run_dir, "pid")) is None and time.time() < deadline
               and runs_io.ended(run_dir) is None):
            time.sleep(POLL)
        pid, verdict, why = runs_io.judge(run_dir, "pid")
        if verdict == "live":
            runs_io.signal_job(run_dir, pid, grace)
        elif verdict == "bad" or (pid is not None and runs_io.alive(pid)):
            refused = f"not signalled: {why}"
            if asked and runs_io.ended(run_dir) is None:
                with suppress(OSError):
                    os.unlink(flag)
        elif pid is not None:  # the leader ended: the supervisor ends the rest of its group
            runs_io.wait_ended(run_dir, grace + runs_io.GROUP_GRACE + 5)
    rec = runs_io.record(run_dir)
    if refused:
        rec["refused"] = refused
    elif rec["state"] != "running":
        wait = max(grace, runs_io.RELEASE_WAIT)
        deadline = time.time() + wait
        while runs_io.live(run_dir, "supervisor.pid") and time.time() < deadline:
            time.sleep(POLL)
        if runs_io.live(run_dir, "supervisor.pid"):
            sup = runs_io.read_int(os.path.join(run_dir, "supervisor.pid"))
            rec["held"] = (f"the box did not let go of {rec['name']!r} within {wait:g} s: its "
                           f"supervisor (pid {sup}) has not exited; the name cannot be launched "
                           "again until it does")
    emit(rec)
    return 0


COMMANDS = {"launch": cmd_launch, "supervise": cmd_supervise, "status": cmd_status,
            "list": cmd_list, "tail": cmd_tail, "wait": cmd_wait, "cancel": cmd_cancel,
            "serve": cmd_serve}


def main(argv):
    if not argv:
        sys.stderr.write("usage: job_helper.py COMMAND ...\n")
        return 2
    if argv[0] not in COMMANDS:
        sys.stderr.write(f"unknown command {argv[0]!r}\n")
        return 2
    return COMMANDS[argv[0]](*argv[1:])  # type: ignore[operator]


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
