"""`console stats --prometheus PORT` (issue 53): the live samples of every connected box as
Prometheus text, scraped while the stream runs and parsed by prometheus_client's own text
parser; dcgm-exporter's names, a host label per box, a GPU label per GPU, and a field the
double's driver lacks absent (no sample), never 0."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from remote.spine.bus import EventBus
from remote.spine.events import Event
from remote.stats.exporter import PrometheusEndpoint
from tests.health_scenario import Box
from tests.local_box import local_console_toml
from tests.remote.stats.test_alerts import ROOT, _Lines


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def test_a_scrape_returns_every_gpu_of_every_box_with_its_host(tmp_path: Path) -> None:
    box = Box(tmp_path / "nvml.json")
    box.state["devices"][0]["xids"] = [{"id": 1, "xid": 63}]
    box.write()
    cfg = tmp_path / "console.toml"
    cfg.write_text("".join(f'[hosts.{n}]\nworkdir = "{tmp_path / n}"\npython = "{sys.executable}"\n'
                           for n in ("boxa", "boxb")))
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", "stats", "--host", "boxa,boxb", "--interval", "0.1",
         "--prometheus", "0", "--config", str(cfg), "--no-record"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        env={**os.environ, **box.env()})
    out = _Lines(proc)
    try:
        out.until(lambda ls: any("Prometheus metrics at http://127.0.0.1:" in x for x in ls))
        url = next(x for x in out.lines if "Prometheus metrics at" in x).split(" at ", 1)[1].strip()
        seen: dict[str, list[tuple[dict[str, str], float]]] = {}
        end = time.monotonic() + 60
        while time.monotonic() < end:
            seen = _scrape(url)
            hosts = {labels["Hostname"] for labels, _ in seen.get("DCGM_FI_DEV_GPU_UTIL", [])}
            if hosts == {"boxa", "boxb"}:
                break
            time.sleep(0.2)
        first = {labels["Hostname"]: v for labels, v in seen["eagle3_stats_samples"]}
        time.sleep(0.5)
        again = _scrape(url)
    finally:
        proc.terminate()
        proc.wait(30)
    util = {(lb["Hostname"], lb["gpu"]): v for lb, v in seen["DCGM_FI_DEV_GPU_UTIL"]}
    assert util == {("boxa", "0"): 87.0, ("boxa", "1"): 12.0, ("boxb", "0"): 87.0, ("boxb", "1"): 12.0}
    assert {lb["modelName"] for lb, _ in seen["DCGM_FI_DEV_GPU_UTIL"]} == {"NVIDIA H200"}
    fb = {(lb["Hostname"], lb["gpu"]): v for lb, v in seen["DCGM_FI_DEV_FB_USED"]}
    assert fb[("boxa", "0")] == 71 * 1024  # MiB, as dcgm-exporter
    for name in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"):
        assert len(seen[name]) == 4, name
    # GPU 1's "driver" lacks ECC, PCIe replays, NVLink and Xid events: no sample, not a 0
    for name in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_XID_ERRORS",
                 "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"):
        assert sorted((lb["Hostname"], lb["gpu"]) for lb, _ in seen[name]) == [("boxa", "0"), ("boxb", "0")], name
    assert {v for _, v in seen["DCGM_FI_DEV_XID_ERRORS"]} == {63.0}  # the last Xid seen
    assert {v for _, v in seen["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]} == {3.0}
    # the stream goes on under the scrapes
    later = {labels["Hostname"]: v for labels, v in again["eagle3_stats_samples"]}
    assert all(later[h] > first[h] for h in ("boxa", "boxb"))


def test_old_samples_and_alerts_on_the_bus_read_too() -> None:
    """The exporter reads the bus: a sample of an earlier release (no health fields) gives its
    load metrics only; an alert counts under its rule."""
    bus = EventBus()
    endpoint = PrometheusEndpoint(bus, 0)
    try:
        bus.publish(Event("stats.sample", "old", {"source": "nvml", "host": {"cpu": 5.0},
                                                  "gpus": [{"index": 0, "name": "A100", "util": 40}]}))
        bus.emit("stats.alert", "old", rule="xid", message="GPU 0: Xid 79")
        seen = _scrape(endpoint.url)
    finally:
        endpoint.close()
    assert seen["DCGM_FI_DEV_GPU_UTIL"] == [({"gpu": "0", "modelName": "A100", "Hostname": "old"}, 40.0)]
    assert seen["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == [] and seen["DCGM_FI_DEV_XID_ERRORS"] == []
    assert seen["eagle3_alerts"] == [({"Hostname": "old", "rule": "xid"}, 1.0)]
    assert seen["eagle3_host_cpu_percent"] == [({"Hostname": "old"}, 5.0)]


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    bus = EventBus()
    taken = PrometheusEndpoint(bus, 0)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "console", "stats", "--host", "local", "--prometheus", str(taken.port),
             "--no-record", "--config", str(local_console_toml(tmp_path))],
            capture_output=True, text=True, cwd=ROOT, timeout=60)
    finally:
        taken.close()
    assert done.returncode == 2
    assert f"--prometheus {taken.port}: cannot listen on 127.0.0.1:{taken.port}" in done.stderr + done.stdout
