"""The GPU's health in the sampler (issue 53): NVML through its test double, a field the
double's driver lacks absent (never 0), Xid events drained without blocking, old samples."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from remote.probes import sampler as sampler_mod
from remote.spine.events import Event
from remote.stats.samples import HEALTH_COUNTERS, sample_payload, summary_line
from remote.stats.stream import SAMPLER
from tests.health_scenario import DOUBLES, pynvml_double


def _write(path: Path, state: dict) -> None:
    path.write_text(json.dumps(state))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a change the reload sees


def _state(nvml: ModuleType) -> dict:
    return copy.deepcopy(nvml.DEFAULT_STATE)


def test_health_fields_read_and_a_missing_field_is_absent(tmp_path: Path, monkeypatch) -> None:
    nvml = pynvml_double("pynvml_health_double")
    state = _state(nvml)
    state["devices"][0]["clock_reasons"] = 0x4 | 0x40  # power cap + hw thermal slowdown
    path = tmp_path / "nvml.json"
    _write(path, state)
    monkeypatch.setenv("PYNVML_DOUBLE_STATE", str(path))
    src = sampler_mod.NvmlSource(nvml)
    g0, g1 = src.read(now=100.0)
    assert g0["clock_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert g0["clock_reasons_mask"] == 0x44
    assert (g0["ecc_corrected_volatile"], g0["ecc_corrected_aggregate"]) == (2, 40)
    assert (g0["ecc_uncorrected_volatile"], g0["ecc_uncorrected_aggregate"]) == (0, 0)
    assert g0["remapped_rows_failure"] == 0 and g0["pcie_replay"] == 3
    assert "retired_pages_sbe" not in g0  # Hopper remaps rows: retired pages NotSupported
    assert [link["link"] for link in g0["nvlink"]] == [0, 1]
    assert g0["nvlink"][0]["crc_flit_errors"] == 1 and "tx" not in g0["nvlink"][0]  # no rate yet
    assert "replay_errors" not in g0["nvlink"][1]  # that counter NotSupported on link 1
    assert g0["xid"] == []  # registered for Xid events, none queued
    # GPU 1's "driver" has only the clock-event reasons: every other health field is absent
    assert g1["clock_reasons"] == ["gpu_idle"]
    for key in (*HEALTH_COUNTERS, "nvlink", "xid"):
        if key != "clock_reasons_mask":
            assert key not in g1, key
    # the console keeps them absent, and the typed view reads None (not 0); pid 4242 of the
    # double is no process here, its name None, which the schema refuses: left out
    g0["procs"] = g1["procs"] = []
    payload = sample_payload({"type": "sample", "source": "nvml", "host": {}, "gpus": [g0, g1]})
    assert "ecc_uncorrected_volatile" not in payload["gpus"][1]
    typed = Event("stats.sample", "box", payload).data()
    assert typed is not None
    assert typed.gpus[1].ecc_uncorrected_volatile is None and typed.gpus[1].xid is None
    assert typed.gpus[0].nvlink is not None and typed.gpus[0].nvlink[0].crc_flit_errors == 1
    # counters climb: NVLink bytes become a rate, an Xid is delivered once, ECC is re-read
    state["devices"][0]["nvlink"][0]["tx_kib"] += 2048
    state["devices"][0]["ecc"]["uncorrected"]["volatile"] = 1
    state["devices"][0]["xids"] = [{"id": 1, "xid": 79}]
    _write(path, state)
    g0, _ = src.read(now=102.0)
    assert g0["nvlink"][0]["tx"] == 2048 * 1024 / 2.0 and g0["nvlink"][0]["rx"] == 0
    assert g0["ecc_uncorrected_volatile"] == 1 and g0["xid"] == [79]
    g0, _ = src.read(now=102.1)
    assert g0["xid"] == []  # each event once
    # the wait never blocks the loop: always a 0 ms timeout
    waits = [c for c in nvml.CALLS if c.startswith("nvmlEventSetWait")]
    assert waits and set(waits) == {"nvmlEventSetWait:0"}
    # counters are read once a second, not per sample
    ecc_before = nvml.CALLS.count("nvmlEventSetWait:0")
    src.read(now=102.2)
    assert nvml.CALLS.count("nvmlEventSetWait:0") == ecc_before + 1
    src.close()
    assert "nvmlEventSetFree" in nvml.CALLS and nvml.CALLS[-1] == "nvmlShutdown"


def test_a_driver_without_any_health_call_still_samples(tmp_path: Path, monkeypatch) -> None:
    nvml = pynvml_double("pynvml_health_double")
    state = _state(nvml)
    for dev in state["devices"]:
        for key in ("clock_reasons", "ecc", "remapped_rows", "pcie_replay", "nvlink", "events"):
            dev.pop(key, None)
    path = tmp_path / "nvml.json"
    _write(path, state)
    monkeypatch.setenv("PYNVML_DOUBLE_STATE", str(path))
    src = sampler_mod.NvmlSource(nvml)
    for g in src.read(now=1.0):
        assert g["util"] is not None
        assert not {*HEALTH_COUNTERS, "clock_reasons", "nvlink", "xid"} & set(g)
    src.close()


def test_an_event_wait_error_is_said_once_and_sampling_goes_on(tmp_path: Path, monkeypatch) -> None:
    nvml = pynvml_double("pynvml_health_double")
    state = _state(nvml)
    state["event_wait_error"] = nvml.NVML_ERROR_GPU_IS_LOST
    path = tmp_path / "nvml.json"
    _write(path, state)
    monkeypatch.setenv("PYNVML_DOUBLE_STATE", str(path))
    src = sampler_mod.NvmlSource(nvml)
    src.read(now=1.0)
    assert "GpuIsLost" in (src.take_error() or "")
    src.read(now=1.1)
    assert src.take_error() is None
    src.close()


def test_the_sampler_script_streams_health_fields(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SAMPLER), "--interval", "0.1", "--count", "2"],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(DOUBLES)})
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    g0, g1 = lines[1]["gpus"]
    assert g0["ecc_corrected_aggregate"] == 40 and g0["xid"] == [] and "ecc_corrected_aggregate" not in g1


def test_samples_of_an_earlier_release_still_read() -> None:
    """A sample recorded before the health fields: no field invented, the line unchanged."""
    old = {"type": "sample", "source": "nvml", "host": {"cpu": 3.0},
           "gpus": [{"index": 0, "name": "H200", "util": 50, "temp": 60, "procs": []}]}
    payload = sample_payload(old)
    assert not {*HEALTH_COUNTERS, "clock_reasons", "nvlink", "xid"} & set(payload["gpus"][0])
    assert Event("stats.sample", "box", payload).data() is not None
    assert "[" not in summary_line(payload)


def test_a_braking_gpu_and_an_xid_show_in_the_line() -> None:
    payload = sample_payload({"type": "sample", "source": "nvml", "host": {}, "gpus": [
        {"index": 0, "name": "H200", "clock_reasons": ["hw_power_brake_slowdown"], "xid": [79]}]})
    assert "[brake hw_power_brake_slowdown xid 79]" in summary_line(payload)
