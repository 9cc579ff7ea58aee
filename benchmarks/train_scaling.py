"""Samples/s of the demo's training with 1 and 2 ranks (issue 38): the same data, the same run.

The demo (pipeline/demo.py) is built once in a temporary directory, prepare/extract/vocab run
once with the box environment's python (speculators 0.9: the 0.3 path cannot run several ranks
on CPU), then the train stage runs with `train.nproc_per_node = 1` and `= 2` in turn, each
`--rounds` times, alternating. One torch thread per rank (`cpu_threads = 1`, OMP_NUM_THREADS=1):
with torch's default threads a single rank already uses both cores of this machine, and the
comparison would measure threads, not ranks.

Throughput is read off rank 0's progress records as they arrive (the ranks step in lockstep, so
rank 0's step count is the run's): from the first progress record to the last, the share of the
run's steps done in between times the samples the run trains on (epochs x prepare's samples),
over that time. Start-up (torchrun, each rank's imports, the model build) is left out: it is
paid once per stage, not per sample. Last line: `train 2 ranks / 1 rank: R`.

    python benchmarks/train_scaling.py [--rounds 1] [--epochs 4] [--python PY]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository root on sys.path)

from pipeline.progress import parse

ROOT = Path(__file__).resolve().parents[1]


def box_python() -> str:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "box_env.py"), "vllm032",
                           "--quiet"], capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}


def stage(python: str, name: str, config: Path) -> None:
    done = subprocess.run([python, "-m", "pipeline", name, "--config", str(config), "--force"],
                          cwd=ROOT, env=env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def train(python: str, config: Path, samples: int) -> tuple[float, int, float]:
    """(samples/s, world size, stage seconds) of one train stage."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([python, "-m", "pipeline", "train", "--config", str(config),
                             "--force"], cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    marks: list[tuple[float, int, int]] = []  # (when, done, total)
    end: dict[str, object] = {}
    for line in proc.stdout:
        rec = parse(line)
        if rec is None or rec.get("stage") != "train":
            continue
        if rec["type"] == "progress":
            marks.append((time.perf_counter(), int(rec["done"]), int(rec["total"])))
        elif rec["type"] == "end":
            end = rec
    if proc.wait() != 0 or not end.get("ok") or len(marks) < 2:
        raise SystemExit(f"train failed (exit {proc.returncode}): {end}")
    (t_a, d_a, _), (t_b, d_b, _) = marks[0], marks[-1]
    summary = end["summary"]
    assert isinstance(summary, dict)
    epochs = int(summary["epochs"])
    return (samples * epochs * (d_b - d_a) / d_b / (t_b - t_a), int(summary["world_size"]),
            time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--python", help="speculators 0.9's python (default: the vllm032 box env)")
    args = ap.parse_args()
    python = args.python or box_python()
    with tempfile.TemporaryDirectory(prefix="train-scaling-") as tmp:
        demo = Path(tmp) / "demo"
        subprocess.run([python, "-m", "pipeline", "demo-setup", "--dir", str(demo)], cwd=ROOT,
                       env=env(), capture_output=True, check=True)
        base = (demo / "pipeline.toml").read_text().replace(
            "epochs = 8", f"epochs = {args.epochs}")
        assert "cpu_threads = 1" in base
        configs = {}
        for n in (1, 2):
            configs[n] = demo / f"ranks{n}.toml"
            configs[n].write_text(base.replace("noise_std = 0.0",
                                               f"noise_std = 0.0\nnproc_per_node = {n}"))
        for name in ("prepare", "extract", "vocab"):  # one copy of the data for both
            stage(python, name, configs[1])
        samples = int(json.loads((demo / "out" / "manifests" / "prepare.json").read_text())
                      ["summary"]["samples"])
        rates: dict[int, list[float]] = {1: [], 2: []}
        for r in range(args.rounds):
            for n in (1, 2):
                rate, world, secs = train(python, configs[n], samples)
                assert world == n, (world, n)
                rates[n].append(rate)
                print(f"round {r + 1}: {n} rank(s) x 1 thread: {rate:.1f} samples/s "
                      f"(stage {secs:.1f} s, {samples} samples x {args.epochs} epochs)",
                      flush=True)
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    load = os.getloadavg()
    print(f"1 rank: {one:.1f} samples/s, 2 ranks: {two:.1f} samples/s (median of "
          f"{args.rounds}); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"train 2 ranks / 1 rank: {two / one:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
