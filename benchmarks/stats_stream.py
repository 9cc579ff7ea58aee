#!/usr/bin/env python3
"""Streaming stats vs one `ssh host <stats command>` per sample, in the same run.

Starts the loopback OpenSSH sshd of the tests (tests/sshd_harness.py), then:
1. the `console stats` path (StatsStream, printer on /dev/null) over the SSH transport at
   10 Hz for --seconds, measuring the sampler's CPU from /proc/<pid>/stat, and also the sshd
   session processes and this console process, for an end-to-end figure;
2. a loop of `ssh loopback-box python3 sampler.py --once` (OpenSSH client), one per sample,
   measuring the ssh clients (RUSAGE_CHILDREN) and everything sshd spawned for them (the
   listener's reaped-children CPU: cutime + cstime).
It prints samples per CPU-second for both and their ratio (target >= 20x, sampler < 2% of a
core). `--via local` runs side 1 over LocalTransport instead (to separate SSH costs from the
sampler's).

`--prometheus S` (issue 53) runs side 1 twice in the same run: without the Prometheus endpoint,
then with it (remote/stats/exporter.py on the same bus) scraped every S seconds by a thread that
parses each scrape with prometheus_client's text parser; it prints both sample rates, their
ratio, the scrapes and their latency. `--nvml-double` puts the NVML test double
(tests/doubles/pynvml.py) in the sampler's path (with `--via local`: the environment reaches
it), so samples carry two GPUs with their health fields, as a GPU box's do.

    python benchmarks/stats_stream.py [--seconds 60] [--interval 0.1] [--baseline-samples 30]
    python benchmarks/stats_stream.py --via local --nvml-double --prometheus 1 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil
from _common import children_cpu  # first: the repository on sys.path
from ssh_stream import ssh_argv

from console.printer import Printer
from remote.link.connect import make_transport
from remote.link.hosts import HostConfig
from remote.spine.bus import EventBus
from remote.stats.stream import StatsStream
from tests.sshd_harness import Sshd, sshd_available, start_sshd


def cpu(pid: int, children: bool = False) -> float:
    """CPU seconds of a process (user + system), or of the children it reaped."""
    t = psutil.Process(pid).cpu_times()
    return t.children_user + t.children_system if children else t.user + t.system


class Scraper:
    """Scrapes the endpoint every `every` seconds in a thread, each parsed as Prometheus text."""

    def __init__(self, url: str, every: float) -> None:
        self.url, self.every = url, every
        self.scrapes: list[float] = []  # seconds each scrape and parse took
        self.samples = 0  # metric samples in the last scrape
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        while not self._stop.wait(self.every):
            t0 = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as r:
                text = r.read().decode()
            self.samples = sum(len(f.samples) for f in text_string_to_metric_families(text))
            self.scrapes.append(time.perf_counter() - t0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


async def stream_side(host: HostConfig, seconds: float, interval: float, sshd: Sshd | None,
                      scrape_every: float | None = None) -> dict[str, float]:
    bus = EventBus()
    devnull = open(os.devnull, "w")
    bus.add_callback(Printer(out=devnull))
    endpoint = scraper = None
    if scrape_every is not None:
        from remote.stats.exporter import PrometheusEndpoint

        endpoint = PrometheusEndpoint(bus, 0)
        scraper = Scraper(endpoint.url, scrape_every)
    transport = make_transport(host, bus)
    await transport.connect()
    stream = StatsStream(transport, host, bus, interval=interval)
    task = asyncio.create_task(stream.run(duration=seconds + 30))
    while stream.sampler_pid is None or stream.samples < 2:  # warm: uploaded and streaming
        if task.done():
            await task
            raise RuntimeError("stats stream ended before it started")
        await asyncio.sleep(0.05)
    pid = stream.sampler_pid
    session = ([p.pid for p in psutil.Process(sshd.proc.pid).children(recursive=True)
                if p.pid != pid] if sshd else [])
    t0, n0, s0, c0 = time.monotonic(), stream.samples, cpu(pid), time.process_time()
    sess0 = sum(cpu(p) for p in session)
    await asyncio.sleep(seconds)
    t1, n1, s1, c1 = time.monotonic(), stream.samples, cpu(pid), time.process_time()
    sess1 = sum(cpu(p) for p in session if psutil.pid_exists(p))
    stream.stop()
    await task
    await transport.close()
    devnull.close()
    out = {"seconds": t1 - t0, "samples": n1 - n0, "sampler_cpu": s1 - s0,
           "session_cpu": max(0.0, sess1 - sess0), "console_cpu": c1 - c0,
           "restarts": stream.restarts}
    if scraper is not None and endpoint is not None:
        scraper.stop()
        endpoint.close()
        out.update(scrapes=len(scraper.scrapes), scrape_ms=1000 * sum(scraper.scrapes) / max(1, len(scraper.scrapes)),
                   scrape_max_ms=1000 * max(scraper.scrapes, default=0.0), metric_samples=scraper.samples)
    return out


def oneshot_side(sshd: Sshd, python: str, sampler: str, samples: int) -> dict[str, float]:
    argv = ssh_argv(sshd, python, sampler, "--once", "--interval", "0.1")
    subprocess.run(argv, check=True, capture_output=True, timeout=60)  # warm caches first
    t0, c0, srv0 = time.monotonic(), children_cpu(), cpu(sshd.proc.pid, children=True)
    got = 0
    for _ in range(samples):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if done.returncode == 0 and '"type":"sample"' in done.stdout:
            got += 1
    t1, c1, srv1 = time.monotonic(), children_cpu(), cpu(sshd.proc.pid, children=True)
    return {"seconds": t1 - t0, "samples": got, "client_cpu": c1 - c0, "server_cpu": srv1 - srv0}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--baseline-samples", type=int, default=30)
    p.add_argument("--via", choices=("ssh", "local"), default="ssh")
    p.add_argument("--prometheus", type=float, default=None, metavar="S",
                   help="also run the stream with the Prometheus endpoint scraped every S seconds")
    p.add_argument("--nvml-double", action="store_true",
                   help="the NVML test double in the sampler's path (with --via local)")
    args = p.parse_args()
    if args.nvml_double:
        doubles = str(Path(__file__).resolve().parents[1] / "tests" / "doubles")
        os.environ["PYTHONPATH"] = doubles + os.pathsep + os.environ.get("PYTHONPATH", "")
    why = sshd_available()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="stats-bench-") as tmp:
        sshd = start_sshd(Path(tmp) / "sshd")
        try:
            python = shutil.which("python3") or "python3"
            workdir = str(Path(tmp) / "box")
            if args.via == "ssh":
                host = sshd.host_config("box", python=python, workdir=workdir)
            else:
                host = HostConfig(name="local", ssh=None, python=python, workdir=workdir)
            s = asyncio.run(stream_side(host, args.seconds, args.interval,
                                        sshd if args.via == "ssh" else None))
            scraped = None
            if args.prometheus is not None:
                scraped = asyncio.run(stream_side(host, args.seconds, args.interval,
                                                  sshd if args.via == "ssh" else None, args.prometheus))
            sampler = str(Path(workdir) / "probes" / "sampler.py")
            b = oneshot_side(sshd, python, sampler, args.baseline_samples)
        finally:
            sshd.stop()
    core_pct = 100 * s["sampler_cpu"] / s["seconds"]
    # CPU times count in clock ticks: a sampler under ten of them is a bound, not a figure
    # (a short run read 0 s and printed a ratio in the millions)
    tick = 1 / os.sysconf("SC_CLK_TCK")
    coarse = s["sampler_cpu"] < 10 * tick
    stream_rate = s["samples"] / max(s["sampler_cpu"], tick)
    e2e_cpu = s["sampler_cpu"] + s["session_cpu"] + s["console_cpu"]
    e2e_rate = s["samples"] / max(e2e_cpu, 1e-9)
    base_cpu = b["client_cpu"] + b["server_cpu"]
    base_rate = b["samples"] / max(base_cpu, 1e-9)
    print(f"stream ({args.via}, {args.interval:g}s interval): {s['samples']:.0f} samples in "
          f"{s['seconds']:.1f}s ({s['samples'] / s['seconds']:.1f}/s), restarts {s['restarts']:.0f}")
    print(f"  sampler CPU {s['sampler_cpu']:.3f}s = {core_pct:.2f}% of a core; "
          f"{'>= ' if coarse else ''}{stream_rate:,.0f} samples per sampler CPU-second")
    print(f"  end to end (sampler {s['sampler_cpu']:.3f}s + sshd session "
          f"{s['session_cpu']:.3f}s + console {s['console_cpu']:.3f}s): "
          f"{e2e_rate:,.0f} samples per CPU-second")
    print(f"one-shot ssh loop: {b['samples']:.0f} samples in {b['seconds']:.1f}s; CPU client "
          f"{b['client_cpu']:.3f}s + server {b['server_cpu']:.3f}s; "
          f"{base_rate:,.1f} samples per CPU-second")
    ratio = stream_rate / max(base_rate, 1e-9)
    e2e_ratio = e2e_rate / max(base_rate, 1e-9)
    if coarse:
        print(f"  the sampler used under ten clock ticks ({tick * 10:.2f}s of CPU): its rate and "
              "ratio are lower bounds; run longer (--seconds) for figures")
    at_least = ">= " if coarse else ""
    print(f"ratio (sampler / one-shot): {at_least}{ratio:,.0f}x; end to end: {e2e_ratio:,.0f}x "
          f"(target >= 20x, sampler < 2% of a core)")
    met = ratio >= 20 and core_pct < 2
    print("target met" if met else "target MISSED")
    if scraped is not None:
        base_hz = s["samples"] / s["seconds"]
        hz = scraped["samples"] / scraped["seconds"]
        print(f"with the Prometheus endpoint scraped every {args.prometheus:g}s: {scraped['samples']:.0f} "
              f"samples in {scraped['seconds']:.1f}s ({hz:.2f}/s) vs {base_hz:.2f}/s without, ratio "
              f"{hz / max(base_hz, 1e-9):.3f}; {scraped['scrapes']:.0f} scrapes of "
              f"{scraped['metric_samples']:.0f} metric samples, {scraped['scrape_ms']:.1f} ms mean, "
              f"{scraped['scrape_max_ms']:.1f} ms max; console CPU per sample "
              f"{1000 * scraped['console_cpu'] / max(1, scraped['samples']):.2f} ms vs "
              f"{1000 * s['console_cpu'] / max(1, s['samples']):.2f} ms without")
        print("rate held (>= 0.95 of the rate without)" if hz >= 0.95 * base_hz else "rate NOT held")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
