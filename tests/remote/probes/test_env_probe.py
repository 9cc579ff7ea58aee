"""The env probe: parsers on nvidia-smi's documented output formats, and the real no-GPU path.

This machine has no NVIDIA GPU (docs/design.md §4: NVML library absent, no nvidia-smi), so the
no-GPU path runs for real. The nvidia-smi fallback is exercised end to end with a test double
on PATH that prints the documented `--query-gpu` CSV and `topo -m` matrix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote.probes import env_probe, gpu_query

PROBE = Path(env_probe.__file__)

# `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits` (MiB, %, W, C).
SMI_CSV_H200 = (
    "0, NVIDIA H200, GPU-5f0c1a2b-0000-1111-2222-333344445555, 00000000:19:00.0, 143771, 1, 0, 75.12, 700.00, "
    "32, 550.54.15\n"
    "1, NVIDIA H200, GPU-6a1d2b3c-0000-1111-2222-333344445555, 00000000:3B:00.0, 143771, 120533, 97, 612.40, "
    "700.00, 61, 550.54.15\n"
)
SMI_CSV_NA = "0, Tesla T4, GPU-0000, 00000000:00:04.0, 15360, 0, [N/A], [Not Supported], [N/A], 40, 535.104.05\n"

# `nvidia-smi topo -m` on an 8-GPU NVSwitch node (tab-separated matrix, then the legend).
TOPO_NVLINK = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    + "".join(
        f"GPU{i}\t" + "\t".join(" X " if j == i else "NV18" for j in range(8))
        + f"\tPXB\t{'0-55,112-167' if i < 4 else '56-111,168-223'}\t{0 if i < 4 else 1}\t\tN/A\n"
        for i in range(8)
    )
    + "NIC0\t" + "\t".join("PXB" for _ in range(8)) + "\t X \n"
    + "\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
)
TOPO_PCIE = (
    "\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\x1b[0m\n".replace("\x1b[4mGPU0", "\t\x1b[4mGPU0")
    + "GPU0\t X \tPHB\tSYS\tSYS\t0-15\t0\n"
    "GPU1\tPHB\t X \tSYS\tSYS\t0-15\t0\n"
    "GPU2\tSYS\tSYS\t X \tPHB\t16-31\t1\n"
    "GPU3\tSYS\tSYS\tPHB\t X \t16-31\t1\n"
    "\nLegend:\n\n  X    = Self\n  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge\n"
)


def test_parse_smi_csv_in_event_units() -> None:
    gpus = gpu_query.parse_gpus(SMI_CSV_H200, env_probe.SMI_FIELDS)
    assert [g["index"] for g in gpus] == [0, 1]
    g1 = gpus[1]
    assert g1["name"] == "NVIDIA H200"
    assert g1["mem_total"] == 143771 * 1024 * 1024
    assert g1["mem_used"] == 120533 * 1024 * 1024
    assert (g1["util"], g1["power"], g1["power_limit"], g1["temp"]) == (97, 612.40, 700.0, 61)
    assert g1["pci_bus_id"] == "00000000:3B:00.0"


def test_parse_smi_csv_not_available_fields_become_none() -> None:
    (g,) = gpu_query.parse_gpus(SMI_CSV_NA, env_probe.SMI_FIELDS)
    assert g["util"] is None and g["power"] is None and g["power_limit"] is None
    assert g["temp"] == 40


def test_parse_smi_csv_rejects_a_row_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match="fields"):
        gpu_query.parse_gpus("0, NVIDIA H200, 143771\n", env_probe.SMI_FIELDS)


def test_parse_topo_nvswitch_node_is_nvlink() -> None:
    topo = env_probe.parse_topo(TOPO_NVLINK)
    assert topo["gpus"] == [f"GPU{i}" for i in range(8)]
    assert len(topo["links"]) == 28
    assert topo["link_kinds"] == ["NV18"]
    assert topo["interconnect"] == "NVLink"
    assert topo["cpu_affinity"]["GPU5"] == "56-111,168-223"


def test_parse_topo_pcie_box_with_tty_escapes() -> None:
    topo = env_probe.parse_topo(TOPO_PCIE)
    assert topo["interconnect"] == "PCIe"
    assert topo["links"]["GPU0-GPU1"] == "PHB" and topo["links"]["GPU1-GPU2"] == "SYS"
    assert topo["link_kinds"] == ["PHB", "SYS"]


def test_parse_topo_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        env_probe.parse_topo("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


def _run_probe(tmp_path: Path, path_dirs: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    env["PATH"] = os.pathsep.join(path_dirs)
    proc = subprocess.run([sys.executable, str(PROBE), "--workdir", str(tmp_path / "wd")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    msg = json.loads(line)
    assert (msg["kind"], msg["probe"]) == ("result", "env")
    return msg["result"]


def test_no_gpu_path_for_real(tmp_path: Path) -> None:
    res = _run_probe(tmp_path, ["/usr/bin", "/bin"])
    gpu = res["gpu"]
    assert gpu["source"] == "none" and gpu["count"] == 0 and gpu["gpus"] == []
    assert gpu["reason"].startswith("no NVIDIA GPU: ")
    assert "nvidia-smi not found" in gpu["reason"]
    # Versions come from this interpreter's installed metadata (the project venv).
    import importlib.metadata as md

    assert res["packages"]["transformers"] == md.version("transformers")
    assert res["packages"]["vllm"] is None
    assert res["torch"]["version"] == md.version("torch")
    assert res["torch"]["version_py"] == md.version("torch")  # read as text from torch/version.py
    assert res["python"]["executable"] == sys.executable
    host = res["host"]
    assert host["cpus"] == os.cpu_count() and host["mem_total"] > 0
    assert host["workdir"]["exists"] is False and host["workdir"]["free"] > 0


def test_probe_never_imports_the_heavy_packages() -> None:
    script = (
        "import runpy, sys\n"
        f"probe = runpy.run_path({str(PROBE)!r})\n"
        "probe['collect']('.')\n"
        "print(sorted(m for m in ('torch', 'vllm', 'transformers', 'datasets') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_nvidia_smi_fallback_end_to_end(tmp_path: Path) -> None:
    """Test double: an `nvidia-smi` script that prints the documented formats above."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "csv.txt").write_text(SMI_CSV_H200)
    (bindir / "topo.txt").write_text(TOPO_NVLINK)
    smi = bindir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = topo ]; then cat {bindir}/topo.txt; else cat {bindir}/csv.txt; fi\n'
    )
    smi.chmod(0o755)
    res = _run_probe(tmp_path, [str(bindir), "/usr/bin", "/bin"])
    gpu = res["gpu"]
    assert gpu["source"] == "nvidia-smi" and gpu["count"] == 2
    assert "nvidia-ml-py" in gpu["fallback_reasons"][0] or "NVML" in gpu["fallback_reasons"][0]
    assert gpu["topology"]["interconnect"] == "NVLink"


FAKE_PYNVML = '''
"""Test double for nvidia-ml-py: the calls env_probe makes, answering like one H200 would."""
NVML_TEMPERATURE_GPU = 0
class _M: total = 150754820096; used = 1048576
class _U: gpu = 7
class _P: busId = b"00000000:19:00.0"
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlSystemGetDriverVersion(): return b"550.54.15"
def nvmlSystemGetCudaDriverVersion(): return 12040
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(i): return ("h", i)
def nvmlDeviceGetName(h): return b"NVIDIA H200"
def nvmlDeviceGetUUID(h): return "GPU-1234"
def nvmlDeviceGetPciInfo(h): return _P()
def nvmlDeviceGetMemoryInfo(h): return _M()
def nvmlDeviceGetUtilizationRates(h): return _U()
def nvmlDeviceGetPowerUsage(h): return 75120
def nvmlDeviceGetEnforcedPowerLimit(h): raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
def nvmlDeviceGetTemperature(h, sensor): return 32
'''


def test_nvml_path_with_a_test_double(tmp_path: Path) -> None:
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "pynvml.py").write_text(FAKE_PYNVML)
    env = dict(os.environ, PYTHONPATH=str(libdir), PATH="/usr/bin:/bin")
    proc = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    gpu = json.loads(proc.stdout)["result"]["gpu"]
    assert gpu["source"] == "nvml" and gpu["cuda_driver_version"] == 12040
    (g,) = gpu["gpus"]
    assert g["name"] == "NVIDIA H200" and g["pci_bus_id"] == "00000000:19:00.0" and g["driver_version"] == "550.54.15"
    assert g["power"] == pytest.approx(75.12) and g["power_limit"] is None  # unsupported query -> None
    assert g["mem_total"] == 150754820096 and g["util"] == 7 and g["temp"] == 32
    assert gpu["topology"]["error"].startswith("nvidia-smi not found")
