"""One NVML reader and one nvidia-smi CSV parser for the probes (remote/probes/gpu_query.py).

The env probe and the sampler used to read GPUs each their own way and disagreed on a GPU name
with a comma in it. Here both run as they do on a box: uploaded by the console's own code (the
probe runner, the stats stream) into a workdir, with the shared module beside them, and run from
there with this machine's python, against a test double `nvidia-smi` on PATH that prints the
real `--format=csv,noheader,nounits` rows (", " between cells, no quoting), or the pynvml test
double (tests/doubles/pynvml.py).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote.link.hosts import HostConfig
from remote.link.transport import LocalTransport
from remote.link.upload import probe_modules
from remote.probe_runner import PROBES_DIR, run_probe
from remote.probes import env_probe, gpu_query, sampler
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from remote.stats.stream import StatsStream

DOUBLES = Path(__file__).parents[2] / "doubles"
COMMA_NAME = "NVIDIA GH200 480GB, Grace Hopper"
# What each GPU of the test double answers per --query-gpu field (nvidia-smi's own spelling).
GPUS = [
    {"index": "0", "name": "NVIDIA H200", "uuid": "GPU-aaaa", "pci.bus_id": "00000000:19:00.0",
     "driver_version": "550.54.15", "utilization.gpu": "87", "memory.used": "72704",
     "memory.total": "143771", "power.draw": "312.45", "power.limit": "700.00",
     "temperature.gpu": "64", "clocks.sm": "1980"},
    {"index": "1", "name": COMMA_NAME, "uuid": "GPU-bbbb", "pci.bus_id": "00000009:01:00.0",
     "driver_version": "550.54.15", "utilization.gpu": "[N/A]", "memory.used": "1024",
     "memory.total": "97871", "power.draw": "[Not Supported]", "power.limit": "900.00",
     "temperature.gpu": "41", "clocks.sm": "345"},
]
APPS = [("GPU-aaaa", "4242", "/usr/bin/python3", "70000"),
        ("GPU-bbbb", "4243", "vllm serve, worker 1", "[N/A]")]
TOPO = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-71\nGPU1\tNV18\t X \t0-71\n\nLegend:\n"

FAKE_SMI = f'''#!{sys.executable}
"""Test double for nvidia-smi: the query modes the probes use, in nvidia-smi's output format."""
import json, sys, time
GPUS = json.loads({json.dumps(json.dumps(GPUS))})
APPS = json.loads({json.dumps(json.dumps(APPS))})
args = sys.argv[1:]
with open(__file__ + ".calls", "a") as fh:
    fh.write(" ".join(args) + "\\n")
if args[:2] == ["topo", "-m"]:
    sys.stdout.write({TOPO!r})
    sys.exit(0)
if "--format=csv,noheader,nounits" not in args:
    sys.stderr.write("unsupported by this double: %s\\n" % args)
    sys.exit(2)
query = [a for a in args if a.startswith("--query-")][0]
mode, fields = query[len("--query-"):].split("=", 1)
if mode == "compute-apps":
    rows = [", ".join(app) for app in APPS]
else:
    for f in fields.split(","):
        if f not in GPUS[0]:
            print('Field "%s" is not a valid field to query.' % f)
            sys.exit(2)
    rows = [", ".join(g[f] for f in fields.split(",")) for g in GPUS]
text = "".join(r + "\\n" for r in rows)
if "-lms" in args:
    while True:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            sys.exit(0)
        time.sleep(int(args[args.index("-lms") + 1]) / 1000.0)
sys.stdout.write(text)
'''


@pytest.fixture()
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return smi


def _host(tmp_path: Path) -> HostConfig:
    return HostConfig(name="local", ssh=None, python=sys.executable, workdir=str(tmp_path / "box"))


def _smi(fields: tuple[str, ...], smi: Path) -> str:
    return subprocess.run([str(smi), "--query-gpu=" + ",".join(fields),
                           "--format=csv,noheader,nounits"], capture_output=True, text=True,
                          check=True).stdout


def test_the_probes_share_the_module_and_it_is_python38_stdlib_only() -> None:
    for probe in ("env_probe.py", "sampler.py"):
        assert "gpu_query.py" in [p.name for p in probe_modules(PROBES_DIR / probe)]
    assert "gpu_query.py" not in [p.name for p in probe_modules(PROBES_DIR / "model_probe.py")]
    source = (PROBES_DIR / "gpu_query.py").read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names)


def test_split_row_keeps_the_comma_in_the_free_text_field() -> None:
    fields = ("index", "name", "uuid")
    assert gpu_query.split_row("1, Tesla, Inc. Board,x, GPU-b", fields, "name") == [
        "1", "Tesla, Inc. Board,x", "GPU-b"]
    with pytest.raises(ValueError, match="fields"):
        gpu_query.split_row("1, GPU-b", fields, "name")
    with pytest.raises(ValueError, match="fields"):  # no free-text field to take the extra cells
        gpu_query.split_row("1, 2, 3, 4", ("index", "uuid", "util"), "name")


def test_both_probes_read_the_same_rows_alike(fake_smi: Path) -> None:
    from_env = gpu_query.parse_gpus(_smi(env_probe.SMI_FIELDS, fake_smi), env_probe.SMI_FIELDS)
    from_sampler = sampler.parse_smi_gpus(_smi(sampler.SMI_FIELDS, fake_smi))
    assert [g["name"] for g in from_env] == [g["name"] for g in from_sampler] == [
        "NVIDIA H200", COMMA_NAME]
    for a, b in zip(from_env, from_sampler, strict=True):
        shared = set(a) & set(b)
        assert shared >= {"index", "name", "uuid", "util", "mem_used", "mem_total", "power",
                          "power_limit", "temp"}
        assert {k: a[k] for k in shared} == {k: b[k] for k in shared}
    g1 = from_env[1]
    assert g1["util"] is None and g1["power"] is None and g1["power_limit"] == 900.0
    assert g1["mem_total"] == 97871 * 2**20 and g1["pci_bus_id"] == "00000009:01:00.0"


async def test_env_probe_uploaded_with_its_module_reads_the_comma_name(
        fake_smi: Path, tmp_path: Path) -> None:
    bus = EventBus()
    events: list[Event] = []
    bus.add_callback(events.append)
    host = _host(tmp_path)
    async with LocalTransport() as t:
        (res,) = await run_probe(t, "env", ["--workdir", host.workdir], workdir=host.workdir,
                                 python=host.python, bus=bus, host=host.name, timeout=120)
        again = await run_probe(t, "env", ["--workdir", host.workdir], workdir=host.workdir,
                                python=host.python, bus=bus, host=host.name, timeout=120)
    box = tmp_path / "box" / "probes"
    sent = ["container_id.py", "env_probe.py", "find_package.py", "gpu_query.py"]
    assert sorted(p.name for p in box.iterdir()) == sent
    assert (box / "gpu_query.py").read_bytes() == (PROBES_DIR / "gpu_query.py").read_bytes()
    uploaded = [e.payload["path"] for e in events if e.kind == ev.UPLOAD_PROGRESS]
    assert sorted(Path(p).name for p in uploaded) == sent  # once each
    gpu = res["gpu"]
    assert gpu["source"] == "nvidia-smi" and gpu["count"] == 2
    assert [g["name"] for g in gpu["gpus"]] == ["NVIDIA H200", COMMA_NAME]
    assert gpu["gpus"][1]["mem_used"] == 1024 * 2**20 and gpu["gpus"][1]["temp"] == 41
    assert gpu["topology"]["interconnect"] == "NVLink"
    assert again[0]["gpu"] == gpu


async def test_sampler_uploaded_with_its_module_streams_the_comma_name(
        fake_smi: Path, tmp_path: Path) -> None:
    bus = EventBus()
    samples: list[Event] = []
    bus.add_callback(lambda e: samples.append(e) if e.kind == ev.STATS_SAMPLE else None)
    async with LocalTransport() as t:
        stream = StatsStream(t, _host(tmp_path), bus, interval=0.1, source="nvidia-smi")
        assert await stream.run(count=3) == 3
    assert (tmp_path / "box" / "probes" / "gpu_query.py").is_file()
    first = samples[0].payload
    assert first["source"] == "nvidia-smi"
    g0, g1 = first["gpus"]
    assert (g0["name"], g1["name"]) == ("NVIDIA H200", COMMA_NAME)
    assert g0["util"] == 87 and g0["sm_clock"] == 1980 and g1["util"] is None
    assert [p["name"] for p in g1["procs"]] == ["vllm serve, worker 1"]
    assert g1["procs"][0]["mem_used"] is None and g0["procs"][0]["mem_used"] == 70000 * 2**20


def test_one_nvml_reader_for_both_probes(tmp_path: Path) -> None:
    """The pynvml test double on PYTHONPATH; each probe run from a directory holding only what
    the upload puts there (the script and its shared module)."""
    box = tmp_path / "probes"
    box.mkdir()
    for script in (PROBES_DIR / "env_probe.py", PROBES_DIR / "sampler.py"):
        for path in [script, *probe_modules(script)]:
            (box / path.name).write_bytes(path.read_bytes())
    env = {**os.environ, "PYTHONPATH": str(DOUBLES), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, str(box / "env_probe.py"), "--workdir", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    gpu = json.loads(out)["result"]["gpu"]
    assert gpu["source"] == "nvml" and gpu["cuda_driver_version"] == 12040
    out = subprocess.run([sys.executable, str(box / "sampler.py"), "--interval", "0.1",
                          "--count", "1"], capture_output=True, text=True, env=env, timeout=60,
                         check=True).stdout
    start, sample = (json.loads(line) for line in out.splitlines())
    assert start["source"] == "nvml" and start["gpus"] == [g["name"] for g in gpu["gpus"]]
    for probed, sampled in zip(gpu["gpus"], sample["gpus"], strict=True):
        for key in ("mem_used", "mem_total", "util", "power", "power_limit", "temp", "sm_clock"):
            assert probed[key] == sampled[key], key
    g0 = gpu["gpus"][0]
    assert g0["uuid"] == "GPU-5f0c1a2b-0000-1111-2222-333344445555"
    assert g0["pci_bus_id"] == "00000000:19:00.0" and g0["driver_version"] == "550.54.15"
    assert g0["power"] == pytest.approx(312.5) and g0["mem_total"] == 141 * 2**30
    assert sample["gpus"][1]["pcie_tx"] is None  # NVMLError_NotSupported in the double
