"""A detached run is its whole process group (issue 41 case 3): when its leader dies, the job
helper's supervisor ends what is left of the group and writes exit.json only then, so "the run
ended" never leaves a child of it running on. Fast, with plain processes; the pipeline's own
kill in every stage is tests/pipeline/test_runner_kill.py."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from pipeline.config import PipelineConfig
from pipeline.errors import PipelineError
from pipeline.runner import lock_stage
from remote.jobs.client import Jobs
from remote.link.transport import LocalTransport

PY = sys.executable
# The leader starts a child in its own process group that would outlive it by minutes, prints
# the child's pid, then waits.
LEADER = ("import subprocess, sys, time\n"
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
          "print(c.pid, flush=True)\n"
          "time.sleep(600)\n")


def group_pids(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is `pgid`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _wait_file(path: Path, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear in {timeout:.0f} s")


async def test_kill_9_of_the_leader_ends_its_group_before_exit_json(tmp_path: Path) -> None:
    jobs = Jobs(LocalTransport(), str(tmp_path / "box"), host="box", python=PY)
    info = await jobs.launch([PY, "-c", LEADER], name="leader")
    run_dir = tmp_path / "box" / "runs" / info.run_id
    child = int(_wait_file(run_dir / "log").split()[0])
    leader = int((run_dir / "pid").read_text())
    assert child in group_pids(leader)  # the child is in the run's group
    os.kill(leader, signal.SIGKILL)
    done = json.loads(_wait_file(run_dir / "exit.json"))
    assert group_pids(leader) == []  # when exit.json says ended, nothing of the run is left
    assert done["returncode"] == -signal.SIGKILL and done["ended_group"] is True
    assert (await jobs.status(info.run_id)).state == "exited"


def test_a_second_writer_of_a_stage_is_refused_naming_the_holder(tmp_path: Path) -> None:
    """The lock a stage takes on its outputs: another process asking for it gets one line with
    the holder's pid and start time; the holder's death frees it."""
    cfg = PipelineConfig.__new__(PipelineConfig)
    object.__setattr__(cfg, "output_dir", tmp_path)
    import subprocess

    holder = subprocess.Popen([PY, "-c", (
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})\n"
        "from pathlib import Path\n"
        "from pipeline.config import PipelineConfig\n"
        "from pipeline.runner import lock_stage\n"
        "cfg = PipelineConfig.__new__(PipelineConfig)\n"
        f"object.__setattr__(cfg, 'output_dir', Path({str(tmp_path)!r}))\n"
        "lock_stage(cfg, 'evaluate'); print('held', flush=True); time.sleep(600)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        try:
            lock_stage(cfg, "evaluate")
        except PipelineError as exc:
            line = str(exc)
        else:
            raise AssertionError("a second writer was let in")
        assert "\n" not in line and f"pid {holder.pid}, started 20" in line, line
        assert "evaluate: another writer holds" in line
    finally:
        holder.kill()
        holder.wait()
    lock_stage(cfg, "evaluate")  # the dead holder's lock is gone with it
