"""Training across boxes (`[train] hosts`, pipeline/nodes.py + remote/train_nodes.py): two real
sshd boxes on loopback addresses (scripts/box_fleet.py, both on the vLLM 0.32 + speculators 0.9
environment), `console run` on the first, torchrun's c10d rendezvous between them with gloo, and
speculators' own distributed trainer, two ranks per box (`nproc_per_node = 2`, issue 38).
Checked: each box's two ranks stepped in a world of boxes x 2 = 4 (each box's own log), the
manifest says world size 4, and the checkpoint on the first box loads. Then the
bad inputs, one line each: an unknown train host, an unreachable one, the first train host not
the run's host, and speculators 0.3 (which cannot train across boxes on CPU)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from pipeline.demo import pipeline_toml
from pipeline.progress import parse
from tests import box_env
from tests.demo_fixture import Demo

REPO = Path(__file__).resolve().parents[2]
FLEET = REPO / "scripts" / "box_fleet.py"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # 4 ranks on 2 shared cores
RANKS_PER_BOX = 2
WORLD = 2 * RANKS_PER_BOX  # two boxes


class Boxes:
    def __init__(self, root: Path, python: str) -> None:
        self.root = root
        self.python = python
        self.config = root / "console.toml"
        self.boxes = {b["name"]: b for b in json.loads((root / "fleet.json").read_text())["boxes"]}

    def workdir(self, name: str) -> Path:
        return Path(self.boxes[name]["workdir"])


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def boxes(tmp_path_factory: pytest.TempPathFactory, console_demo: Demo) -> Iterator[Boxes]:
    root = tmp_path_factory.mktemp("nodes")
    _link_demo(console_demo, root / "demo")
    python = str(box_env.ensure("vllm032"))
    done = subprocess.run([sys.executable, str(FLEET), "up", "2", "--dir", str(root / "fleet"),
                           "--python", python], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    try:
        yield Boxes(root / "fleet", python)
    finally:
        subprocess.run([sys.executable, str(FLEET), "down", "--dir", str(root / "fleet")],
                       capture_output=True, check=False)


def _link_demo(console_demo: Demo, demo: Path) -> None:
    """The demo's tiny target and conversations, at one path every box sees (as a model on a
    shared disk would be): the session's demo (tests/demo_fixture.py), built by the same
    `pipeline demo-setup --dir D` this module ran itself before, linked, not built again (in
    the console's python: torch 2.13 as in the vllm032 box, transformers 4.57 where that box
    has 5.19; the 0.9 trainer there loads it, as the engine box serves it). Read only: the
    links are to the target and the conversations, never to the demo's out/ (other modules
    rerun its stages); every output here goes under this module's own directories."""
    demo.mkdir()
    for name in ("target", "conversations.jsonl"):
        shared = console_demo.demo_dir / name
        assert shared.exists(), shared
        (demo / name).symlink_to(shared, target_is_directory=shared.is_dir())


def _demo(boxes: Boxes) -> Path:
    return boxes.root.parent / "demo"


def _config(boxes: Boxes, hosts: list[str], name: str, **train: object) -> Path:
    demo = _demo(boxes)
    text = pipeline_toml(title="# training across boxes", model=str(demo / "target"),
                         dataset=str(demo / "conversations.jsonl"), epochs=1, samples=120,
                         eval_samples=2, max_new_tokens=6).replace("baseline = true", "")
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in {"hosts": hosts, **train}.items())
    text = text.replace("noise_std = 0.0\n", "noise_std = 0.0\n" + extra)
    path = boxes.root.parent / name
    path.write_text(text)
    return path


def _console(capsys: pytest.CaptureFixture[str], boxes: Boxes, *argv: str,
             config: Path | None = None) -> tuple[int, list[dict[str, Any]], str]:
    code = main([argv[0], "--config", str(config or boxes.config), "--no-record", "--json",
                 *argv[1:]])
    out, err = capsys.readouterr()
    return code, [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")], err


def _records(log_dir: Path, name: str) -> list[dict[str, Any]]:
    """The @@eagle3 records of the box's jobs called `name` (its own log files)."""
    recs = []
    for meta in sorted(log_dir.glob("runs/*/meta.json")):
        if json.loads(meta.read_text()).get("name") != name:
            continue
        for line in (meta.parent / "log").read_text().splitlines():
            rec = parse(line)
            if rec is not None:
                recs.append(rec)
    return recs


@pytest.fixture(scope="module")
def data_on_both(boxes: Boxes) -> Path:
    """The training data on both boxes: the data stages on box1, then their outputs copied to
    box2 (docs/pipeline.md: a shared disk, or a copy such as this one)."""
    config = _config(boxes, ["box1", "box2"], "nodes.toml", rdzv_port=_free_port("127.0.0.2"),
                     join_timeout=120, nproc_per_node=RANKS_PER_BOX)
    configs1 = boxes.workdir("box1") / "configs"
    configs1.mkdir(parents=True, exist_ok=True)
    shutil.copy(config, configs1 / config.name)
    for stage in ("prepare", "extract", "vocab"):
        done = subprocess.run([boxes.python, "-m", "pipeline", stage, "--config",
                               str(configs1 / config.name)], cwd=REPO,
                              env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    shutil.copytree(configs1 / "out", boxes.workdir("box2") / "configs" / "out")
    return config


def test_a_head_trains_across_two_boxes(boxes: Boxes, data_on_both: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    config = data_on_both
    configs1 = boxes.workdir("box1") / "configs"
    code, evs, err = _console(capsys, boxes, "run", "--host", "box1", "--pipeline", str(config))
    assert code == 0, err + "\n".join(str(e) for e in evs if e.get("kind") == "console.error")

    messages = [(e.get("host"), str((e.get("payload") or {}).get("message", ""))) for e in evs
                if e.get("kind") == "console.info"]
    assert any(h == "box2" and "joins at 127.0.0.2:" in m for h, m in messages)
    # box2's ranks reached the session as box2's events (its job's log, tailed by the console).
    assert any(h == "box2" and m.startswith("train: rank ") and f" of {WORLD}: " in m
               for h, m in messages)
    # Each box's own log: its two ranks in a world of 4 that stepped; box1 holds rank 0.
    ranks = {}
    for name in ("box1", "box2"):
        job = "pipeline" if name == "box1" else "train-node"
        done_recs = [r for r in _records(boxes.workdir(name), job) if r.get("rank_done")]
        assert len(done_recs) == RANKS_PER_BOX, (name, done_recs)
        ranks.update({int(r["rank"]): {**r, "box": name} for r in done_recs})
    assert sorted(ranks) == list(range(WORLD)) and ranks[0]["box"] == "box1"
    assert all(r["world_size"] == WORLD and int(r["steps"]) >= 1 for r in ranks.values())
    # The first box's manifest says so, and its checkpoint is there and loads.
    out = configs1 / "out"
    summary = json.loads((out / "manifests" / "train.json").read_text())["summary"]
    assert summary["world_size"] == WORLD and summary["hosts"] == ["box1", "box2"]
    assert not (boxes.workdir("box2") / "configs" / "out" / "train").exists()
    probe = ("import sys;from speculators.models.eagle3 import Eagle3DraftModel as M;"
             "m=M.from_pretrained(sys.argv[1]);print(sum(p.numel() for p in m.parameters()))")
    done = subprocess.run([boxes.python, "-c", probe, str(out / "train" / "checkpoint")],
                          capture_output=True, text=True)
    assert done.returncode == 0 and int(done.stdout.split()[-1]) > 0, done.stderr[-2000:]


def _one_error(evs: list[dict[str, Any]], err: str) -> str:
    lines = [str((e.get("payload") or {}).get("message", "")) for e in evs
             if e.get("kind") == "console.error"] + [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_an_unknown_train_host_is_one_line(boxes: Boxes,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(boxes, ["box1", "nosuch"], "unknown.toml")
    code, evs, err = _console(capsys, boxes, "run", "--host", "box1", "--pipeline", str(config))
    assert code == 2
    line = _one_error(evs, err)
    assert "train.hosts" in line and "nosuch" in line and "no such host" in line


def test_an_unreachable_train_host_is_one_line(boxes: Boxes, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    dead = _free_port("127.0.0.5")  # nothing listens there
    console = tmp_path / "console.toml"
    console.write_text(boxes.config.read_text() + f'\n[hosts.gone]\nssh = "127.0.0.5"\n'
                       f'port = {dead}\nknown_hosts = "{boxes.root / "known_hosts"}"\n')
    config = _config(boxes, ["box1", "gone"], "gone.toml")
    code, evs, err = _console(capsys, boxes, "run", "--host", "box1", "--pipeline", str(config),
                              config=console)
    assert code == 3
    line = _one_error(evs, err)
    assert "train.hosts: gone is unreachable" in line


def test_the_first_train_host_must_be_the_runs_host(boxes: Boxes,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(boxes, ["box2", "box1"], "order.toml")
    code, evs, err = _console(capsys, boxes, "run", "--host", "box1", "--pipeline", str(config))
    assert code == 2
    assert "console run --host box2" in _one_error(evs, err)


def test_speculators_03_refuses_with_the_evidence(boxes: Boxes) -> None:
    """The vLLM 0.16 + speculators 0.3.0 environment: its trainer cannot train across boxes on
    CPU (docs/pipeline.md), so a box on it says why in one line (exit 2) and starts nothing."""
    config = _config(boxes, ["box1", "box2"], "old.toml")
    done = subprocess.run([str(box_env.ensure("vllm016")), "-m", "pipeline", "train-node",
                           "--config", str(config), "--endpoint", "127.0.0.2:1", "--local-addr",
                           "127.0.0.3", "--run-id", "r", "--data", "d", "--check"],
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True)
    assert done.returncode == 2
    errors = [r for r in map(parse, done.stdout.splitlines()) if r and r["type"] == "error"]
    assert len(errors) == 1
    msg = str(errors[0]["message"])
    assert "speculators 0.3.0" in msg and "trainer.py:104" in msg and "No accelerator" in msg


def test_a_box_without_the_data_is_one_line_and_cancels_the_run(
        boxes: Boxes, data_on_both: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """box2 lost its vocab outputs: its check says so, and box1's run (waiting at the
    rendezvous) is cancelled instead of waiting out its join timeout."""
    manifest = boxes.workdir("box2") / "configs" / "out" / "manifests" / "vocab.json"
    kept = manifest.read_text()
    manifest.unlink()
    config = data_on_both.with_name("nodes-again.toml")
    config.write_text(data_on_both.read_text().replace(
        "join_timeout = 120", "join_timeout = 300").replace(
        "rdzv_port = ", f"rdzv_port = {_free_port('127.0.0.2')}  # was "))
    try:
        code, evs, _ = _console(capsys, boxes, "run", "--host", "box1", "--pipeline",
                                str(config), "--from", "train")
    finally:
        manifest.write_text(kept)
    assert code == 1
    errors = [(e["host"], str((e.get("payload") or {}).get("message", ""))) for e in evs
              if e.get("kind") == "console.error"]
    assert errors[0][0] == "box2" and "no complete vocab" in errors[0][1], errors
    assert any(e.get("kind") == "console.warning" and "cancelling the run on box1" in
               str((e.get("payload") or {}).get("message")) for e in evs)
