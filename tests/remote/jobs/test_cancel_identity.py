"""What `jobs cancel` checks before it signals, and when it returns (issue 48 row 1, issue 51
point 2).

Before any signal the run's pid file must name the run's own job: pid <= 1 or a pid now held by
an unrelated process is never signalled, and a stale run whose pids were reused reads as lost,
not running. These cases run inside a PID namespace of their own (tests/remote/jobs/
cancel_pidns.py as its init), never against this machine's processes: a regression there would
be kill(-1) as root.

After the job ended, cancel returns only once the run's supervisor let go of the name's lock,
so an immediate relaunch of the same name is never refused; or it says in one line that the box
did not let go. A supervisor slow to exit is made real with a sitecustomize that sleeps at its
exit (the window the raced test hit under load, held open on purpose).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote.errors import JobLocked, NameHeld
from remote.jobs.client import Jobs
from remote.link.transport import LocalTransport, Transport
from tests.processes import wait_gone

PY = sys.executable
REPO = Path(__file__).resolve().parents[3]
# Rounds of the launch/cancel/relaunch loop: 10 in the suite (about a second a round over both
# transports); EAGLE3_CANCEL_ROUNDS=50 by hand is the bar.
ROUNDS = int(os.environ.get("EAGLE3_CANCEL_ROUNDS", "10"))


@pytest.fixture(scope="module")
def pidns(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    work = tmp_path_factory.mktemp("pidns")
    out = subprocess.run(["unshare", "-pf", "--mount-proc", PY, "-m",
                          "tests.remote.jobs.cancel_pidns", str(work)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def one_record(result: object) -> dict[str, object]:
    assert isinstance(result, dict)
    assert result["rc"] == 0 and len(result["lines"]) == 1 and not result["stderr"], result
    return result["record"]  # type: ignore[no-any-return]


def test_a_pid_file_holding_1_is_never_signalled(pidns: dict[str, dict[str, object]]) -> None:
    stale = pidns["pid1"]
    assert stale["alive"] == [True, True]  # killpg(1) would have been kill(-1)
    assert one_record(stale["status"])["state"] == "lost"
    assert one_record(stale["cancel"])["state"] == "lost"
    running = pidns["pid1_running"]
    rec = one_record(running["cancel"])
    assert rec["refused"] == "not signalled: the run's pid file names pid 1, which is never a job's"
    assert "\n" not in rec["refused"]  # type: ignore[operator]
    assert running["alive"] == [True] and running["job_alive"] and running["supervisor_alive"]
    assert running["cancel_flag"] is False  # a refused cancel leaves no cancel request behind
    # With the pid file put right, the same run cancels, and its name is free at once.
    assert one_record(running["after"])["state"] == "cancelled"
    assert running["job_alive_after"] is False
    assert one_record(running["relaunch"])["name"] == "one live"


@pytest.mark.parametrize("legacy", [False, True], ids=["start-records", "older-helper"])
def test_a_reused_pid_is_not_the_run(pidns: dict[str, dict[str, object]], legacy: bool) -> None:
    """The job's and the supervisor's pids now lead sessions of unrelated processes: the run
    reads as lost in status and list, and cancel signals neither."""
    got = pidns["recycled_legacy" if legacy else "recycled"]
    assert got["alive"] == [True, True]
    assert one_record(got["status"])["state"] == "lost"
    listed = [json.loads(line) for line in got["list"]["lines"]]  # type: ignore[index]
    mine = [r for r in listed if r["pid"] == got["pid"] and r["name"] == f"stale {legacy}"]
    assert [r["state"] for r in mine] == ["lost"]
    assert one_record(got["cancel"])["state"] == "lost"


def test_an_older_helpers_run_whose_pid_is_in_another_session(
        pidns: dict[str, dict[str, object]]) -> None:
    got = pidns["legacy_not_a_session"]
    assert got["alive"] == [True] and one_record(got["cancel"])["state"] == "lost"


def test_the_console_refuses_in_one_line_with_exit_4(pidns: dict[str, dict[str, object]]) -> None:
    """remote.jobs.client on a running run whose pid file holds 1: CancelRefused (exit 4), its
    message one line naming the run, and nothing signalled."""
    got = pidns["client"]
    assert got["alive"] == [True] and got["job_alive"] is True
    assert got["error"] == "CancelRefused" and got["exit_code"] == 4
    message = got["message"]
    assert isinstance(message, str) and "\n" not in message
    assert message.startswith("cancel ") and message.endswith(
        "on box: not signalled: the run's pid file names pid 1, which is never a job's")


async def test_refused_cancel_reaches_the_console_as_one_line(tmp_path: Path) -> None:
    """A running run whose pid file names another live process of this test (not pid 1: that
    case runs in the namespace only): CancelRefused, exit 4, one line, the process untouched."""
    from remote.errors import CancelRefused

    jobs = Jobs(LocalTransport(), str(tmp_path), host="box", python=PY)
    info = await jobs.launch(["sleep", "30"], name="mine")
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    run_dir = tmp_path / "runs" / info.run_id
    try:
        (run_dir / "pid").write_text(str(other.pid))
        with pytest.raises(CancelRefused) as caught:
            await jobs.cancel(info.run_id, grace=0.5)
        message = str(caught.value)
        assert caught.value.exit_code == 4 and "\n" not in message
        assert f"pid {other.pid}" in message and "not signalled" in message
        assert other.poll() is None  # untouched
    finally:
        (run_dir / "pid").write_text(str(info.pid))
        done = await jobs.cancel(info.run_id, grace=0.5)
        other.kill()
        other.wait()
    assert done.state == "cancelled"


@pytest.fixture
def lingering_supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Every supervisor started from here sleeps N s after writing exit.json, holding the name's
    lock: set(N)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import atexit, os, sys, time\n"
        "if sys.argv[1:2] == ['supervise']:\n"
        "    atexit.register(time.sleep, float(os.environ.get('EAGLE3_TEST_LINGER', '0')))\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return lambda seconds: monkeypatch.setenv("EAGLE3_TEST_LINGER", str(seconds))


async def test_cancel_returns_once_the_name_can_be_launched_again(
        tmp_path: Path, lingering_supervisor) -> None:  # type: ignore[no-untyped-def]
    lingering_supervisor(1.5)
    jobs = Jobs(LocalTransport(), str(tmp_path), host="box", python=PY)
    first = await jobs.launch(["sleep", "30"], name="train stage")
    done = await jobs.cancel(first.run_id, grace=1)
    assert done.state == "cancelled"
    again = await jobs.launch(["true"], name="train stage")  # never JobLocked
    assert (await jobs.wait(again.run_id)).returncode == 0


async def test_a_name_the_box_does_not_let_go_is_said_in_one_line(
        tmp_path: Path, lingering_supervisor) -> None:  # type: ignore[no-untyped-def]
    lingering_supervisor(9)  # longer than cancel's wait for the release (RELEASE_WAIT, 5 s)
    jobs = Jobs(LocalTransport(), str(tmp_path), host="box", python=PY)
    first = await jobs.launch(["sleep", "30"], name="held")
    sup = int((tmp_path / "runs" / first.run_id / "supervisor.pid").read_text())
    with pytest.raises(NameHeld) as caught:
        await jobs.cancel(first.run_id, grace=0.5)
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 1
    assert "did not let go of 'held'" in message and f"pid {sup}" in message
    with pytest.raises(JobLocked):  # what NameHeld warned of
        await jobs.launch(["true"], name="held")
    assert wait_gone([sup], timeout=30) == []
    again = await jobs.launch(["true"], name="held")
    assert (await jobs.wait(again.run_id)).returncode == 0


async def test_launch_cancel_relaunch_one_name_in_a_loop(transport: Transport,
                                                         tmp_path: Path) -> None:
    """ROUNDS rounds (10 here, 50 by hand): every relaunch right after a cancel is accepted;
    every other job ignores TERM, so the KILL after the grace is in the loop too."""
    jobs = Jobs(transport, str(tmp_path), host="box", python=PY)
    ids = []
    for i in range(ROUNDS):
        argv = ["sh", "-c", "trap '' TERM; sleep 30"] if i % 2 else ["sleep", "30"]
        info = await jobs.launch(argv, name="one name")
        done = await jobs.cancel(info.run_id, grace=0.3)
        assert done.state == "cancelled", (i, done)
        ids.append(info.run_id)
    states = {r.run_id: r.state for r in await jobs.list()}
    assert [states[i] for i in ids] == ["cancelled"] * ROUNDS
