#!/usr/bin/env python3
"""Live GPU and host stats as JSON lines, from one long-lived process per host.

Runs on the box with whatever python the box has (stdlib only, Python >= 3.8). One process
streaming over the one SSH connection costs a fraction of a percent of a core; a fresh
`ssh host nvidia-smi` per sample costs a process tree, a login shell and a driver handshake
each time.

GPU sources, best first: NVML through nvidia-ml-py (`import pynvml`), then
`nvidia-smi --query-gpu=... --format=csv,noheader,nounits`, then none (host stats only). Why a
better source was not used is said once, in the first line.

Output lines:
  {"type": "start", "pid", "source", "reason", "interval", "gpus", "python"}
  {"type": "sample", "seq", "t", "source", "host": {...}, "gpus": [...], "self_cpu"}
  {"type": "error", "message"}     (something went wrong; sampling continues where it can)
Units: bytes, bytes/s, watts, percent 0-100, Celsius, MHz; a value the GPU does not report
is null. Through NVML a GPU also carries its health (gpu_health.py): clock_reasons (names) and
clock_reasons_mask, ecc_{corrected,uncorrected}_{volatile,aggregate}, retired_pages_*,
remapped_rows_*, pcie_replay, nvlink [{link, tx, rx, *_errors}], xid [the Xids since the last
sample]; a field the driver lacks is absent from the GPU's object, never null or 0.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time

if not __package__:  # run as a script on the box: the siblings uploaded beside it are its package
    import types

    __package__ = "eagle3_probes"
    sys.modules[__package__] = types.ModuleType(__package__)
    sys.modules[__package__].__path__ = [os.path.dirname(os.path.abspath(__file__))]
from . import gpu_health, gpu_query
from .host_stats import HostReader, process_cpu_seconds, process_name

MIN_INTERVAL = 0.1
# NVML's PCIe throughput call samples a byte counter for 20 ms per direction and GPU: at 8 GPUs
# that is 320 ms, longer than a 100 ms sample. Refresh it at most this often, reuse in between.
PCIE_REFRESH_S = 1.0
# Health counters (ECC, retired/remapped pages, PCIe replays, NVLink) change slowly and cost a
# driver call each per GPU (a dozen more per NVLink link): read once a second, reused between.
HEALTH_REFRESH_S = 1.0
# Process lists change slowly and cost a driver call (or an nvidia-smi run) per refresh.
PROCS_REFRESH_S = 2.0
# With nvidia-smi a process list costs a whole nvidia-smi run.
SMI_PROCS_REFRESH_S = 5.0

# A GPU none of these answer is not there any more (fallen off the bus: every call answers
# NVMLError_GpuIsLost): it is left out of the sample, which the console's gpu_missing alert sees.
LOST_WHEN_NONE = ("util", "mem_used", "power", "temp")

SMI_FIELDS = (
    "index",
    "name",
    "uuid",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "clocks.sm",
)


# ----------------------------------------------------------------------------------------- NVML


class NvmlSource:
    """GPU stats through NVML (gpu_query.Nvml). `nvml` is the pynvml module (or anything shaped
    like it)."""

    name = "nvml"

    def __init__(self, nvml):
        self.reader = gpu_query.Nvml(nvml)
        count = len(self.reader.handles)
        self.names = [self.reader.name(i) for i in range(count)]
        self._pcie = [(None, None)] * count
        self._pcie_at = -1e9
        self._procs = [[] for _ in range(count)]
        self._procs_at = -1e9
        self.health = gpu_health.Health(self.reader)
        self._health = [{} for _ in range(count)]
        self._health_at = -1e9

    def read(self, now):
        r = self.reader
        count = len(r.handles)
        if now - self._health_at >= HEALTH_REFRESH_S:
            self._health_at = now
            self._health = [self.health.counters(i, now) for i in range(count)]
        xids = self.health.xids()
        if now - self._pcie_at >= PCIE_REFRESH_S:
            self._pcie_at = now
            self._pcie = [r.pcie(i) for i in range(count)]
        if now - self._procs_at >= PROCS_REFRESH_S:
            self._procs_at = now
            self._procs = [
                [{"pid": pid, "name": process_name(pid), "mem_used": used} for pid, used in r.processes(i)]
                for i in range(count)
            ]
        gpus = []
        for i in range(count):
            metrics = r.metrics(i)
            if all(metrics[k] is None for k in LOST_WHEN_NONE):
                continue  # a GPU fallen off the bus answers nothing (NVMLError_GpuIsLost): missing
            gpu = {"index": i, "name": self.names[i]}
            gpu.update(metrics)
            gpu["pcie_tx"], gpu["pcie_rx"] = self._pcie[i]
            gpu["procs"] = self._procs[i]
            gpu.update(self.health.reasons(i))
            gpu.update(self._health[i])
            if i in xids:
                gpu["xid"] = xids[i]
            gpus.append(gpu)
        return gpus

    def take_error(self):
        """What went wrong reading Xid events since the last call (said once), or None."""
        error, self.health.error = self.health.error, None
        return error

    def close(self):
        self.health.close()
        self.reader.shutdown()


# ----------------------------------------------------------------------------------- nvidia-smi


class SmiSource:
    """GPU stats from `nvidia-smi` CSV when NVML's python binding is missing.

    One nvidia-smi per sample would cost a process start and a driver handshake ten times a
    second; instead one long-lived `nvidia-smi --query-gpu=... -lms MS` streams rows and the
    latest row per GPU is used. Process lists come from a one-shot query every few seconds.
    PCIe throughput is not among nvidia-smi's query fields, so those stay null."""

    name = "nvidia-smi"

    def __init__(self, exe, interval=1.0):
        self.exe = exe
        self.interval = interval
        self._procs = {}
        self._procs_at = -1e9
        first = self._query()
        self.names = [g["name"] for g in first]
        self._latest = {g["index"]: g for g in first}
        self._lock = threading.Lock()
        self._loop = None
        self._loop_at = -1e9
        self._start_loop(time.monotonic())

    def _query_args(self):
        return ["--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"]

    def _run(self, args):
        done = subprocess.run([self.exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=10)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError("nvidia-smi exited %d: %s" % (done.returncode, tail[-1] if tail else "no output"))
        return done.stdout

    def _query(self):
        return parse_smi_gpus(self._run(self._query_args()))

    def _start_loop(self, now):
        self._loop_at = now
        ms = max(100, round(self.interval * 1000))
        try:
            self._loop = subprocess.Popen([self.exe, *self._query_args(), "-lms", str(ms)],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, universal_newlines=True)
        except OSError:
            self._loop = None
            return
        threading.Thread(target=self._pump, args=(self._loop,), daemon=True).start()

    def _pump(self, proc):
        for line in proc.stdout:
            try:
                rows = parse_smi_gpus(line)
            except ValueError:
                continue
            with self._lock:
                for g in rows:
                    self._latest[g["index"]] = g

    def read(self, now):
        if self._loop is None or self._loop.poll() is not None:
            # The streaming child is gone: one-shot queries until a restart (at most every 5 s).
            if now - self._loop_at >= 5.0:
                self._start_loop(now)
            gpus = self._query()
        else:
            with self._lock:
                gpus = [dict(self._latest[i]) for i in sorted(self._latest)]
        if now - self._procs_at >= SMI_PROCS_REFRESH_S:
            self._procs_at = now
            try:
                self._procs = gpu_query.parse_apps(self._run([
                    "--query-compute-apps=" + ",".join(gpu_query.APPS_FIELDS), "--format=csv,noheader,nounits"]))
            except (RuntimeError, ValueError, OSError, subprocess.SubprocessError):
                self._procs = {}
        for g in gpus:
            g["procs"] = self._procs.get(g.pop("uuid", None), [])
        return gpus

    def close(self):
        if self._loop is not None and self._loop.poll() is None:
            self._loop.terminate()
            try:
                self._loop.wait(5)
            except subprocess.TimeoutExpired:
                self._loop.kill()


def parse_smi_gpus(text):
    """Rows of `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`
    (gpu_query.parse_gpus); PCIe throughput is not among nvidia-smi's query fields."""
    gpus = gpu_query.parse_gpus(text, SMI_FIELDS)
    for g in gpus:
        if g["index"] is None:
            raise ValueError("nvidia-smi row without a GPU index: %r" % (g,))
        g["pcie_tx"] = g["pcie_rx"] = None
    return gpus


# ---------------------------------------------------------------------------------- selection


def open_gpu_source(prefer="auto", nvml_module=None, interval=1.0):
    """(source or None, reason or None). The reason says why each better source was skipped."""
    notes = []
    if prefer in ("auto", "nvml"):
        try:
            nvml = nvml_module
            if nvml is None:
                import pynvml as nvml  # type: ignore
            return NvmlSource(nvml), None
        except ImportError as exc:
            notes.append("pynvml not importable (%s)" % exc)
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            notes.append("NVML unavailable (%s: %s)" % (type(exc).__name__, exc))
    if prefer in ("auto", "nvidia-smi"):
        exe = shutil.which("nvidia-smi")
        if exe is None:
            notes.append("nvidia-smi not found on PATH")
        else:
            try:
                return SmiSource(exe, interval), "; ".join(notes) or None
            except Exception as exc:
                notes.append("nvidia-smi failed (%s)" % exc)
    if prefer == "none":
        notes.append("GPU sampling turned off (--source none)")
    return None, "; ".join(notes) or "no GPU source"


# --------------------------------------------------------------------------------------- main


def emit(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main(argv=None):
    p = argparse.ArgumentParser(description="Stream GPU and host stats as JSON lines.")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples (>= 0.1)")
    p.add_argument("--count", type=int, default=0, help="stop after N samples (0: run until stopped)")
    p.add_argument("--once", action="store_true", help="one sample (CPU percent over one interval)")
    p.add_argument("--source", choices=("auto", "nvml", "nvidia-smi", "none"), default="auto")
    p.add_argument("--watch-stdin", action="store_true",
                   help="exit when stdin closes (the console holds it open while it listens)")
    args = p.parse_args(argv)
    if args.interval < MIN_INTERVAL:
        p.error("--interval must be at least %.1f s" % MIN_INTERVAL)
    count = 1 if args.once else args.count

    host = HostReader()
    gpu, reason = open_gpu_source(args.source, interval=args.interval)
    source = gpu.name if gpu is not None else "none"
    emit({"type": "start", "pid": os.getpid(), "source": source, "reason": reason,
          "interval": args.interval, "gpus": list(gpu.names) if gpu is not None else [],
          "python": sys.version.split()[0]})
    watch = sys.stdin if args.watch_stdin else None
    seq = 0
    next_at = time.monotonic() + args.interval
    try:
        while True:
            delay = next_at - time.monotonic()
            if delay > 0 and _wait(watch, delay):
                return 0  # stdin closed: nobody is listening any more
            now = time.monotonic()
            next_at += args.interval
            if next_at < now:  # fell behind (a slow nvidia-smi): skip, do not burst
                next_at = now + args.interval
            sample = {"type": "sample", "seq": seq, "t": round(time.time(), 3), "source": source,
                      "host": host.read(), "gpus": []}
            if gpu is not None:
                try:
                    sample["gpus"] = gpu.read(now)
                except Exception as exc:
                    emit({"type": "error", "message": "%s read failed: %s" % (gpu.name, exc)})
                error = gpu.take_error() if hasattr(gpu, "take_error") else None
                if error:
                    emit({"type": "error", "message": "Xid events: %s" % error})
            sample["self_cpu"] = process_cpu_seconds()
            emit(sample)
            seq += 1
            if count and seq >= count:
                return 0
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    finally:
        host.close()
        if gpu is not None:
            gpu.close()


def _wait(stream, delay):
    """Sleep `delay`; True as soon as `stream` reaches end of file."""
    if stream is None:
        time.sleep(delay)
        return False
    deadline = time.monotonic() + delay
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([stream], [], [], left)
        if ready and not os.read(stream.fileno(), 4096):
            return True  # input itself is ignored


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        try:
            sys.stdout = None  # type: ignore
        except Exception:
            pass
        sys.exit(0)
