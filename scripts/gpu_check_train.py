"""The pipeline's training checks of scripts/gpu_check.py (5: the train stage under torchrun
on CUDA; 6: online training beside its extraction server): their own module, so that each file
stays one concern. Run through gpu_check.py, never alone.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the stage table (standard library)

from pipeline.stages import EXTRACT, PREPARE, TRAIN, VOCAB

ROOT = Path(__file__).resolve().parents[1]


def online_check(python: str) -> dict:
    """The online mode end to end on this GPU with the demo's tiny target."""
    problems: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="gpu-check-online-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, "-m", "pipeline", "demo-setup", "--dir", str(work)],
                          env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"problems": [f"online: demo-setup failed: {done.stderr[-1000:]}"]}
    cfg = work / "pipeline.toml"
    text = cfg.read_text()
    text = re.sub(r"^epochs = \d+$", "epochs = 1", text, flags=re.M)
    text = text.replace('device = "cpu"', 'device = "auto"')
    cfg.write_text(text.replace("[train]\n", '[train]\nmode = "online"\n'))
    logs = {}
    for stage in (PREPARE, EXTRACT, VOCAB, TRAIN):
        run = subprocess.run([python, "-m", "pipeline", stage, "--config", str(cfg)], env=env,
                             capture_output=True, text=True, timeout=1800)
        logs[stage] = (run.stdout + run.stderr)[-3000:]
        if run.returncode != 0:
            problems.append(f"online: {stage} exited {run.returncode}: {logs[stage][-500:]}")
            break
    out = work / "out"
    train = out / "manifests" / f"{TRAIN}.json"
    summary = json.loads(train.read_text()).get("summary", {}) if train.exists() else {}
    if not problems and summary.get("mode") != "online":
        problems.append(f"online: train's summary says mode {summary.get('mode')!r}")
    left = [p.name for p in (out / EXTRACT / "hidden_states").glob("*")]  # none if no folder
    if left:
        problems.append(f"online: states left on disk under extract/: {left[:5]}")
    staged = list((out / TRAIN / "online-states").glob("*"))
    if staged:
        problems.append(f"online: the server's files were not all consumed: {len(staged)}")
    alive = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout
    if alive.strip():
        problems.append(f"online: processes of the run left: {alive.split()}")
    return {"steps": summary.get("steps"), "problems": problems, "logs": logs}
TRAIN_DRIVER = r"""
import json, sys
from pathlib import Path
from pipeline import config, ranks
from pipeline.errors import PipelineError
cfg = config.load(sys.argv[1], check_disk=False)
save = Path(sys.argv[3])
save.mkdir(parents=True, exist_ok=True)
try:
    res = ranks.train_local(cfg, save, sys.argv[4], int(sys.argv[2]))
except PipelineError as exc:
    print("REFUSED " + json.dumps({"exit_code": exc.exit_code, "message": str(exc)}), flush=True)
    raise SystemExit(exc.exit_code)
print("RESULT " + json.dumps(res), flush=True)
"""
VERSION = "import importlib.metadata as m; print(m.version('speculators'))"


def _train_env(site: Path | None) -> dict:
    front = [str(site)] if site else []
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*front, str(ROOT)]),
            "TQDM_DISABLE": "1"}


def _run(argv: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def train_check(site: Path | None, device: str, work: Path) -> dict:
    """The demo's data, then its training under torchrun on `device` with this site's
    speculators: 0.3 with one rank (FSDP on one GPU; on CPU its refusal), 0.9 with one rank per
    GPU (two on CPU)."""
    env = _train_env(site)
    label = site.name if site else "python"
    got = _run([sys.executable, "-c", VERSION], env, 120)
    if got.returncode != 0:
        return {"site": label, "problems": [f"{label}: speculators not importable: "
                                            f"{got.stderr.strip().splitlines()[-1:]}"]}
    version = got.stdout.strip()
    old = version.startswith("0.3")
    if device == "cuda":
        import torch

        nproc = 1 if old else max(1, torch.cuda.device_count())
    else:
        nproc = 2
    demo = work / f"train-{label}"
    problems: list[str] = []
    done = _run([sys.executable, "-m", "pipeline", "demo-setup", "--dir", str(demo)], env, 1200)
    if done.returncode != 0:
        return {"site": label, "version": version,
                "problems": [f"{label}: demo-setup failed: {done.stderr[-1500:]}"]}
    cfg = demo / "pipeline.toml"
    text = cfg.read_text()
    for a, b in (("epochs = 8", "epochs = 1"), ("eval_samples = 8", "eval_samples = 8\nsamples = 64"),
                 ('device = "cpu"\nnoise_std', f'device = "{device}"\nnoise_std')):
        if a not in text:
            return {"site": label, "problems": [f"the demo config has no {a!r}"]}
        text = text.replace(a, b)
    cfg.write_text(text)
    for stage in (PREPARE, EXTRACT, VOCAB):
        done = _run([sys.executable, "-m", "pipeline", stage, "--config", str(cfg)], env, 1200)
        if done.returncode != 0:
            return {"site": label, "version": version, "problems": [
                f"{label}: {stage} failed: {(done.stdout + done.stderr)[-1500:]}"]}
    save = demo / "out" / "train-check" / "checkpoints"
    done = _run([sys.executable, "-c", TRAIN_DRIVER, str(cfg), str(nproc), str(save), device],
                env, 1800)
    out = done.stdout
    report = {"site": label, "version": version, "device": device, "nproc": nproc,
              "returncode": done.returncode, "log_tail": (out + done.stderr)[-4000:]}
    if old and device == "cpu":  # several ranks on CPU: the 0.3 path says why, in one line
        refused = [json.loads(ln[8:]) for ln in out.splitlines() if ln.startswith("REFUSED ")]
        if not (done.returncode == 2 and refused and "trainer.py:104" in refused[0]["message"]):
            problems.append(f"{label}: speculators {version} on CPU with 2 ranks was not refused "
                            f"in one line (exit {done.returncode})")
        report["problems"] = problems
        return report
    results = [json.loads(ln[7:]) for ln in out.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not results:
        problems.append(f"{label}: training under torchrun failed (exit {done.returncode}): "
                        f"{(out + done.stderr)[-1500:]}")
        report["problems"] = problems
        return report
    res = results[0]
    report["result"] = res
    if res.get("world_size") != nproc:
        problems.append(f"{label}: world size {res.get('world_size')}, expected {nproc}")
    steps = [r.get("steps") for r in res.get("ranks", [])]
    if len(steps) != nproc or not all(isinstance(n, int) and n >= 1 for n in steps):
        problems.append(f"{label}: ranks' steps {steps} (expected {nproc} ranks, each >= 1)")
    wrote = [r.get("wrote") for r in res.get("ranks", [])]
    if not wrote or not wrote[0] or any(wrote[1:]):
        problems.append(f"{label}: files written by rank: {wrote} (rank 0 alone must write)")
    if not any(save.glob("*/model.safetensors")):
        problems.append(f"{label}: no checkpoint under {save}")
    loss = (res.get("final") or {}).get("loss", (res.get("final") or {}).get("loss_sum"))
    if not isinstance(loss, (int, float)) or loss != loss or loss in (float("inf"), float("-inf")):
        problems.append(f"{label}: final loss {loss!r}")
    report["problems"] = problems
    return report
