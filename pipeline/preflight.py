"""Preflight for extraction through vLLM on a GPU box: refuse before an engine is started
(minutes, and a CUDA OOM deep in a traceback) when the GPUs it would use are held by another
process — typically the serving vLLM — or when the model cannot fit at the configured
tensor_parallel_size.

GPU facts come from NVML (`pynvml`, nvidia-ml-py); without it, or without GPUs (a CPU box), the
GPU part reports why it did not run and passes. Runs on the box with the pipeline's python.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.units import fmt_bytes

# Another process holding more than this on a GPU we need is a refusal (the CUDA context of a
# stray python is a few hundred MiB; a serving vLLM holds most of the card).
HELD_BYTES = 2 * 2**30
# Fraction of a GPU's memory the weights may take per rank (the rest: KV cache, activations).
WEIGHTS_FRACTION = 0.8


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return text[:120] + ("…" if len(text) > 120 else "")


def gpus() -> tuple[list[dict[str, Any]], str | None]:
    """[{index, name, total, used, procs: [{pid, used, cmd}]}], or ([], why not)."""
    try:
        import pynvml
    except ImportError:
        return [], "pynvml (nvidia-ml-py) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound on a box without a driver
        return [], f"NVML unavailable: {exc}"
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            procs = [{"pid": int(p.pid), "used": int(p.usedGpuMemory or 0),
                      "cmd": _cmdline(int(p.pid))}
                     for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
            out.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                        "total": int(mem.total), "used": int(mem.used), "procs": procs})
        return out, None
    finally:
        pynvml.nvmlShutdown()


def visible(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The devices vLLM would use, in order, after CUDA_VISIBLE_DEVICES (indices only)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None or not env.strip():
        return devices
    by_index = {d["index"]: d for d in devices}
    return [by_index[int(x)] for x in env.split(",") if x.strip().isdigit()
            and int(x) in by_index]


def weights_bytes(model_dir: Path) -> int:
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
        if total:
            return int(total)
    return sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))


def check(model_dir: Path, tensor_parallel_size: int,
          devices: list[dict[str, Any]] | None = None) -> list[str]:
    """Notes on what was checked; raises PipelineError with the cause and the fix."""
    if devices is None:
        devices, why = gpus()
        if why:
            return [f"GPU preflight skipped: {why}"]
    devices = visible(devices)
    if not devices:
        return ["GPU preflight skipped: no GPU visible"]
    tp = tensor_parallel_size
    if tp > len(devices):
        raise PipelineError(f"extract.tensor_parallel_size = {tp} but {len(devices)} GPU(s) "
                            "are visible: lower it or expose more GPUs (CUDA_VISIBLE_DEVICES)")
    use = devices[:tp]
    held = [(d, p) for d in use for p in d["procs"] if p["pid"] != os.getpid() and p["used"] > HELD_BYTES]
    if held:
        who = "; ".join(f"GPU {d['index']}: pid {p['pid']} holds {fmt_bytes(p['used'])} "
                        f"({p['cmd']})" for d, p in held)
        pids = " ".join(sorted({str(p["pid"]) for _, p in held}))
        raise PipelineError(f"the GPUs extraction needs are held: {who}. Stop that process "
                            f"first (e.g. the serving vLLM: `kill {pids}` on the box, or stop "
                            "its container), or point CUDA_VISIBLE_DEVICES at free GPUs")
    need = weights_bytes(model_dir)
    per_rank = min(d["total"] for d in use) * WEIGHTS_FRACTION
    if need > per_rank * tp:
        fit = next((n for n in (2, 4, 8, 16) if need <= per_rank * n), None)
        hint = (f"set extract.tensor_parallel_size = {fit}" if fit and fit <= len(devices)
                else "use a box with more or larger GPUs")
        raise PipelineError(f"the weights ({fmt_bytes(need)}) do not fit {tp} × {use[0]['name']} "
                            f"({fmt_bytes(per_rank)} usable each for weights): {hint}")
    return [f"GPU preflight: {tp} × {use[0]['name']} free; weights {fmt_bytes(need)} ≤ "
            f"{fmt_bytes(per_rank * tp)}"]
