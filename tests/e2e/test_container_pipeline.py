"""The pipeline's box runner and vLLM's server inside the real container (issue #28, point 3):
started through sshd + `podman exec`, it goes on through evaluate with the SSH connection cut
and the console SIGKILLed, and everything it writes stays in the container.

The session's trained demo (tests/demo_fixture.py) is rerun from evaluate (the cheapest
stage). Timing is never asserted: the run is held (SIGSTOP of its process group, sent inside
the container, where its pid file's number is meaningful) while the console dies.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from console.cli import main as console_main
from console.sessions.reader import SessionReader
from remote.spine import events as ev
from tests.container_fixture import Box, inside
from tests.demo_fixture import REPO, Demo, console_env, ssh_box
from tests.engine_fixture import EngineBox
from tests.sshd_harness import Sshd, free_port

pytestmark = pytest.mark.slow

STAGES = ("prepare", "extract", "vocab", "train", "evaluate")


def _runs(box: Box, workdir: str) -> list[str]:
    done = inside(box.name, "sh", "-c", 'ls -d "$1"/runs/*-pipeline-* 2>/dev/null', "sh", workdir)
    return sorted(done.stdout.split())


def _wait_inside(box: Box, what: str, probe: list[str], timeout: float) -> str:
    """The probe's output once it succeeds inside the container, polled by one shell in there:
    not a `podman exec` per poll (podman, conmon and runc each time: 0.6 s wall apiece at load
    8), which ran every 0.3 s for as long as evaluate ran, on the same two cores."""
    poll = 'until out=$("$@" 2>/dev/null); do sleep 0.3; done; printf "%s\\n" "$out"'
    done = inside(box.name, "timeout", f"{timeout:.0f}", "sh", "-c", poll, "sh", *probe)
    if done.returncode == 0:
        return done.stdout
    raise AssertionError(f"{what} did not happen inside {box.name} in {timeout:.0f} s "
                         f"(exit {done.returncode}: {done.stderr.strip()[-300:]})")


def _signal_group(box: Box, sig: str, pgid: str) -> subprocess.CompletedProcess[str]:
    """`--` before the group: procps-ng 4.0.2's kill reads `kill -STOP -1000` as kill(-1, ...),
    every process of the container, and exits 1 (seen with strace on this machine)."""
    return inside(box.name, "kill", "-s", sig, "--", f"-{pgid}")


def test_the_box_runner_in_the_container_outlives_an_ssh_drop_and_a_killed_console(
        console_demo: Demo, container_box: Box, sshd: Sshd, tmp_path: Path) -> None:
    workdir = f"/tmp/eagle3-in-container-{tmp_path.name}"
    cfg, _ = ssh_box(console_demo, sshd, tmp_path, Path(workdir))
    toml = container_box.toml(tmp_path / "console.toml", "box", "podman", ssh={
        "ssh": sshd.alias, "ssh_config": str(sshd.ssh_config),
        "known_hosts": str(sshd.known_hosts)}, workdir=workdir, python=sys.executable)
    session = tmp_path / "killed.jsonl"
    argv = [sys.executable, "-m", "console", "run", "--host", "box", "--config", str(toml),
            "--pipeline", str(cfg), "--from", "evaluate", "--session", str(session)]
    with open(tmp_path / "console.out", "wb") as out:
        console = subprocess.Popen(argv, cwd=REPO, env=console_env(console_demo), stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        run_dir = _wait_inside(container_box, "a pipeline run", ["sh", "-c",
                               'ls -d "$1"/runs/*-pipeline-*', "sh", workdir], 300).split()[-1]
        _wait_inside(container_box, "evaluate's start", [
            "grep", "-q", '"type":"start","stage":"evaluate"', f"{run_dir}/log"], 300)
        pgid = container_box.read_inside(f"{run_dir}/pid").strip()
        assert _signal_group(container_box, "STOP", pgid).returncode == 0
        # the runner itself is held (state T: a signal lands once the process leaves the kernel)
        _wait_inside(container_box, "the runner's stop", [
            "grep", "-q", ") T ", f"/proc/{pgid}/stat"], 30)
        try:
            assert sshd.drop_connections() >= 1
            console.send_signal(signal.SIGKILL)
            assert console.wait(30) == -signal.SIGKILL
            assert not container_box.exists_inside(f"{run_dir}/exit.json")  # still going
        finally:
            _signal_group(container_box, "CONT", pgid)
    finally:
        console.kill()
        console.wait()
    exit_record = json.loads(_wait_inside(container_box, "the run's end", [
        "cat", f"{run_dir}/exit.json"], 600))
    log = container_box.read_inside(f"{run_dir}/log")
    assert exit_record["returncode"] == 0, log[-3000:]
    ends = [json.loads(line[len("@@eagle3 "):]) for line in log.splitlines()
            if line.startswith("@@eagle3 ") and '"type":"end"' in line]
    assert [(r["stage"], r["ok"]) for r in ends] == [("evaluate", True)]
    assert not Path(workdir).exists()  # the run lived in the container only
    # the next start, through sshd again: five stages done, from their manifests in the box
    again = tmp_path / "again.jsonl"
    assert console_main(["run", "--host", "box", "--config", str(toml), "--pipeline", str(cfg),
                         "--session", str(again)]) == 0
    with SessionReader(again) as reader:
        events = list(reader.events())
    done = [e.payload["stage"] for e in events if e.kind == ev.STAGE_MANIFEST
            and e.payload.get("complete")]
    assert done == list(STAGES)
    skipped = [e.payload["stage"] for e in events if e.kind == ev.STAGE_SKIPPED]
    assert skipped == list(STAGES) and not [e for e in events if e.kind == ev.STAGE_START]
    assert len(_runs(container_box, workdir)) == 2  # the killed one, and this one (ran nothing)


def test_serve_and_bench_run_vllm_inside_the_container(
        engine_box: EngineBox, container_box: Box, sshd: Sshd, tmp_path: Path) -> None:
    """`serve start` runs vLLM 0.32 in the container (its process in the container's pid
    namespace, its job files in the container only); `bench run` measures it through the SSH
    forward; `serve stop` ends it. One engine start (the session's engine box stops first)."""
    engine_box.release()
    workdir = f"/tmp/eagle3-in-container-{tmp_path.name}"
    assert inside(container_box.name, "sh", "-c", 'mkdir -p "$1" && ln -s "$2" "$1/demo"', "sh",
                  workdir, str(engine_box.demo_dir.resolve())).returncode == 0
    port = free_port()
    toml = container_box.toml(tmp_path / "console.toml", "c", "docker", ssh={
        "ssh": sshd.alias, "ssh_config": str(sshd.ssh_config),
        "known_hosts": str(sshd.known_hosts)}, workdir=workdir, python=str(engine_box.python),
        vllm_url=f"http://127.0.0.1:{port}")
    common = ["--host", "c", "--config", str(toml), "--no-record"]
    assert console_main(["serve", "start", "--demo", *common]) == 0
    try:
        procs = inside(container_box.name, "pgrep", "-f", "vllm").stdout.split()
        assert procs, "no vLLM process in the container"
        out = tmp_path / "bench.json"
        assert console_main(["bench", "run", "--concurrency", "1", "--rounds", "1",
                             "--max-tokens", "8", "--warmup", "0", "--prompts",
                             str(engine_box.out / "prepare" / "eval.jsonl"), "--out", str(out),
                             *common]) == 0
        (point,) = json.loads(out.read_text())["run"]["points"]
        assert point["requests"] >= 1 and point["output_tokens"] > 0, point
        assert point["acceptance"]["drafts"] > 0  # speculative decoding with the trained head
    finally:
        assert console_main(["serve", "stop", *common]) == 0
    assert not inside(container_box.name, "pgrep", "-f", "vllm.entrypoints").stdout.strip()
    assert not Path(workdir).exists()
