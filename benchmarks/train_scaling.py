"""Samples/s of the demo's training with 1 and 2 ranks (issue 38): the same data, the same run.

The demo (pipeline/demo.py) is built once in a temporary directory, prepare/extract/vocab run
once with the box environment's python (speculators 0.9: the 0.3 path cannot run several ranks
on CPU), then the train stage runs with `train.nproc_per_node = 1` and `= 2` in turn, each
`--rounds` times, alternating. One torch thread per rank (`cpu_threads = 1`, OMP_NUM_THREADS=1):
with torch's default threads a single rank already uses both cores of this machine, and the
comparison would measure threads, not ranks.

Two figures per run, both in samples/s (epochs x prepare's samples; speculators trains on nine
tenths of them and validates on the rest, in both runs alike):
- training (the last line's ratio): rank 0's progress records, from the first (its first step
  done) to the one that marks the end of training (`trained`, after the last epoch's
  validation), the share of the run's steps done in between over that time. Every step but the
  first, every validation and checkpoint are in; start-up (torchrun, each rank's imports, the
  model build, the first step's warm-up) and speculators' teardown (gc, destroying the process
  group) are not: they are paid once per stage, not per sample;
- stage: the whole `pipeline train` process, start-up and teardown included: what a user waits
  for on a run this short.
The 1-minute load average is printed before and after each run: two ranks on a 2-core machine
need both cores, and lockstep ranks wait for whichever one the scheduler put aside, so other
work on the machine costs 2 ranks more than 1.

The machine's own ceiling, measured in each round beside the runs: one single-thread torch loop
(matmuls of the head's width, no communication) alone, then two copies at once, as two ranks
run: `cores: 2 copies / 1 copy` is what two ranks could reach if training split perfectly. On
this VM the two vCPUs were seen to slow each other (one copy 0.20 s, two 0.40 s each:
docs/measurements.md, issue 51): then no change to the training can read 2.
Last line: `train 2 ranks / 1 rank: R`.

    python benchmarks/train_scaling.py [--rounds 1] [--epochs 4] [--python PY]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from _common import ROOT, pipeline  # first: the repository root on sys.path

from pipeline.progress import parse
from pipeline.stages import EXTRACT, PREPARE, TRAIN, VOCAB
from tests import box_env

ENV = box_env.run_env(OMP_NUM_THREADS="1")  # one torch thread per rank


class Run(NamedTuple):
    training: float  # samples/s from the first step's end to the end of training
    stage: float  # samples/s over the whole stage process
    world: int
    seconds: float  # the stage process, start to end
    window: float  # the training window
    load: tuple[float, float]  # 1-minute load average before and after


def train(python: str, config: Path, samples: int) -> Run:
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen([python, "-m", "pipeline", TRAIN, "--config", str(config),
                             "--force"], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    first: tuple[float, int] | None = None
    trained: tuple[float, int] | None = None
    end: dict[str, object] = {}
    for line in proc.stdout:
        rec = parse(line)
        if rec is None or rec.get("stage") != TRAIN:
            continue
        if rec["type"] == "progress":
            if first is None:
                first = (time.perf_counter(), int(rec["done"]))
            if rec.get("trained"):
                trained = (time.perf_counter(), int(rec["done"]))
        elif rec["type"] == "end":
            end = rec
    seconds = time.perf_counter() - t0
    if proc.wait() != 0 or not end.get("ok") or first is None or trained is None:
        raise SystemExit(f"train failed or marked no end of training (exit {proc.returncode})"
                         f": {end}")
    (t_a, d_a), (t_b, d_b) = first, trained
    summary = end["summary"]
    assert isinstance(summary, dict)
    total = samples * int(summary["epochs"])
    return Run(training=total * (d_b - d_a) / d_b / (t_b - t_a), stage=total / seconds,
               world=int(summary["world_size"]), seconds=seconds, window=t_b - t_a,
               load=(load0, os.getloadavg()[0]))


# One rank's kind of work without a rank's communication: fixed, so that its time is the cores'.
_LOOP = ("import time, torch; torch.set_num_threads(1); a = torch.randn(512, 512); "
         "b = torch.randn(512, 512); t = time.perf_counter()\n"
         "for _ in range(300): a = torch.tanh(a @ b)\n"
         "print(time.perf_counter() - t)")


def cores(python: str) -> float:
    """Throughput of two copies of _LOOP at once over one copy alone (2.0: two free cores)."""
    def copies(n: int) -> list[float]:
        procs = [subprocess.Popen([python, "-c", _LOOP], env=ENV, stdout=subprocess.PIPE,
                                  text=True) for _ in range(n)]
        return [float(p.communicate()[0]) for p in procs]

    alone = copies(1)[0]
    return 2 * alone / max(copies(2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--python", help="speculators 0.9's python (default: the vllm032 box env)")
    args = ap.parse_args()
    python = args.python or str(box_env.ensure("vllm032"))
    with tempfile.TemporaryDirectory(prefix="train-scaling-") as tmp:
        demo = Path(tmp) / "demo"
        pipeline(python, "demo-setup", "--dir", str(demo), env=ENV)
        base = (demo / "pipeline.toml").read_text().replace(
            "epochs = 8", f"epochs = {args.epochs}")
        assert "cpu_threads = 1" in base
        configs = {}
        for n in (1, 2):
            configs[n] = demo / f"ranks{n}.toml"
            configs[n].write_text(base.replace("noise_std = 0.0",
                                               f"noise_std = 0.0\nnproc_per_node = {n}"))
        for name in (PREPARE, EXTRACT, VOCAB):  # one copy of the data for both
            pipeline(python, name, "--config", str(configs[1]), "--force", env=ENV)
        samples = int(json.loads((demo / "out" / "manifests" / f"{PREPARE}.json").read_text())
                      ["summary"]["samples"])
        runs: dict[int, list[Run]] = {1: [], 2: []}
        ceilings: list[float] = []
        for r in range(args.rounds):
            ceilings.append(cores(python))
            print(f"round {r + 1}: cores: 2 copies / 1 copy of a single-thread torch loop "
                  f"{ceilings[-1]:.2f}", flush=True)
            for n in (1, 2):
                run = train(python, configs[n], samples)
                assert run.world == n, (run.world, n)
                runs[n].append(run)
                print(f"round {r + 1}: {n} rank(s) x 1 thread: training {run.training:.1f} "
                      f"samples/s ({run.window:.2f} s), stage {run.stage:.1f} samples/s "
                      f"({run.seconds:.1f} s); {samples} samples x {args.epochs} epochs; "
                      f"load {run.load[0]:.2f} -> {run.load[1]:.2f}", flush=True)
    one, two = (statistics.median(x.training for x in runs[n]) for n in (1, 2))
    one_s, two_s = (statistics.median(x.stage for x in runs[n]) for n in (1, 2))
    print(f"stage (start-up and teardown in): 1 rank {one_s:.1f} samples/s, 2 ranks "
          f"{two_s:.1f} samples/s: 2 ranks / 1 rank {two_s / one_s:.2f}")
    print(f"training: 1 rank {one:.1f} samples/s, 2 ranks {two:.1f} samples/s (median of "
          f"{args.rounds})")
    # The spread (issue 51): each round's own ratio (its 1-rank and 2-rank runs back to back,
    # under the same load) and the range of each figure, with the load seen around them.
    ratios = [b.training / a.training for a, b in zip(runs[1], runs[2], strict=True)]
    loads = [x for n in (1, 2) for r in runs[n] for x in r.load]
    print("spread: per-round ratio " + ", ".join(f"{r:.2f}" for r in ratios)
          + f" (min {min(ratios):.2f}, max {max(ratios):.2f}); 1 rank "
          f"{min(x.training for x in runs[1]):.1f}-{max(x.training for x in runs[1]):.1f}, "
          f"2 ranks {min(x.training for x in runs[2]):.1f}-{max(x.training for x in runs[2]):.1f}"
          f" samples/s; load average {min(loads):.2f}-{max(loads):.2f}")
    print(f"cores: 2 copies / 1 copy {statistics.median(ceilings):.2f} (median; per round "
          + ", ".join(f"{c:.2f}" for c in ceilings) + "): the most two ranks can read here")
    print(f"train 2 ranks / 1 rank: {two / one:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
