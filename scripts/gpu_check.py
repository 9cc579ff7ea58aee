"""Check the GPU readers and their test double against a real NVIDIA GPU (run on a GPU box).

The suite runs without a GPU: the probes' NVML path is exercised against tests/doubles/pynvml.py.
A double that drifts from the real nvidia-ml-py proves nothing, so this script, run where a
real GPU and nvidia-ml-py exist, reads the same GPU four ways and says where they disagree:

1. the double's API against the real module: every `nvml*` function the probes call exists in
   both, and each real return value has the attributes the double's has (struct fields); the
   Xid event sequence (create, register, a 0 ms wait, free) on both; each health field of
   remote/probes/gpu_health.py read through the sampler's reader and printed, or "absent";
2. the env probe through NVML and through nvidia-smi (NVML hidden), field by field;
3. the sampler at 10 Hz through each source, with a torch matmul load in the middle of the
   window (utilisation and memory must rise while it runs), and the sampler's own CPU time per
   sample (what a 10 Hz stats stream costs the box);
4. nvidia-smi's raw CSV beside them;
5. the train stage's CUDA path under torchrun (issue 38, pipeline/ranks.py): the demo's data
   (prepare, extract, vocab), then `ranks.train_local` on cuda, per speculators: 0.3's FSDP
   path with one rank on one GPU, 0.9's `speculators train` with one rank per GPU; checked: the
   world size, rank 0's checkpoint, every rank's steps, a finite loss. Each `--train-site DIR`
   is a directory put in front of PYTHONPATH holding one speculators release and what it needs
   beyond the image (pure-Python wheels unpacked with `pip install --no-deps --target DIR ...`:
   speculators, transformers 4.x for 0.3 or 5.x for 0.9, ...); none: the python's own.
   `--train-device cpu` runs the same on CPU (0.9: two gloo ranks; 0.3: its one-line refusal),
   so this check's own machinery runs on a machine without a GPU.
6. `[train] mode = "online"` (pipeline/trainers/online.py), whose extraction server needs CUDA:
   the demo's tiny target through prepare, extract (rows only), vocab and train with the
   server beside it (`--online-python`: a python with vLLM >= 0.18 and speculators 0.9); train
   must finish in online mode, no state may be left on disk and no process of the server
   (`--only online`).

    python3 scripts/gpu_check.py --out DIR        # writes DIR/report.json, prints a summary
    python3 scripts/gpu_check.py --out DIR --only train [--train-site DIR03 --train-site DIR09]
Exit 0 when every check holds, 1 otherwise. Stdlib + nvidia-ml-py; torch only for the load.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from gpu_check_train import online_check, train_check  # scripts/ is sys.path[0]

ROOT = Path(__file__).resolve().parents[1]
PROBES = ROOT / "remote" / "probes"
DOUBLE = ROOT / "tests" / "doubles" / "pynvml.py"
LOAD = r"""
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
keep = torch.empty(int(20 * 2**30) // 2, device="cuda", dtype=torch.bfloat16)  # 20 GiB held
c = a @ b
torch.cuda.synchronize()
print("ready", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
print("load done", flush=True)
"""


def load_double():
    spec = importlib.util.spec_from_file_location("pynvml_double", DOUBLE)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fields_of(value) -> set[str]:
    if hasattr(value, "_fields_"):
        return {f[0] for f in value._fields_}
    if hasattr(value, "__dict__"):
        return {k for k in vars(value) if not k.startswith("_")}
    return set()


def api_check() -> dict:
    """Call each function the probes use on the real module and on the double; compare."""
    import pynvml as real

    used = sorted(set(re.findall(r"nvml[A-Z]\w+", (PROBES / "gpu_query.py").read_text()
                                 + (PROBES / "gpu_health.py").read_text())))
    # the functions (the words of a docstring, e.g. nvmlClocksEventReason*, are not)
    used = [n for n in used if n.startswith(("nvmlDevice", "nvmlSystem", "nvmlEventSet", "nvmlInit",
                                             "nvmlShutdown"))]
    double = load_double()
    real.nvmlInit()
    double.nvmlInit()
    rh, dh = real.nvmlDeviceGetHandleByIndex(0), double.nvmlDeviceGetHandleByIndex(0)
    args = {
        "nvmlDeviceGetTemperature": ("NVML_TEMPERATURE_GPU",),
        "nvmlDeviceGetClockInfo": ("NVML_CLOCK_SM",),
        "nvmlDeviceGetPcieThroughput": ("NVML_PCIE_UTIL_TX_BYTES",),
        "nvmlDeviceGetTotalEccErrors": ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
        "nvmlDeviceGetRetiredPages": ("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",),
        "nvmlDeviceGetNvLinkState": (0,),
        "nvmlDeviceGetNvLinkErrorCounter": (0, "NVML_NVLINK_ERROR_DL_REPLAY"),
        "nvmlDeviceGetFieldValues": ([("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 0)],),
    }
    # the event API is checked as a sequence (events_check); nvmlDeviceGetIndex takes a handle
    skip = {"nvmlDeviceRegisterEvents", "nvmlEventSetWait", "nvmlEventSetFree", "nvmlEventSetCreate"}
    rows, problems = [], []
    for name in used:
        row: dict = {"name": name, "real": hasattr(real, name), "double": hasattr(double, name)}
        if not (row["real"] and row["double"]):
            problems.append(f"{name}: real={row['real']} double={row['double']}")
            rows.append(row)
            continue
        if name in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
                    *skip) or not name.startswith(("nvmlDevice", "nvmlSystem")):
            rows.append(row)
            continue
        extra = args.get(name, ())
        if name.startswith("nvmlDevice"):
            rargs = (rh, *(_arg(real, c) for c in extra))
            dargs = (dh, *(_arg(double, c) for c in extra))
        else:
            rargs = dargs = ()
        try:
            rv = getattr(real, name)(*rargs)
            row["real_type"] = type(rv).__name__
            row["real_repr"] = repr(rv)[:200]
        except Exception as exc:  # a field this GPU does not support is an answer too
            rv = None
            row["real_error"] = f"{type(exc).__name__}: {exc}"
        try:
            dv = getattr(double, name)(*dargs)
            row["double_type"] = type(dv).__name__
        except Exception as exc:
            dv = None
            row["double_error"] = f"{type(exc).__name__}: {exc}"
        if not isinstance(rv, (list, int, float, str, bytes, tuple)) and hasattr(rv, "__len__") \
                and not hasattr(rv, "_fields_"):
            rv = list(rv)  # a ctypes array (nvmlDeviceGetFieldValues): its structs compared
        if isinstance(rv, tuple) and isinstance(dv, tuple) and len(rv) != len(dv):
            problems.append(f"{name}: real {len(rv)}-tuple vs double {len(dv)}-tuple")
        if isinstance(rv, list) and rv:
            rv = rv[0]
            dv = dv[0] if isinstance(dv, list) and dv else None
        want = fields_of(dv) if dv is not None else set()
        have = fields_of(rv) if rv is not None else set()
        missing = sorted(want - have) if rv is not None and want else []
        if missing:
            problems.append(f"{name}: the double has fields the real struct lacks: {missing}")
        if rv is not None and dv is not None and not want:
            kinds = (int, float, str, bytes)
            if isinstance(rv, kinds) != isinstance(dv, kinds):
                problems.append(f"{name}: real {type(rv).__name__} vs double {type(dv).__name__}")
        rows.append(row)
    real.nvmlShutdown()
    return {"functions": rows, "problems": problems}


def _arg(module, spec):
    """An argument of a call by the module's own constant names (so the double must have
    them): a name, an int, or a list of (name, int) field ids."""
    if isinstance(spec, str):
        return getattr(module, spec)
    if isinstance(spec, list):
        return [(getattr(module, n), scope) for n, scope in spec]
    return spec


def events_check() -> dict:
    """The Xid event sequence on the real module: create a set, register every GPU for
    nvmlEventTypeXidCriticalError, wait 0 ms (no event queued: NVMLError_Timeout at once), free.
    The double must answer the same way and raise the same error class."""
    import time

    import pynvml as real

    double = load_double()
    out: dict = {"problems": []}
    for label, mod in (("real", real), ("double", double)):
        mod.nvmlInit()
        try:
            es = mod.nvmlEventSetCreate()
            registered = []
            for i in range(mod.nvmlDeviceGetCount()):
                h = mod.nvmlDeviceGetHandleByIndex(i)
                try:
                    mod.nvmlDeviceRegisterEvents(h, mod.nvmlEventTypeXidCriticalError, es)
                    registered.append(i)
                except mod.NVMLError as exc:
                    out.setdefault(f"{label}_register_errors", []).append(f"gpu{i}: {type(exc).__name__}")
            t0 = time.perf_counter()
            try:
                data = mod.nvmlEventSetWait(es, 0)
                answer = f"event {data.eventType:#x} data {data.eventData}"
            except mod.NVMLError as exc:
                answer = f"{type(exc).__name__} ({exc.value})"
            out[label] = {"registered": registered, "wait0": answer,
                          "wait0_ms": round(1000 * (time.perf_counter() - t0), 3)}
            mod.nvmlEventSetFree(es)
        finally:
            mod.nvmlShutdown()
    if not out["real"]["wait0"].startswith(("NVMLError_Timeout", "event")):
        out["problems"].append(f"real nvmlEventSetWait(set, 0): {out['real']['wait0']}")
    if out["real"]["wait0_ms"] > 50:
        out["problems"].append(f"nvmlEventSetWait(set, 0) blocked {out['real']['wait0_ms']} ms")
    return out


def health_check() -> dict:
    """Each health field through the sampler's own reader on the real GPU, printed: present,
    or absent (the driver lacks it). No field may crash the read."""
    sys.path.insert(0, str(ROOT))
    import pynvml as real

    from remote.probes import sampler

    src = sampler.NvmlSource(real)
    try:
        first = src.read(now=0.0)
        import time

        time.sleep(1.1)
        gpus = src.read(now=1.1)  # NVLink rates need two reads
    finally:
        src.close()
    keys = ("clock_reasons", "clock_reasons_mask", "ecc_corrected_volatile", "ecc_uncorrected_volatile",
            "ecc_corrected_aggregate", "ecc_uncorrected_aggregate", "retired_pages_sbe",
            "retired_pages_dbe", "retired_pages_pending", "remapped_rows_corrected",
            "remapped_rows_uncorrected", "remapped_rows_pending", "remapped_rows_failure",
            "pcie_replay", "nvlink", "xid")
    table = [{k: g.get(k, "absent") for k in ("index", *keys)} for g in gpus]
    for row in table:
        print("health", json.dumps(row, default=str), flush=True)
    problems = []
    if len(first) != len(gpus):
        problems.append("the GPU count changed between two reads")
    return {"gpus": table, "problems": problems}


def run_probe(script: str, argv: list[str], hide_nvml: bool) -> tuple[str, float]:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as hide:
        if hide_nvml:
            Path(hide, "pynvml.py").write_text("raise ImportError('hidden by gpu_check')\n")
            env["PYTHONPATH"] = hide + os.pathsep + env.get("PYTHONPATH", "")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([sys.executable, str(PROBES / script), *argv], env=env,
                             capture_output=True, text=True, timeout=300)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        raise RuntimeError(f"{script} {argv} exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout, cpu


def env_check() -> dict:
    nvml_out, _ = run_probe("env_probe.py", [], hide_nvml=False)
    smi_out, _ = run_probe("env_probe.py", [], hide_nvml=True)
    gpu = {}
    for label, text in (("nvml", nvml_out), ("smi", smi_out)):
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            result = rec.get("result") if isinstance(rec, dict) else None
            found = result.get("gpu") if isinstance(result, dict) else None
            if isinstance(found, dict):
                gpu[label] = found
    problems = []
    a, b = gpu.get("nvml"), gpu.get("smi")
    if not a or a.get("source") != "nvml":
        problems.append(f"env probe through NVML: {a}")
    if not b or b.get("source") != "nvidia-smi":
        problems.append(f"env probe through nvidia-smi: {b}")
    if a and b and a.get("gpus") and b.get("gpus"):
        ga, gb = a["gpus"][0], b["gpus"][0]
        for key in sorted(set(ga) & set(gb) & {"name", "uuid", "pci_bus_id", "index", "mem_total", "driver_version"}):
            if ga[key] != gb[key] and not (key == "mem_total" and abs(ga[key] - gb[key]) < 2**21):
                problems.append(f"gpu field {key}: nvml {ga[key]!r} vs smi {gb[key]!r}")
    return {"nvml": a, "smi": b, "problems": problems, "raw_nvml": nvml_out[-4000:], "raw_smi": smi_out[-4000:]}


def sampler_check(source: str, count: int) -> dict:
    """count samples at 10 Hz; a torch load (20 GiB held, matmuls) runs through the first
    third of the window and then exits, so utilisation and memory must fall during it."""
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(count / 10 / 3)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert load.stdout is not None
    ready = load.stdout.readline().strip()
    if ready != "ready":
        err = load.stderr.read()[-1000:] if load.stderr else ""
        raise RuntimeError(f"the torch load did not start: {ready!r} {err}")
    hide = source == "nvidia-smi"
    out, cpu = run_probe("sampler.py", ["--interval", "0.1", "--count", str(count), "--source", source], hide)
    load.wait(timeout=120)
    samples = []
    for line in out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("type") == "sample" and rec.get("gpus"):
            g = rec["gpus"][0]
            samples.append({"t": rec.get("t") or rec.get("ts"), "util": g.get("util"), "mem_used": g.get("mem_used"),
                            "power": g.get("power"), "sm_clock": g.get("sm_clock")})
    utils = [s["util"] for s in samples if isinstance(s["util"], int)]
    mems = [s["mem_used"] for s in samples if isinstance(s["mem_used"], int)]
    problems = []
    if len(samples) < count * 0.9:
        problems.append(f"{source}: {len(samples)} samples of {count}")
    if not utils or max(utils) < 50:
        problems.append(f"{source}: utilisation never rose under the matmul load: {utils[:60]}")
    if not mems or max(mems) - min(mems) < 10 * 2**30:
        problems.append(f"{source}: memory did not rise by the 20 GiB the load holds")
    return {"source": source, "samples": len(samples), "cpu_s": round(cpu, 3),
            "cpu_ms_per_sample": round(1000 * cpu / max(1, len(samples)), 2),
            "util_max": max(utils) if utils else None, "mem_span": (max(mems) - min(mems)) if mems else None,
            "series": samples, "problems": problems, "raw_head": out[:3000]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--count", type=int, default=60, help="samples per source at 10 Hz")
    ap.add_argument("--online-python", default=sys.executable,
                    help="a python with vLLM >= 0.18 (CUDA) and speculators 0.9, for the online "
                    "training check (default: this one)")
    ap.add_argument("--only", default="all",
                    choices=["all", "nvml", "train", "online"],  # not a stage: the checks' names
                    help="the NVML readers (1-4), the train stage's CUDA path (5), online "
                    "training (6), or all")
    ap.add_argument("--train-site", type=Path, action="append", default=[],
                    help="a directory holding one speculators release (repeatable)")
    ap.add_argument("--train-device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: the train check's machinery without a GPU")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {}
    import shutil

    nvml = args.only in ("all", "nvml")
    if (nvml or args.train_device == "cuda") and shutil.which("nvidia-smi") is None:
        print("gpu_check: nvidia-smi not found: run this on a box with an NVIDIA GPU", file=sys.stderr)
        return 2
    checks: list = []
    if nvml:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=index,name,uuid,pci.bus_id,driver_version,"
                              "utilization.gpu,memory.used,memory.total,power.draw,power.limit,"
                              "temperature.gpu,clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True)
        report["smi_raw"] = smi.stdout
        checks += [("api", api_check), ("events", events_check), ("health", health_check),
                   ("env", env_check),
                   ("sampler_nvml", lambda: sampler_check("nvml", args.count)),
                   ("sampler_smi", lambda: sampler_check("nvidia-smi", args.count))]
    if args.only in ("all", "train"):  # not a stage: the check's name (--only)
        work = Path(tempfile.mkdtemp(prefix="gpu-check-train-"))
        for i, site in enumerate(args.train_site or [None]):
            checks.append((f"train_{i}", lambda site=site: train_check(site, args.train_device, work)))
    if args.only in ("all", "online"):
        checks.append(("online", lambda: online_check(args.online_python)))
    for name, fn in checks:
        try:
            report[name] = fn()
        except Exception as exc:
            report[name] = {"problems": [f"{name} failed: {type(exc).__name__}: {exc}"]}
        print(name, "problems:", report[name].get("problems"), flush=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    for key in ("sampler_nvml", "sampler_smi"):
        r = report.get(key)
        if r:
            print(key, {k: r.get(k) for k in ("samples", "cpu_s", "cpu_ms_per_sample", "util_max", "mem_span")})
    for key, r in report.items():
        if key.startswith("train_"):
            print(key, {k: r.get(k) for k in ("site", "version", "device", "nproc", "returncode")},
                  (r.get("result") or {}).get("ranks"))
    bad = [p for r in report.values() if isinstance(r, dict) for p in r.get("problems", [])]
    print("gpu_check:", "ok" if not bad else f"{len(bad)} problem(s)")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
