"""Issue 33 item 5, the faults of a long run. A reboot: every process of the box runner killed
mid-extract, its files kept; the next `console run` says what was lost and resumes from the
last complete manifests. A full disk: the box's output directory on a small filesystem (a tmpfs mounted for the
test; we are root) that fills during extraction and during training. The stage fails with one
line naming the full disk, leaves nothing half-written that a resume would trust (no `.part`
sample, no partial stage directory, no manifest), and resumes once space is freed.

The stages run as the box runs them (`python -m pipeline STAGE --config FILE`, a process each)
on a tiny target built here once for both tests (pipeline/demo.py with few training steps), not
the whole demo.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline import config as config_mod
from pipeline import manifest
from pipeline.demo import build_demo, pipeline_toml
from tests.local_box import local_console_toml
from tests.tmpfs import small_tmpfs

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", "24m") as mnt:
        yield mnt


@pytest.fixture(scope="module")
def tiny_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local demo's inputs (tiny target, 160 rows), built once for this module's tests:
    they only read them (each test's stages write to an output directory of its own)."""
    demo = tmp_path_factory.mktemp("disk-full-demo")
    build_demo(demo, rows=160, target_steps=2, epochs=1)
    return demo


def demo_config(demo: Path, tmp_path: Path, out: Path,
                name: str) -> tuple[Path, config_mod.PipelineConfig]:
    """A config of the demo `demo` (one epoch) writing to `out`, kept in `tmp_path`: its config
    file and the config read from it."""
    cfg_path = tmp_path / name
    cfg_path.write_text(pipeline_toml(
        title="# The module's tiny demo, by absolute paths.", output_dir=str(out),
        model=str(demo / "target"), dataset=str(demo / "conversations.jsonl"), epochs=1,
        eval_samples=2))
    return cfg_path, config_mod.load(cfg_path, check_disk=False)


def stage(cfg: Path, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", name, "--config", str(cfg)],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def fill(disk: Path, leave: int = 0) -> Path:
    """A ballast file taking all of `disk`'s free space but `leave` bytes. The stage under test
    writes meanwhile: an allocation of what was free a moment ago can fail whole (ENOSPC), so
    the free space is read again and the ballast grown until nothing (but `leave`) is left."""
    ballast = disk / f"ballast-{time.monotonic_ns()}"
    with open(ballast, "wb") as fh:
        for _ in range(1000):
            st = os.statvfs(disk)
            free = st.f_bavail * st.f_frsize
            if free <= leave:
                break
            try:
                os.posix_fallocate(fh.fileno(), os.fstat(fh.fileno()).st_size, free - leave)
            except OSError:
                continue
    return ballast


def errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The stage's error records (pipeline/progress.py): what the console shows as its line."""
    out = []
    for line in proc.stdout.splitlines():
        if line.startswith("@@eagle3 "):
            rec = json.loads(line[len("@@eagle3 "):])
            if rec.get("type") == "error":
                out.append(rec["message"])
    return out


def untrusted(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if p.name.endswith(".part") or ".partial" in p.name
            or ".tmp-" in p.name]


@pytest.mark.slow
def test_a_disk_filling_during_extract_and_train_fails_in_one_line_and_resumes(
        tiny_demo: Path, tmp_path: Path, small_disk: Path) -> None:
    out = small_disk / "out"
    cfg_path, cfg = demo_config(tiny_demo, tmp_path, out, "small-disk.toml")
    assert stage(cfg_path, "prepare").returncode == 0

    # extract: the disk fills while it runs (another writer takes the space once the first
    # samples are written; extract's own projection passed at its start)
    hs = manifest.stage_dir(cfg, "extract") / "hidden_states"
    filled: list[Path] = []

    def filler() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if hs.is_dir() and sum(1 for p in hs.iterdir() if not p.name.endswith(".part")) >= 3:
                filled.append(fill(small_disk))
                return
            time.sleep(0.002)

    t = threading.Thread(target=filler)
    t.start()
    proc = stage(cfg_path, "extract")
    t.join()
    assert filled, "extract ended before any sample was written"
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = errors(proc)
    assert line.startswith("extract: disk full: no space left on the filesystem at "
                           f"{small_disk}"), line
    assert "\n" not in line and "Traceback" not in proc.stderr
    assert manifest.read(cfg, "extract") is None
    assert untrusted(out) == [], untrusted(out)
    kept = {p.name: p.stat().st_mtime_ns for p in hs.iterdir()}
    assert len(kept) >= 3

    filled.pop().unlink()  # space freed: the re-run resumes
    proc = stage(cfg_path, "extract")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert manifest.status(cfg, "extract").complete
    # the finished samples were kept, not recomputed
    assert all((hs / n).stat().st_mtime_ns == m for n, m in kept.items())
    assert stage(cfg_path, "vocab").returncode == 0

    # train: the disk is full before its checkpoint is written
    ballast = fill(small_disk, leave=64 * 1024)
    proc = stage(cfg_path, "train")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = errors(proc)
    assert line.startswith("train: disk full: no space left on the filesystem at "
                           f"{small_disk}"), line
    assert manifest.read(cfg, "train") is None
    assert not manifest.stage_dir(cfg, "train").exists()
    assert untrusted(out) == [], untrusted(out)
    ballast.unlink()
    proc = stage(cfg_path, "train")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert manifest.status(cfg, "train").complete


@pytest.mark.slow
def test_a_reboot_mid_extract_is_reported_and_the_next_run_resumes(
        tiny_demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from console.cli import main

    out = tmp_path / "out"
    cfg_path, cfg = demo_config(tiny_demo, tmp_path, out, "reboot.toml")
    box = tmp_path / "box"
    console_toml = local_console_toml(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_DATA_HOME=str(tmp_path / "data"))
    argv = ["run", "--host", "local", "--config", str(console_toml), "--pipeline", str(cfg_path),
            "--no-record"]
    first = subprocess.Popen([sys.executable, "-m", "console", *argv], cwd=REPO, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hs = manifest.stage_dir(cfg, "extract") / "hidden_states"
    try:
        deadline = time.monotonic() + 600
        while not (hs.is_dir() and sum(1 for p in hs.iterdir()
                                       if not p.name.endswith(".part")) >= 3):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.01)
        # the "reboot": every process of the run (supervisor and runner, each a process group
        # of its own, the stage a child of the runner) dies at once; the files stay
        (run_dir,) = [p.parent for p in box.rglob("runs/*/pid")]
        for name in ("supervisor.pid", "pid"):
            pid = int((run_dir / name).read_text())
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    finally:
        first.kill()
        first.wait()
    assert not (run_dir / "exit.json").exists()
    assert manifest.status(cfg, "prepare").complete and manifest.read(cfg, "extract") is None
    kept = {p.name: p.stat().st_mtime_ns for p in hs.iterdir() if not p.name.endswith(".part")}

    capsys.readouterr()
    for var in ("XDG_STATE_HOME", "XDG_DATA_HOME"):  # the same laptop state as the first
        monkeypatch.setenv(var, env[var])
    rc = main(argv)
    printed = capsys.readouterr().out
    assert rc == 0, printed[-3000:]
    (warning,) = [line for line in printed.splitlines() if "was lost" in line]
    assert f"the last pipeline run {run_dir.name} on local was lost" in warning
    assert "while extract ran" in warning and "complete and kept: prepare" in warning
    assert "prepare" in printed and "skipped" in printed
    for stage in ("prepare", "extract", "vocab", "train", "evaluate"):
        assert manifest.status(cfg, stage).complete, stage
    # extract resumed: the samples finished before the reboot were kept, not recomputed
    assert all((hs / n).stat().st_mtime_ns == m for n, m in kept.items())
