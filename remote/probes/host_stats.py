"""The host half of the stats sampler (sampler.py): CPU, memory and load from /proc, and this
process's own cost, on the box with only its python (stdlib, Python >= 3.8). Uploaded beside
the sampler (remote/link/upload.py finds it from the sampler's imports).
"""

import contextlib
import os


class HostReader:
    """/proc directly: the box may not have psutil, and reading three small files by pread on
    descriptors kept open is the cheapest way to sample them ten times a second."""

    def __init__(self, proc="/proc"):
        self._stat = os.open(os.path.join(proc, "stat"), os.O_RDONLY)
        self._meminfo = os.open(os.path.join(proc, "meminfo"), os.O_RDONLY)
        self._loadavg = os.open(os.path.join(proc, "loadavg"), os.O_RDONLY)
        self._last = self._cpu_times()

    def _cpu_times(self):
        first = os.pread(self._stat, 512, 0).split(b"\n", 1)[0]
        return parse_proc_stat_cpu(first.decode("ascii", "replace"))

    def read(self):
        now = self._cpu_times()
        cpu = cpu_percent(self._last, now)
        self._last = now
        mem_total, mem_used = parse_meminfo(os.pread(self._meminfo, 4096, 0).decode("ascii", "replace"))
        load1 = float(os.pread(self._loadavg, 128, 0).split()[0])
        return {"cpu": cpu, "mem_used": mem_used, "mem_total": mem_total, "load1": load1}

    def close(self):
        for fd in (self._stat, self._meminfo, self._loadavg):
            with contextlib.suppress(OSError):
                os.close(fd)


def parse_proc_stat_cpu(line):
    """(busy, total) jiffies from the aggregate `cpu ` line of /proc/stat."""
    parts = line.split()
    if not parts or parts[0] != "cpu":
        raise ValueError("not the aggregate cpu line of /proc/stat: %r" % line[:60])
    values = [int(v) for v in parts[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already
    # counted in user/nice, so only the first eight add up to the total.
    fields = values[:8]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields)
    return total - idle, total


def cpu_percent(before, after):
    busy = after[0] - before[0]
    total = after[1] - before[1]
    if total <= 0:
        return 0.0
    return round(max(0.0, min(100.0, 100.0 * busy / total)), 1)


def parse_meminfo(text):
    """(total, used) bytes; used = MemTotal - MemAvailable, what `free` calls used."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable", "MemFree"):
            values[key] = int(rest.split()[0]) * 1024
    total = values["MemTotal"]
    available = values.get("MemAvailable", values.get("MemFree", 0))
    return total, total - available


def process_cpu_seconds():
    t = os.times()
    return round(t.user + t.system, 3)


def process_name(pid):
    try:
        with open("/proc/%d/comm" % pid) as fh:
            return fh.read().strip()
    except OSError:  # another PID namespace (the container) or already gone
        return None
