"""Test double for nvidia-ml-py's `pynvml` module (no GPU or NVML library here).

Shaped like the real API the probes use (remote/probes/gpu_query.py): `nvmlInit`/`nvmlShutdown`,
`nvmlDeviceGetCount`, `nvmlDeviceGetHandleByIndex`, the driver versions, per-device getters
returning the same struct fields (`c_nvmlUtilization_t.gpu`, `c_nvmlMemory_t.used/.total`, process infos with `pid` and
`usedGpuMemory`), milliwatts for power, KB/s for PCIe throughput, `NVMLError` subclasses for
unsupported fields (NVMLError(code) is that code's subclass, as in nvidia-ml-py). The health
calls (remote/probes/gpu_health.py) take nvidia-ml-py 13.615's arguments and answer its types:
clock-event reason masks, ECC totals by (error type, counter type), retired pages per cause,
remapped rows as a 4-tuple, the PCIe replay counter, NVLink state/error counters per link,
nvmlDeviceGetFieldValues' c_nvmlFieldValue_t fields, and the event API (nvmlEventSetCreate,
nvmlDeviceRegisterEvents, nvmlEventSetWait raising NVMLError_Timeout when nothing is queued,
nvmlEventSetFree) with c_nvmlEventData_t's fields. The devices it reports come from the JSON file named by
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
NVML_SUCCESS = 0
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
NVML_NVLINK_ERROR_DL_ECC_DATA = 4
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
_NVLINK_ERROR_KEYS = {0: "replay", 1: "recovery", 2: "crc_flit", 3: "crc_data", 4: "ecc_data"}

# Unlike a real driver the state file may change while a process reads it (counters climbing,
# an Xid queued): it is read again when its mtime changes, so a test scripts a box's life.
# Health keys absent from a device (or null) answer NVMLError_NotSupported, as a driver
# without that call does.
DEFAULT_STATE: dict[str, Any] = {
    "devices": [
        {"name": "NVIDIA H200", "uuid": "GPU-5f0c1a2b-0000-1111-2222-333344445555",
         "pci_bus_id": "00000000:19:00.0", "util": 87, "mem_used": 71 * 2**30, "mem_total": 141 * 2**30,
         "power_mw": 312500, "limit_mw": 700000, "temp": 64, "sm_clock": 1980,
         "pcie_tx_kb": 1200, "pcie_rx_kb": 800,
         "procs": [{"pid": 4242, "used": 70 * 2**30}],
         # health: the clock-event mask; ECC [type][counter] as NVML indexes them; Hopper
         # remaps rows (retired pages answer NotSupported there); NVLink links; Xid events.
         "clock_reasons": 0, "ecc": {"corrected": {"volatile": 2, "aggregate": 40},
                                     "uncorrected": {"volatile": 0, "aggregate": 0}},
         "retired_pages": None, "remapped_rows": [0, 0, 0, 0], "pcie_replay": 3,
         "nvlink": [{"active": 1, "tx_kib": 1000, "rx_kib": 2000,
                     "errors": {"replay": 0, "recovery": 0, "crc_flit": 1, "crc_data": 0}},
                    {"active": 1, "tx_kib": 0, "rx_kib": 0, "errors": {}}],
         "events": True, "xids": []},
        {"name": "NVIDIA H200", "uuid": "GPU-6a1d2b3c-0000-1111-2222-333344445555",
         "pci_bus_id": "00000000:3B:00.0", "util": 12, "mem_used": 2**30, "mem_total": 141 * 2**30,
         "power_mw": 95000, "limit_mw": 700000, "temp": 41, "sm_clock": 345,
         "pcie_tx_kb": None, "pcie_rx_kb": None, "procs": [],
         # this one's "driver" lacks every health call but the clock-event reasons
         "clock_reasons": 1},
    ],
    "init_error": None,
    "driver_version": "550.54.15",
    "cuda_driver_version": 12040,
}

CALLS: list[str] = []


NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
_ERROR_TEXT = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported",
               4: "Insufficient Permissions", 10: "Timeout", 12: "NVML Shared Library Not Found",
               13: "Function Not Found", 15: "GPU is lost", 999: "Unknown Error"}


class NVMLError(Exception):
    """As nvidia-ml-py's: NVMLError(code) is an instance of that code's subclass
    (NVMLError(3) is an NVMLError_NotSupported), and each subclass takes no argument."""

    _valClassMapping: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, *args: Any) -> None:
        super().__init__(self.value)

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, "Unknown Error")


def _error_class(name: str, code: int) -> type[NVMLError]:
    def new(cls: type[NVMLError], *args: Any) -> NVMLError:
        return NVMLError.__new__(cls, code)

    made = type(name, (NVMLError,), {"__new__": new})
    NVMLError._valClassMapping[code] = made
    return made


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_Timeout = _error_class("NVMLError_Timeout", NVML_ERROR_TIMEOUT)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)


_state: dict[str, Any] | None = None


_mtime: float | None = None


def _load() -> dict[str, Any]:
    global _mtime
    path = os.environ.get("PYNVML_DOUBLE_STATE")
    if path:
        _mtime = os.stat(path).st_mtime
        with open(path) as fh:
            return dict(json.load(fh))
    return DEFAULT_STATE


def _reload() -> None:
    """The state file again when it changed since it was read (see DEFAULT_STATE)."""
    global _state
    path = os.environ.get("PYNVML_DOUBLE_STATE")
    if _state is None or not path:
        return
    try:
        if os.stat(path).st_mtime != _mtime:
            _state = _load()
    except (OSError, ValueError):
        pass  # mid-write: the next call reads it


def _dev(handle: int) -> dict[str, Any]:
    if _state is None:
        raise NVMLError(1)  # NVML_ERROR_UNINITIALIZED
    _reload()
    if not isinstance(handle, int) or not 0 <= handle < len(_state["devices"]):
        raise NVMLError_InvalidArgument()
    if _state["devices"][handle].get("lost"):  # fallen off the bus: every call says so
        raise NVMLError_GpuIsLost()
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


def nvmlDeviceGetMemoryInfo(handle: int, version: int | None = None) -> SimpleNamespace:
    used, total = _field(handle, "mem_used"), _field(handle, "mem_total")
    return SimpleNamespace(total=total, used=used, free=total - used)


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return int(_field(handle, "power_mw"))


def nvmlDeviceGetEnforcedPowerLimit(handle: int) -> int:
    return int(_field(handle, "limit_mw"))


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    assert sensor == NVML_TEMPERATURE_GPU
    return int(_field(handle, "temp"))


def nvmlDeviceGetClockInfo(handle: int, type: int) -> int:  # nvidia-ml-py names it `type`
    assert type == NVML_CLOCK_SM
    return int(_field(handle, "sm_clock"))


def nvmlDeviceGetPcieThroughput(device: int, counter: int) -> int:
    CALLS.append("nvmlDeviceGetPcieThroughput")
    key = "pcie_tx_kb" if counter == NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_kb"
    return int(_field(device, key))


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


def nvmlDeviceGetIndex(handle: int) -> int:
    _dev(handle)
    return handle


# -- health -----------------------------------------------------------------------------------


def nvmlDeviceGetCurrentClocksEventReasons(handle: int) -> int:
    return int(_field(handle, "clock_reasons"))


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: int) -> int:
    # the deprecated name of the same call (nvidia-ml-py keeps both)
    return nvmlDeviceGetCurrentClocksEventReasons(handle)


def nvmlDeviceGetTotalEccErrors(handle: int, errorType: int, counterType: int) -> int:
    ecc = _field(handle, "ecc")
    if errorType not in (0, 1) or counterType not in (0, 1):
        raise NVMLError_InvalidArgument()
    kind = ("corrected", "uncorrected")[errorType]
    counter = ("volatile", "aggregate")[counterType]
    return int(ecc[kind][counter])


def nvmlDeviceGetRetiredPages(device: int, sourceFilter: int) -> list[int]:
    pages = _field(device, "retired_pages")
    if sourceFilter not in (0, 1):
        raise NVMLError_InvalidArgument()
    return [int(a) for a in pages[("sbe", "dbe")[sourceFilter]]]


def nvmlDeviceGetRetiredPagesPendingStatus(device: int) -> int:
    _field(device, "retired_pages")
    return int(_dev(device).get("retired_pending") or 0)


def nvmlDeviceGetRemappedRows(device: int) -> tuple[int, int, int, int]:
    corr, unc, pending, failure = _field(device, "remapped_rows")
    return (int(corr), int(unc), int(pending), int(failure))


def nvmlDeviceGetPcieReplayCounter(handle: int) -> int:
    return int(_field(handle, "pcie_replay"))


def _link(device: int, link: int) -> dict[str, Any]:
    links = _field(device, "nvlink")
    if not isinstance(link, int) or not 0 <= link < len(links):
        raise NVMLError_InvalidArgument()
    return dict(links[link])


def nvmlDeviceGetNvLinkState(device: int, link: int) -> int:
    return int(_link(device, link).get("active", 0))


def nvmlDeviceGetNvLinkErrorCounter(device: int, link: int, counter: int) -> int:
    value = (_link(device, link).get("errors") or {}).get(_NVLINK_ERROR_KEYS.get(counter, ""))
    if value is None:
        raise NVMLError_NotSupported()
    return int(value)


def nvmlDeviceGetFieldValues(handle: int, fieldIds: list[Any]) -> list[SimpleNamespace]:
    """c_nvmlFieldValue_t per id (an id or (id, scopeId)): each answers its own nvmlReturn."""
    _dev(handle)
    out = []
    for item in fieldIds:
        field_id, scope = item if isinstance(item, tuple) else (item, 0)
        ret, value = NVML_ERROR_NOT_SUPPORTED, 0
        key = {NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: "tx_kib",
               NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: "rx_kib"}.get(field_id)
        if key is not None:
            try:
                found = _link(handle, scope).get(key)
            except NVMLError:
                found = None
            if found is not None:
                ret, value = NVML_SUCCESS, int(found)
        out.append(SimpleNamespace(fieldId=field_id, scopeId=scope, timestamp=0, latencyUsec=0,
                                   valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, nvmlReturn=ret,
                                   value=SimpleNamespace(ullVal=value)))
    return out


class _EventSet:
    def __init__(self) -> None:
        self.devices: dict[int, int] = {}  # handle -> event types registered
        self.delivered: set[tuple[int, int]] = set()


def nvmlEventSetCreate() -> _EventSet:
    if _state is None:
        raise NVMLError(1)
    CALLS.append("nvmlEventSetCreate")
    return _EventSet()


def nvmlDeviceRegisterEvents(handle: int, eventTypes: int, eventSet: _EventSet) -> None:
    if not _dev(handle).get("events"):
        raise NVMLError_NotSupported()
    eventSet.devices[handle] = eventSet.devices.get(handle, 0) | int(eventTypes)


def nvmlEventSetWait(eventSet: _EventSet, timeoutms: int) -> SimpleNamespace:
    """The next queued event (c_nvmlEventData_t's fields), each once; NVMLError_Timeout when
    none is queued. The double never waits: it answers as NVML does with a 0 timeout."""
    CALLS.append(f"nvmlEventSetWait:{timeoutms}")
    if _state is None:
        raise NVMLError(1)
    if _state.get("event_wait_error"):  # a driver in trouble answers something else
        raise NVMLError(int(_state["event_wait_error"]))
    for handle, types in eventSet.devices.items():
        if not types & nvmlEventTypeXidCriticalError:
            continue
        for xid in _dev(handle).get("xids") or []:
            key = (handle, int(xid["id"]))
            if key not in eventSet.delivered:
                eventSet.delivered.add(key)
                return SimpleNamespace(device=handle, eventType=nvmlEventTypeXidCriticalError,
                                       eventData=int(xid["xid"]), gpuInstanceId=0xFFFFFFFF,
                                       computeInstanceId=0xFFFFFFFF)
    raise NVMLError_Timeout()


def nvmlEventSetFree(eventSet: _EventSet) -> None:
    CALLS.append("nvmlEventSetFree")
    eventSet.devices.clear()
