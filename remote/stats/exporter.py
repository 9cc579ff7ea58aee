"""The live samples of every connected box as Prometheus text, on the laptop (issue 53).

A bus consumer, not a second sampler: it keeps each host's latest `stats.sample` payload (one
reference swapped per sample, so the 10 Hz stream pays almost nothing) and the count of its
`stats.alert` events; a scrape builds the metric families from them in prometheus_client's HTTP
thread. Names follow NVIDIA dcgm-exporter's (etc/default-counters.csv and the DCGM fields it
names, docs/health.md) where one exists, so existing Grafana dashboards read them; the labels are
dcgm-exporter's `gpu`, `modelName` and `Hostname` (the console's host name). What has no DCGM
name is `eagle3_*`.

Everything is written as a gauge: prometheus_client writes a counter's samples with `_total`
appended, which would rename DCGM's counters (DCGM_FI_DEV_PCIE_REPLAY_COUNTER would no longer
match a dashboard); PromQL's rate() and increase() read a gauge's samples alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from remote.spine import events as ev
from remote.spine.events import Event

MIB = 2**20
GPU_LABELS = ("gpu", "modelName", "Hostname")

def _nums(g: dict[str, Any], *keys: str) -> bool:
    return all(isinstance(g.get(k), (int, float)) and not isinstance(g.get(k), bool) for k in keys)


def _mib(v: Any) -> float | None:
    return v / MIB if isinstance(v, (int, float)) else None


def _fb_free(g: dict[str, Any]) -> float | None:
    return _mib(g["mem_total"] - g["mem_used"]) if _nums(g, "mem_total", "mem_used") else None


def _links(*keys: str) -> Callable[[dict[str, Any]], float | None]:
    """The sum over a GPU's NVLink links of `keys`; None when no link answers any of them."""
    def read(g: dict[str, Any]) -> float | None:
        total, seen = 0.0, False
        for link in g.get("nvlink") or ():
            for k in keys:
                v = link.get(k) if isinstance(link, dict) else None
                if isinstance(v, (int, float)):
                    total, seen = total + v, True
        return total if seen else None
    return read


# (metric, how to read it from a GPU entry: the entry's field of that name or a function of the
# entry, help): a field the GPU lacks gives no sample.
_GPU_METRICS: tuple[tuple[str, str | Callable[[dict[str, Any]], Any], str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "util", "GPU utilisation, percent."),
    ("DCGM_FI_DEV_FB_USED", lambda g: _mib(g.get("mem_used")), "GPU memory in use, MiB."),
    ("DCGM_FI_DEV_FB_FREE", _fb_free, "GPU memory free, MiB."),
    ("DCGM_FI_DEV_POWER_USAGE", "power", "Power drawn, watts."),
    ("DCGM_FI_DEV_GPU_TEMP", "temp", "GPU temperature, Celsius."),
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock", "SM clock, MHz."),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "clock_reasons_mask", "Clock-event (throttle) reasons, NVML's bitmask."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_corrected_volatile", "Corrected ECC errors since the driver loaded."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_uncorrected_volatile", "Uncorrected ECC errors since the driver loaded."),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "ecc_corrected_aggregate", "Corrected ECC errors over the GPU's life."),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "ecc_uncorrected_aggregate", "Uncorrected ECC errors over the GPU's life."),
    ("DCGM_FI_DEV_RETIRED_SBE", "retired_pages_sbe", "Pages retired for repeated single-bit errors."),
    ("DCGM_FI_DEV_RETIRED_DBE", "retired_pages_dbe", "Pages retired for a double-bit error."),
    ("DCGM_FI_DEV_RETIRED_PENDING", "retired_pages_pending", "1 when a page retirement waits for a driver reload."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "remapped_rows_corrected", "Rows remapped for corrected errors."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "remapped_rows_uncorrected", "Rows remapped for uncorrected errors."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "remapped_rows_failure", "1 when a row remap failed (no spare row left)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay", "PCIe link replays (retransmissions)."),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", _links("crc_flit_errors"), "NVLink flit CRC errors, every link."),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", _links("crc_data_errors"), "NVLink data CRC errors, every link."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", _links("replay_errors"), "NVLink replays, every link."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", _links("recovery_errors"), "NVLink recoveries, every link."),
    ("eagle3_gpu_pcie_tx_bytes_per_second", "pcie_tx", "PCIe transmit throughput (bytes/s, NVML's 20 ms sample)."),
    ("eagle3_gpu_pcie_rx_bytes_per_second", "pcie_rx", "PCIe receive throughput (bytes/s, NVML's 20 ms sample)."),
    ("eagle3_gpu_nvlink_bytes_per_second", _links("tx", "rx"), "NVLink throughput, all links both ways (bytes/s)."),
)
_HOST_METRICS: tuple[tuple[str, str, str], ...] = (  # (metric, the host entry's field, help)
    ("eagle3_host_cpu_percent", "cpu", "The box's CPU use (in %)."),
    ("eagle3_host_memory_used_bytes", "mem_used", "The box's memory in use (bytes)."),
    ("eagle3_host_memory_total_bytes", "mem_total", "The box's memory (bytes)."),
    ("eagle3_host_load1", "load1", "The box's one-minute load average."),
)


class SampleExporter(Collector):
    """The bus side (`__call__`, a bus callback) and the scrape side (`collect`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, Any]] = {}
        self._last_xid: dict[tuple[str, int], int] = {}  # DCGM: the value of the last Xid seen
        self._samples: dict[str, int] = {}
        self._alerts: dict[tuple[str, str], int] = {}

    def __call__(self, event: Event) -> None:
        if event.kind == ev.STATS_SAMPLE:
            p = event.payload
            with self._lock:
                self._latest[event.host] = p
                self._samples[event.host] = self._samples.get(event.host, 0) + 1
                for g in p.get("gpus") or ():
                    xids = g.get("xid")
                    if isinstance(xids, list) and isinstance(g.get("index"), int):
                        key = (event.host, g["index"])
                        if xids:
                            self._last_xid[key] = xids[-1]
                        else:
                            self._last_xid.setdefault(key, 0)
        elif event.kind == ev.STATS_ALERT:
            key = (event.host, str(event.payload.get("rule", "?")))
            with self._lock:
                self._alerts[key] = self._alerts.get(key, 0) + 1

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            latest = dict(self._latest)
            last_xid = dict(self._last_xid)
            samples = dict(self._samples)
            alerts = dict(self._alerts)
        families = {name: GaugeMetricFamily(name, doc, labels=GPU_LABELS) for name, _, doc in _GPU_METRICS}
        xid = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "The last Xid the driver reported (0: none seen).",
                                labels=GPU_LABELS)
        hosts = {name: GaugeMetricFamily(name, doc, labels=("Hostname",)) for name, _, doc in _HOST_METRICS}
        for host, p in sorted(latest.items()):
            for g in p.get("gpus") or ():
                if not isinstance(g, dict) or not isinstance(g.get("index"), int):
                    continue
                labels = [str(g["index"]), str(g.get("name") or ""), host]
                for name, read, _ in _GPU_METRICS:
                    value = g.get(read) if isinstance(read, str) else read(g)
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        families[name].add_metric(labels, float(value))
                if (host, g["index"]) in last_xid:
                    xid.add_metric(labels, float(last_xid[(host, g["index"])]))
            h = p.get("host") or {}
            for name, key, _ in _HOST_METRICS:
                if isinstance(h.get(key), (int, float)):
                    hosts[name].add_metric([host], float(h[key]))
        yield from families.values()
        yield xid
        yield from hosts.values()
        count = GaugeMetricFamily("eagle3_stats_samples", "Samples received from the box since the "
                                  "console started (a counter).", labels=("Hostname",))
        for host, n in sorted(samples.items()):
            count.add_metric([host], float(n))
        yield count
        fired = GaugeMetricFamily("eagle3_alerts", "Alerts raised by the console's rules (stats.alert; "
                                  "a counter).", labels=("Hostname", "rule"))
        for (host, rule), n in sorted(alerts.items()):
            fired.add_metric([host, rule], float(n))
        yield fired


class PrometheusEndpoint:
    """prometheus_client's HTTP server over a registry of one SampleExporter, fed by the bus."""

    def __init__(self, bus: Any, port: int, addr: str = "127.0.0.1") -> None:
        from prometheus_client import start_http_server

        self.exporter = SampleExporter()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.exporter)
        self._remove = bus.add_callback(self.exporter)
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except BaseException:
            self._remove()
            raise
        self.addr = addr
        self.port = int(self._server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._remove()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
