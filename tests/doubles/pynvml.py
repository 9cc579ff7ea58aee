"""Test double for nvidia-ml-py's `pynvml` module (no GPU or NVML library here).

Shaped like the real API the probes use (remote/probes/gpu_query.py): `nvmlInit`/`nvmlShutdown`,
`nvmlDeviceGetCount`, `nvmlDeviceGetHandleByIndex`, the driver versions, per-device getters
returning the same struct fields (`c_nvmlUtilization_t.gpu`, `c_nvmlMemory_t.used/.total`, process infos with `pid` and
`usedGpuMemory`), milliwatts for power, KB/s for PCIe throughput, `NVMLError` subclasses for
unsupported fields. The devices it reports come from the JSON file named by
$PYNVML_DOUBLE_STATE, or DEFAULT_STATE.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12

DEFAULT_STATE: dict[str, Any] = {
    "devices": [
        {"name": "NVIDIA H200", "uuid": "GPU-5f0c1a2b-0000-1111-2222-333344445555",
         "pci_bus_id": "00000000:19:00.0", "util": 87, "mem_used": 71 * 2**30, "mem_total": 141 * 2**30,
         "power_mw": 312500, "limit_mw": 700000, "temp": 64, "sm_clock": 1980,
         "pcie_tx_kb": 1200, "pcie_rx_kb": 800,
         "procs": [{"pid": 4242, "used": 70 * 2**30}]},
        {"name": "NVIDIA H200", "uuid": "GPU-6a1d2b3c-0000-1111-2222-333344445555",
         "pci_bus_id": "00000000:3B:00.0", "util": 12, "mem_used": 2**30, "mem_total": 141 * 2**30,
         "power_mw": 95000, "limit_mw": 700000, "temp": 41, "sm_clock": 345,
         "pcie_tx_kb": None, "pcie_rx_kb": None, "procs": []},
    ],
    "init_error": None,
    "driver_version": "550.54.15",
    "cuda_driver_version": 12040,
}

CALLS: list[str] = []


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__(value)

    def __str__(self) -> str:
        return {3: "Not Supported", 12: "NVML Shared Library Not Found"}.get(self.value, "Unknown Error")


class NVMLError_NotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class NVMLError_LibraryNotFound(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_LIBRARY_NOT_FOUND)


_state: dict[str, Any] | None = None


def _load() -> dict[str, Any]:
    path = os.environ.get("PYNVML_DOUBLE_STATE")
    if path:
        with open(path) as fh:
            return dict(json.load(fh))
    return DEFAULT_STATE


def _dev(handle: int) -> dict[str, Any]:
    if _state is None:
        raise NVMLError(1)  # NVML_ERROR_UNINITIALIZED
    return dict(_state["devices"][handle])


def _field(handle: int, key: str) -> Any:
    value = _dev(handle).get(key)
    if value is None:
        raise NVMLError_NotSupported()
    return value


def nvmlInit() -> None:
    global _state
    CALLS.append("nvmlInit")
    state = _load()
    if state.get("init_error") == "library_not_found":
        raise NVMLError_LibraryNotFound()
    _state = state


def nvmlShutdown() -> None:
    global _state
    CALLS.append("nvmlShutdown")
    _state = None


def nvmlDeviceGetCount() -> int:
    if _state is None:
        raise NVMLError(1)
    return len(_state["devices"])


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    _dev(index)
    return index


def nvmlDeviceGetName(handle: int) -> str | bytes:
    name = _field(handle, "name")
    return name.encode() if _dev(handle).get("name_as_bytes") else name


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    return SimpleNamespace(gpu=_field(handle, "util"), memory=0)


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    used, total = _field(handle, "mem_used"), _field(handle, "mem_total")
    return SimpleNamespace(total=total, used=used, free=total - used)


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return int(_field(handle, "power_mw"))


def nvmlDeviceGetEnforcedPowerLimit(handle: int) -> int:
    return int(_field(handle, "limit_mw"))


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    assert sensor == NVML_TEMPERATURE_GPU
    return int(_field(handle, "temp"))


def nvmlDeviceGetClockInfo(handle: int, clock: int) -> int:
    assert clock == NVML_CLOCK_SM
    return int(_field(handle, "sm_clock"))


def nvmlDeviceGetPcieThroughput(handle: int, counter: int) -> int:
    CALLS.append("nvmlDeviceGetPcieThroughput")
    key = "pcie_tx_kb" if counter == NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_kb"
    return int(_field(handle, key))


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:
    CALLS.append("nvmlDeviceGetComputeRunningProcesses")
    return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used"]) for p in _dev(handle)["procs"]]


def nvmlDeviceGetUUID(handle: int) -> str:
    return str(_field(handle, "uuid"))


def nvmlDeviceGetPciInfo(handle: int) -> SimpleNamespace:
    # c_nvmlPciInfo_t: busId is a char array, read as bytes.
    return SimpleNamespace(busId=str(_field(handle, "pci_bus_id")).encode())


def nvmlSystemGetDriverVersion() -> str:
    if _state is None:
        raise NVMLError(1)
    return str(_state.get("driver_version") or "")


def nvmlSystemGetCudaDriverVersion() -> int:
    if _state is None:
        raise NVMLError(1)
    version = _state.get("cuda_driver_version")
    if version is None:
        raise NVMLError_NotSupported()
    return int(version)
