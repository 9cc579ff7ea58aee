"""One NVML reader and one nvidia-smi CSV parser for the probes that read GPUs.

The env probe (one answer: what GPUs are there) and the sampler (the same questions ten times a
second) ask NVML and nvidia-smi the same things; when each had its own reader they disagreed:
a GPU name with a comma in it failed the env probe's CSV parse and was re-spaced by the
sampler's. Both import this module from their own directory: the probe runner and the stats
stream upload it beside them (remote/link/upload.py, `upload_probe`).

Runs on the box with whatever python the box has: stdlib only, Python >= 3.8.
Units are the event conventions: bytes, watts, percent 0-100, Celsius, MHz; a value the GPU or
the driver does not report is None.
"""

MIB = 1024 * 1024

# nvidia-smi --query-gpu field -> (our key, converter). Only the fields a probe asks for are read.
_SMI_KEYS = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "pci.bus_id": "pci_bus_id",
    "driver_version": "driver_version",
    "utilization.gpu": "util",
    "memory.used": "mem_used",
    "memory.total": "mem_total",
    "power.draw": "power",
    "power.limit": "power_limit",
    "temperature.gpu": "temp",
    "clocks.sm": "sm_clock",
}
_SMI_TEXT = ("name", "uuid", "pci.bus_id", "driver_version")
_SMI_MIB = ("memory.used", "memory.total")


def smi_number(text):
    """One `nounits` cell: an int or a float, or None for [N/A], [Not Supported], [Unknown
    Error] and an empty cell."""
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def split_row(line, fields, free):
    """The cells of one CSV row of `fields`. nvidia-smi does not quote: a comma inside the one
    free-text field (`free`, e.g. a GPU or process name) yields extra cells, which are joined
    back into that field as they were printed. Fewer cells than fields is a ValueError."""
    pieces = line.split(",")
    n = len(fields)
    if len(pieces) < n or (len(pieces) > n and free not in fields):
        raise ValueError("nvidia-smi row has %d fields, expected %d: %r" % (len(pieces), n, line[:160]))
    if len(pieces) > n:
        at = list(fields).index(free)
        extra = len(pieces) - n
        pieces = [*pieces[:at], ",".join(pieces[at:at + 1 + extra]), *pieces[at + 1 + extra:]]
    return [p.strip() for p in pieces]


def parse_gpus(text, fields):
    """Rows of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` as GPU dicts
    under our keys and units (only the fields asked for)."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        gpu = {}
        for field, cell in zip(fields, split_row(line, fields, "name")):  # noqa: B905 (3.8)
            key = _SMI_KEYS.get(field, field)
            if field in _SMI_TEXT:
                gpu[key] = cell
            elif field in _SMI_MIB:
                mib = smi_number(cell)
                gpu[key] = None if mib is None else int(mib * MIB)
            else:
                gpu[key] = smi_number(cell)
        gpus.append(gpu)
    return gpus


APPS_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")


def parse_apps(text):
    """{gpu_uuid: [proc]} from `--query-compute-apps=<APPS_FIELDS> --format=csv,noheader,nounits`."""
    fields = list(APPS_FIELDS)
    out = {}
    for line in text.splitlines():
        if not line.strip() or "No running" in line:
            continue
        uuid, pid, name, used = split_row(line, fields, "process_name")
        mib = smi_number(used)
        out.setdefault(uuid, []).append({
            "pid": int(pid),
            "name": name,
            "mem_used": None if mib is None else int(mib * MIB),
        })
    return out


def _text(value):
    """NVML strings are bytes in older nvidia-ml-py releases, str in newer ones."""
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Nvml(object):
    """NVML through the `pynvml` module of nvidia-ml-py (or anything shaped like it).

    Every per-GPU query answers None when it fails: a field the GPU does not support
    (NVMLError_NotSupported), or a function an older nvidia-ml-py does not have. init() and
    the device count are not guarded: without them there is no NVML source at all."""

    def __init__(self, nvml):
        self.nvml = nvml
        nvml.nvmlInit()
        try:
            self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception:
            self.shutdown()
            raise

    def get(self, name, *args):
        try:
            return getattr(self.nvml, name)(*args)
        except Exception:
            return None

    def driver(self):
        return {"driver_version": _text(self.get("nvmlSystemGetDriverVersion")),
                "cuda_driver_version": self.get("nvmlSystemGetCudaDriverVersion")}

    def name(self, index):
        return _text(self.get("nvmlDeviceGetName", self.handles[index]))

    def identity(self, index):
        """What does not change while the process runs: name, uuid, PCI bus id."""
        h = self.handles[index]
        pci = self.get("nvmlDeviceGetPciInfo", h)
        return {
            "index": index,
            "name": self.name(index),
            "uuid": _text(self.get("nvmlDeviceGetUUID", h)),
            "pci_bus_id": _text(getattr(pci, "busId", None)),
        }

    def metrics(self, index):
        """One reading: utilisation, memory, power, temperature, SM clock."""
        n = self.nvml
        h = self.handles[index]
        util = self.get("nvmlDeviceGetUtilizationRates", h)
        mem = self.get("nvmlDeviceGetMemoryInfo", h)
        power = self.get("nvmlDeviceGetPowerUsage", h)
        limit = self.get("nvmlDeviceGetEnforcedPowerLimit", h)
        temp = self.get("nvmlDeviceGetTemperature", h, getattr(n, "NVML_TEMPERATURE_GPU", 0))
        clock = self.get("nvmlDeviceGetClockInfo", h, getattr(n, "NVML_CLOCK_SM", 1))
        return {
            "util": None if util is None else int(util.gpu),
            "mem_used": None if mem is None else int(mem.used),
            "mem_total": None if mem is None else int(mem.total),
            "power": _watts(power),
            "power_limit": _watts(limit),
            "temp": None if temp is None else int(temp),
            "sm_clock": None if clock is None else int(clock),
        }

    def pcie(self, index):
        """(tx, rx) bytes/s. NVML samples each counter for 20 ms: call it sparingly."""
        n = self.nvml
        h = self.handles[index]
        tx = self.get("nvmlDeviceGetPcieThroughput", h, getattr(n, "NVML_PCIE_UTIL_TX_BYTES", 0))
        rx = self.get("nvmlDeviceGetPcieThroughput", h, getattr(n, "NVML_PCIE_UTIL_RX_BYTES", 1))
        return _kb(tx), _kb(rx)

    def processes(self, index):
        """[(pid, bytes or None)] of the compute processes on the GPU."""
        found = self.get("nvmlDeviceGetComputeRunningProcesses", self.handles[index]) or []
        out = []
        for p in found:
            used = getattr(p, "usedGpuMemory", None)
            out.append((int(p.pid), int(used) if isinstance(used, int) else None))
        return out

    def shutdown(self):
        self.get("nvmlShutdown")


def _watts(milliwatts):
    return None if milliwatts is None else round(milliwatts / 1000.0, 3)


def _kb(value):
    # nvmlDeviceGetPcieThroughput reports KB/s.
    return None if value is None else int(value) * 1024
