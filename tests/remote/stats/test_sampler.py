"""The box-side sampler: parsing of documented formats, and real runs of the script."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from remote.probes import gpu_query, host_stats
from remote.probes import sampler as sampler_mod
from remote.stats.stream import SAMPLER
from tests.health_scenario import DOUBLES, pynvml_double


def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = 30) -> list[dict]:
    done = subprocess.run([sys.executable, str(SAMPLER), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_sampler_is_python38_syntax_and_stdlib_only() -> None:
    tree = ast.parse(SAMPLER.read_text(), feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    allowed_third_party = {"pynvml"}  # optional, imported inside a try
    allowed_third_party |= {"gpu_query", "host_stats"}  # uploaded beside it (probe_modules)
    assert not {m for m in imported - allowed_third_party if m not in sys.stdlib_module_names}
    assert not imported & {"console", "remote", "psutil"}


def test_proc_stat_and_meminfo_parsing() -> None:
    # proc(5): cpu user nice system idle iowait irq softirq steal guest guest_nice
    before = host_stats.parse_proc_stat_cpu("cpu  100 0 50 800 50 0 0 0 30 0")
    after = host_stats.parse_proc_stat_cpu("cpu  160 0 70 860 60 0 0 0 90 0")
    assert before == (150, 1000)  # guest is inside user: not added again
    assert host_stats.cpu_percent(before, after) == pytest.approx(100 * 80 / 150, abs=0.1)
    with pytest.raises(ValueError):
        host_stats.parse_proc_stat_cpu("cpu0 1 2 3 4")
    meminfo = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    6000000 kB\n"
    total, used = host_stats.parse_meminfo(meminfo)
    assert (total, used) == (16000000 * 1024, 10000000 * 1024)


SMI_GPUS = textwrap.dedent("""\
    0, NVIDIA H200, GPU-aaaa, 87, 72704, 143771, 312.45, 700.00, 64, 1980
    1, NVIDIA A10G, GPU-bbbb, [N/A], 1024, 23028, [Not Supported], [N/A], 41, 345
    2, Tesla, Inc. Board, GPU-cccc, 0, 0, 16384, 70.10, 250.00, 30, 1200
""")
SMI_APPS = "GPU-aaaa, 4242, /usr/bin/python3, 70000\nGPU-aaaa, 4243, vllm, [N/A]\n"


def test_nvidia_smi_csv_parsing() -> None:
    gpus = sampler_mod.parse_smi_gpus(SMI_GPUS)
    assert [g["index"] for g in gpus] == [0, 1, 2]
    g0, g1, g2 = gpus
    assert g0["name"] == "NVIDIA H200" and g0["uuid"] == "GPU-aaaa"
    assert g0["util"] == 87 and g0["mem_used"] == 72704 * 2**20 and g0["mem_total"] == 143771 * 2**20
    assert g0["power"] == pytest.approx(312.45) and g0["power_limit"] == 700
    assert g0["temp"] == 64 and g0["sm_clock"] == 1980 and g0["pcie_tx"] is None
    assert g1["util"] is None and g1["power"] is None and g1["power_limit"] is None
    assert g2["name"] == "Tesla, Inc. Board" and g2["mem_total"] == 16384 * 2**20
    apps = gpu_query.parse_apps(SMI_APPS)
    assert apps["GPU-aaaa"] == [
        {"pid": 4242, "name": "/usr/bin/python3", "mem_used": 70000 * 2**20},
        {"pid": 4243, "name": "vllm", "mem_used": None},
    ]
    with pytest.raises(ValueError):
        sampler_mod.parse_smi_gpus("0, NVIDIA H200, 87\n")


def test_nvml_source_with_test_double() -> None:
    nvml = pynvml_double()
    src = sampler_mod.NvmlSource(nvml)
    gpus = src.read(now=100.0)
    g0, g1 = gpus
    assert g0["name"] == "NVIDIA H200" and g0["util"] == 87.0
    assert g0["mem_used"] == 71 * 2**30 and g0["mem_total"] == 141 * 2**30
    assert g0["power"] == pytest.approx(312.5) and g0["power_limit"] == pytest.approx(700.0)
    assert g0["temp"] == 64 and g0["sm_clock"] == 1980
    assert g0["pcie_tx"] == 1200 * 1024 and g0["pcie_rx"] == 800 * 1024  # KB/s -> B/s
    assert g0["procs"][0]["pid"] == 4242 and g0["procs"][0]["mem_used"] == 70 * 2**30
    assert g1["pcie_tx"] is None and g1["procs"] == []  # NVMLError_NotSupported -> null
    # PCIe throughput blocks 20 ms per call in NVML: not re-read within PCIE_REFRESH_S.
    pcie_calls = nvml.CALLS.count("nvmlDeviceGetPcieThroughput")
    src.read(now=100.0 + sampler_mod.PCIE_REFRESH_S / 2)
    assert nvml.CALLS.count("nvmlDeviceGetPcieThroughput") == pcie_calls
    src.read(now=100.0 + sampler_mod.PCIE_REFRESH_S * 1.5)
    assert nvml.CALLS.count("nvmlDeviceGetPcieThroughput") == pcie_calls + 4
    src.close()
    assert nvml.CALLS[-1] == "nvmlShutdown"


def test_nvml_init_failure_falls_through_with_reason(tmp_path: Path, monkeypatch) -> None:
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"devices": [], "init_error": "library_not_found"}))
    monkeypatch.setenv("PYNVML_DOUBLE_STATE", str(state))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    src, reason = sampler_mod.open_gpu_source("auto", nvml_module=pynvml_double())
    assert src is None
    assert reason is not None
    assert "NVMLError_LibraryNotFound" in reason and "nvidia-smi not found" in reason


def test_no_gpu_path_for_real() -> None:
    """This machine has neither pynvml nor nvidia-smi (docs/design.md §4)."""
    lines = _run(["--interval", "0.1", "--count", "2"])
    start, *samples = lines
    assert start["type"] == "start" and start["source"] == "none"
    assert "pynvml" in start["reason"] and "nvidia-smi" in start["reason"]
    assert [s["seq"] for s in samples] == [0, 1]
    mem_total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    for s in samples:
        assert s["gpus"] == [] and "reason" not in s  # said once, in the start line
        assert 0 <= s["host"]["cpu"] <= 100
        assert s["host"]["mem_total"] == mem_total
        assert 0 < s["host"]["mem_used"] < mem_total
        assert s["host"]["load1"] >= 0


def test_nvml_path_in_a_real_run(tmp_path: Path) -> None:
    lines = _run(["--interval", "0.1", "--count", "1"], env={"PYTHONPATH": str(DOUBLES)})
    assert lines[0]["source"] == "nvml" and lines[0]["gpus"] == ["NVIDIA H200", "NVIDIA H200"]
    (g0, g1) = lines[1]["gpus"]
    assert g0["power"] == pytest.approx(312.5) and g1["sm_clock"] == 345


def test_nvidia_smi_path_in_a_real_run(tmp_path: Path) -> None:
    """A test double `nvidia-smi` on PATH printing its documented CSV; in loop mode (-lms) it
    repeats rows with a different utilisation, as the real one re-samples."""
    log = tmp_path / "calls.log"
    looped = SMI_GPUS.replace(", 87, ", ", 99, ")
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'case "$1" in\n'
        '  --query-gpu=*) if [ "$3" = "-lms" ]; then\n'
        f"      while true; do printf '%s' '{looped}' || exit 0; sleep 0.1; done\n"
        f"    else printf '%s' '{SMI_GPUS}'; fi ;;\n"
        f"  --query-compute-apps=*) printf '%s' '{SMI_APPS}' ;;\n"
        "  *) echo bad args >&2; exit 2 ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    path = f"{tmp_path}:{os.environ.get('PATH', '')}"
    lines = _run(["--interval", "0.1", "--count", "5"], env={"PATH": path})
    start, *samples = lines
    assert start["source"] == "nvidia-smi" and "pynvml not importable" in start["reason"]
    g0 = samples[0]["gpus"][0]
    assert g0["mem_used"] == 72704 * 2**20 and "uuid" not in g0
    assert [p["pid"] for p in g0["procs"]] == [4242, 4243]
    assert samples[0]["gpus"][1]["procs"] == []
    assert samples[-1]["gpus"][0]["util"] == 99  # from the long-lived loop
    calls = log.read_text().splitlines()
    # One query to learn the GPUs, one long-lived loop, one process list: not one per sample.
    assert sum(c.startswith("--query-gpu") and "-lms 100" not in c for c in calls) == 1
    assert sum("-lms 100" in c for c in calls) == 1
    assert sum(c.startswith("--query-compute-apps") for c in calls) == 1


def test_watch_stdin_exits_when_the_listener_goes() -> None:
    proc = subprocess.Popen([sys.executable, str(SAMPLER), "--interval", "0.1", "--watch-stdin"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    assert json.loads(proc.stdout.readline())["type"] == "start"
    assert json.loads(proc.stdout.readline())["type"] == "sample"
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
    proc.stdout.close()


def test_interval_below_minimum_is_refused() -> None:
    done = subprocess.run([sys.executable, str(SAMPLER), "--interval", "0.05"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "at least 0.1" in done.stderr
