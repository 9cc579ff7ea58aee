"""The CLI as a user runs it: a real subprocess, real files, documented exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.sessions.reader import SessionReader
from console.sessions.writer import SessionWriter
from remote.spine.events import Event
from tests.sshd_harness import Sshd

REPO = Path(__file__).resolve().parents[2]


def console(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True,
                          text=True, cwd=cwd or REPO, env=full_env, timeout=120)


def test_help_everywhere() -> None:
    top = console("--help")
    assert top.returncode == 0 and "exit codes" in top.stdout
    from console.cli import COMMANDS, command_name

    for name in map(command_name, COMMANDS):
        res = console(name, "--help")
        assert res.returncode == 0, (name, res.stderr)
        assert "usage: console" in res.stdout


def test_usage_error_exits_2() -> None:
    res = console("replay")
    assert res.returncode == 2
    assert "usage" in res.stderr


def test_replay_print_of_torn_session(tmp_path: Path) -> None:
    path = tmp_path / "torn.jsonl"
    with SessionWriter(path, ["box"]) as w:
        for i in range(5):
            w.write(Event("console.info", "box", {"message": f"step {i}"}))
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    res = console("replay", str(path), "--print")
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if "step" in ln][-1].endswith("step 3")
    assert sum("step" in ln for ln in res.stdout.splitlines()) == 4
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "incomplete" in warnings[0]
    as_json = console("replay", str(path), "--print", "--json")
    assert [Event.from_json(ln).payload["message"] for ln in as_json.stdout.splitlines()] == [
        f"step {i}" for i in range(4)
    ]


def test_replay_of_random_binary_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "random.bin"
    path.write_bytes(os.urandom(2048))
    res = console("replay", str(path), "--print")
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0
    assert "not a console session file" in res.stderr


def test_hosts_lists_local_and_reports_config_errors(tmp_path: Path) -> None:
    res = console("hosts", cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert res.returncode == 0 and "local" in res.stdout
    (tmp_path / "console.toml").write_text("[hosts.box]\nssh='u@h'\nruntime='lxc'\n")
    res = console("hosts", cwd=tmp_path)
    assert res.returncode == 2
    assert "console.toml: hosts.box.runtime: 'lxc' is not one of" in res.stderr


def test_run_local_records_a_session(tmp_path: Path) -> None:
    session = tmp_path / "s.jsonl"
    res = console("run", "--host", "local", "--session", str(session), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    with SessionReader(session) as r:
        kinds = [e.kind for e in r.events()]
    assert "connection.up" in kinds
    assert f"session recorded: {session}" in res.stderr


@pytest.mark.ssh
def test_run_over_ssh_says_connected_once(sshd: Sshd, tmp_path: Path) -> None:
    """The SSH link says connection.up itself; `console run` said it again (every host of a
    run showed two "connected to" lines)."""
    cfg = sshd.console_toml(tmp_path / "console.toml", python=sys.executable,
                            workdir=str(tmp_path / "box"))
    session = tmp_path / "s.jsonl"
    res = console("run", "--host", "box", "--config", str(cfg), "--session", str(session),
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    with SessionReader(session) as r:
        ups = [e for e in r.events() if e.kind == "connection.up"]
    assert [e.host for e in ups] == ["box"], [e.payload for e in ups]


def test_run_unknown_host_exits_2(tmp_path: Path) -> None:
    res = console("run", "--host", "nope", "--no-record", cwd=tmp_path)
    assert res.returncode == 2
    assert "no such host" in res.stderr


@pytest.mark.parametrize("flag", ["--json"])
def test_run_json_prints_events(tmp_path: Path, flag: str) -> None:
    res = console("run", "--host", "local", "--no-record", flag, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    events = [Event.from_json(ln) for ln in res.stdout.splitlines()]
    assert events and all(e.host == "local" for e in events)



def test_a_task_groups_first_remote_error_is_found_however_deep() -> None:
    """A TaskGroup's failure: the first operator-facing error (depth first, in order) gives the
    line and the exit code; a group with none is an internal error."""
    from console.cli import _first_remote_error
    from remote.errors import ConnectionFailed, UsageError

    first, second = ConnectionFailed("box-a: refused"), UsageError("second")
    nested = ExceptionGroup("outer", [ValueError("x"), ExceptionGroup("inner", [first, second]),
                                      UsageError("third")])
    assert _first_remote_error(nested) is first
    assert _first_remote_error(ExceptionGroup("g", [second, first])) is second
    assert _first_remote_error(ExceptionGroup("g", [ValueError("bug")])) is None
