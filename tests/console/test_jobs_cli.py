"""`console jobs` as an operator runs it: real console processes over the loopback sshd.

The reattach test SIGKILLs a console mid-tail and starts a new one: the two recorded sessions
together hold every line of the job exactly once, in order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.sshd_harness import Sshd

pytestmark = pytest.mark.ssh

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def console_env(sshd: Sshd, tmp_path: Path) -> tuple[dict[str, str], Path]:
    config = tmp_path / "console.toml"
    config.write_text(
        "[hosts.box]\n"
        f'ssh = "{sshd.alias}"\n'
        f'ssh_config = "{sshd.ssh_config}"\n'
        f'known_hosts = "{sshd.known_hosts}"\n'
        f'python = "{sys.executable}"\n'
        f'workdir = "{tmp_path / "box"}"\n'
    )
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_DATA_HOME=str(tmp_path / "data"), PYTHONPATH=str(ROOT))
    return env, config


def console(env: dict[str, str], config: Path, *args: str, **kw: object) -> subprocess.Popen[str]:
    # Shared options before the subcommand: after `launch --` they would belong to the command.
    return subprocess.Popen([sys.executable, "-m", "console", "jobs", "--host", "box",
                             "--config", str(config), *args], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)  # type: ignore[call-overload]


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def recorded_lines(session: Path, run_id: str) -> list[str]:
    texts = []
    for raw in session.read_text().splitlines()[1:]:
        try:
            event = json.loads(raw)
        except ValueError:
            continue  # a torn last line after SIGKILL is not a recorded line
        if event["kind"] == "job.line" and event["payload"]["run_id"] == run_id:
            texts.append(event["payload"]["text"])
        elif event["kind"] == "job.lines" and event["payload"]["run_id"] == run_id:
            texts.extend(event["payload"]["texts"])  # a log block recorded as one record
    return texts


@pytest.mark.slow
def test_launch_list_status_and_lock(console_env: tuple[dict[str, str], Path]) -> None:
    env, config = console_env
    rc, out, err = finish(console(env, config, "launch", "--name", "hello world", "--no-record",
                                  "--", "sh", "-c", "echo one; echo 'two; $(three)'"))
    assert rc == 0, err
    assert "| one" in out and "| two; $(three)" in out and "exited, returncode 0" in out
    rc, out, err = finish(console(env, config, "--json"))
    events = [json.loads(line) for line in out.splitlines()]
    runs = [e["payload"] for e in events if e["kind"] == "job.status"]
    assert rc == 0 and [r["name"] for r in runs] == ["hello world"], out + err
    assert runs[0]["state"] == "exited" and runs[0]["log_size"] == len("one\ntwo; $(three)\n")
    rc, out, err = finish(console(env, config, "launch", "--name", "long", "--detach",
                                  "--no-record", "--", "sleep", "30"))
    run_id = out.split()[-1]
    rc2, _, err2 = finish(console(env, config, "launch", "--name", "long", "--", "true"))
    assert (rc, rc2) == (0, 4) and "already running" in err2 and run_id in err2
    rc, out, _ = finish(console(env, config, "status", run_id))
    assert rc == 0 and "running" in out
    rc, out, _ = finish(console(env, config, "cancel", run_id, "--grace", "1"))
    assert rc == 0 and "cancelled" in out


@pytest.mark.slow
def test_killed_console_reattaches_without_loss_or_repeat(
        console_env: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    env, config = console_env
    stop = tmp_path / "stop"
    counter = ("import os, sys, time\ni = 0\nwhile not os.path.exists(sys.argv[1]):\n"
               "    i += 1\n    print(i, flush=True)\n    time.sleep(0.003)\n")
    rc, out, err = finish(console(env, config, "launch", "--name", "counter", "--detach",
                                  "--no-record", "--", sys.executable, "-c", counter, str(stop)))
    assert rc == 0, err
    run_id = out.split()[-1]
    s1, s2 = tmp_path / "s1.jsonl", tmp_path / "s2.jsonl"
    first = console(env, config, "tail", run_id, "--session", str(s1))
    try:
        _until(lambda: s1.exists() and len(recorded_lines(s1, run_id)) >= 200)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    got_first = recorded_lines(s1, run_id)
    second = console(env, config, "tail", run_id, "--session", str(s2))
    try:
        _until(lambda: s2.exists() and len(recorded_lines(s2, run_id)) >= 100)
    finally:
        stop.touch()
    rc, out, err = finish(second)
    assert rc == 0, err
    got_second = recorded_lines(s2, run_id)
    total = len((tmp_path / "box" / "runs" / run_id / "log").read_text().splitlines())
    assert [int(x) for x in got_first + got_second] == list(range(1, total + 1))
    assert "resuming" in out


def _until(cond: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


def test_unknown_host_key_exit_code_and_accept_flag(console_env: tuple[dict[str, str], Path],
                                                    sshd: Sshd, tmp_path: Path) -> None:
    env, config = console_env
    known = tmp_path / "fresh_known_hosts"
    config.write_text(config.read_text().replace(str(sshd.known_hosts), str(known)))
    rc, out, err = finish(console(env, config, "list"))
    assert rc == 3 and "unknown host key" in err and "--accept-new-host-key" in err
    assert err.count("\n") == 1 and not known.exists()  # one line, nothing stored
    rc, out, err = finish(console(env, config, "--accept-new-host-key", "list"))
    assert rc == 0, err
    assert "trusted new host key" in out and known.read_text().startswith(f"[127.0.0.1]:{sshd.port} ")
