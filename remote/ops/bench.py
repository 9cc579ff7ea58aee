"""Acceptance and speedup benchmarks against a box's vLLM, as `console bench` runs them.

The server is reached through a port forward (remote/bench/reach.py). Points and summaries are
published as bench.point / bench.summary events, so a replay shows the figures; the result
file is rewritten after every point, so an interrupted sweep keeps what it measured. How a
point reads as one line is the caller's (`point_text`, console/bench_tables.point_summary):
this layer never imports the console.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote.bench.compare import Comparison, compare_runs
from remote.bench.driver import LAG_WARN_S, check_server, resolve_model, run_sweep
from remote.bench.prompts import PromptSet
from remote.bench.reach import vllm_client
from remote.bench.results import MIN_REQUESTS, BenchRun, Point, ResultFile, save_result
from remote.bench.served import sweep_acceptance
from remote.bench.watch import WatchWindow
from remote.bench.watch import watch as watch_counters
from remote.errors import RemoteError, UsageError
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.link.upload import box_path
from remote.serving.serve import read_offline
from remote.spine import events as ev
from remote.spine.bus import EventBus

PointText = Callable[[str, Point], str]


@dataclass(frozen=True)
class SweepSettings:
    """What every point of a sweep shares (`console bench run`'s options)."""

    prompts: PromptSet
    concurrencies: list[int]
    model: str | None = None
    max_tokens: int = 256
    rounds: int | None = None  # None: at least min_requests per point
    min_requests: int = MIN_REQUESTS
    min_seconds: float = 0.0
    warmup: int = 1
    timeout: float = 600.0
    ignore_eos: bool = True
    temperature: float = 0.0  # > 0: sampled, request i with seed `seed + i`
    seed: int = 0


@dataclass
class BenchOutcome:
    run: BenchRun
    measured_baseline: BenchRun | None
    comparison: Comparison | None
    path: Path
    served: dict[str, Any] | None  # acceptance of the speculative run, from the server
    offline: dict[str, object] | None  # the pipeline's offline estimate (--offline)
    box_path: str | None = None  # its copy in the box's results folder (None: not kept)


def requests_text(s: SweepSettings) -> str:
    """How many requests each point runs, in words (stated before the sweep starts)."""
    text = (f"{s.rounds} x concurrency requests per point" if s.rounds is not None
            else f"at least {s.min_requests} requests per point")
    if s.min_seconds:
        text += f" and at least {s.min_seconds:g} s"
    return text


def sampling_text(temperature: float, seed: int) -> str:
    """How the requests decode, in words (said before a sweep starts)."""
    if temperature <= 0:
        return "greedy (temperature 0)"
    return f"temperature {temperature:g}, request i seeded {seed}+i"


def _warn(bus: EventBus, host: str, message: str) -> None:
    bus.emit(ev.CONSOLE_WARNING, host, message=message)


async def sweep(transport: Transport, host: HostConfig, bus: EventBus, s: SweepSettings,
                url: str, label: str, *, speculative: bool, point_text: PointText,
                save_partial: Callable[[BenchRun], None]) -> BenchRun:
    """One concurrency sweep against the server at `url` (as seen from the box)."""
    async with vllm_client(transport, url, is_local=host.is_local, timeout=s.timeout) as client:
        model = await resolve_model(client, s.model)
        bus.emit(ev.CONSOLE_INFO, host.name,
                 message=f"{label}: {model} at {client.shown_url}, concurrency "
                 f"{','.join(map(str, s.concurrencies))}, {len(s.prompts)} prompts, "
                 f"max_tokens {s.max_tokens}, {sampling_text(s.temperature, s.seed)}, "
                 f"{requests_text(s)}, warm-up {s.warmup} "
                 f"request{'s' if s.warmup != 1 else ''} first (answers discarded)")

        def on_point(run: BenchRun, p: Point) -> None:
            save_partial(run)
            bus.emit(ev.BENCH_POINT, host.name, label=label, url=client.shown_url,
                     model=model, **p.to_dict(), summary=point_text(label, p))
            if p.failed:
                _warn(bus, host.name, f"{label} c={p.concurrency}: {p.failed} of {p.requests} "
                      f"requests failed: {p.errors[0]}")
            if p.loop_lag_p99 is not None and p.loop_lag_p99 > LAG_WARN_S:
                _warn(bus, host.name, f"{label} c={p.concurrency}: the console's event loop "
                      f"lagged {p.loop_lag_p99 * 1000:.0f} ms (p99): the load driver may be the "
                      "bottleneck at this concurrency, not the server")

        return await run_sweep(
            client, s.prompts, s.concurrencies, label=label, model=model,
            speculative=speculative, max_tokens=s.max_tokens, rounds=s.rounds,
            warmup=s.warmup, host=host.name, on_point=on_point, ignore_eos=s.ignore_eos,
            min_requests=s.min_requests, min_seconds=s.min_seconds,
            temperature=s.temperature, seed=s.seed)


async def fetch_offline(transport: Transport, box_path: str) -> dict[str, object]:
    """evaluate/acceptance.json fetched from the box (SFTP; a copy on `local`)."""
    with tempfile.TemporaryDirectory(prefix="eagle3-offline-") as tmp:
        local = Path(tmp) / "acceptance.json"
        try:
            await transport.get(box_path, local)
        except (OSError, RemoteError) as exc:
            raise UsageError(f"--offline {box_path}: cannot read it on the box ({exc})") from None
        return read_offline(local)


async def run(transport: Transport, host: HostConfig, bus: EventBus, s: SweepSettings, *,
              label: str, out_path: Path, point_text: PointText, speculative: bool = True,
              baseline_url: str | None = None, earlier: ResultFile | None = None,
              offline_path: str | None = None) -> BenchOutcome:
    """The host's server swept (after a baseline server at `baseline_url`, when given), compared
    with the baseline (measured, or `earlier`'s), saved to `out_path`, summarised as one
    bench.summary event."""
    offline = await fetch_offline(transport, offline_path) if offline_path else None
    baseline: BenchRun | None = earlier.run if earlier else None
    measured_baseline: BenchRun | None = None
    saved: list[Path] = []

    def save_partial_baseline(partial: BenchRun) -> None:
        saved.append(save_result(out_path, None, baseline=partial, complete=False))

    def save_partial_run(partial: BenchRun) -> None:
        saved.append(save_result(out_path, partial, baseline=measured_baseline, complete=False))

    if earlier is not None and not earlier.complete:
        _warn(bus, host.name, f"baseline {earlier.path} is incomplete (its sweep stopped early)")
    try:
        if baseline_url:
            # The speculative server is checked before the baseline sweep, not after it.
            async with vllm_client(transport, host.vllm_url, is_local=host.is_local) as client:
                await check_server(client, s.model, speculative=speculative)
            measured_baseline = await sweep(transport, host, bus, s, baseline_url, "baseline",
                                            speculative=False, point_text=point_text,
                                            save_partial=save_partial_baseline)
            baseline = measured_baseline
        result = await sweep(transport, host, bus, s, host.vllm_url, label,
                             speculative=speculative, point_text=point_text,
                             save_partial=save_partial_run)
    except (RemoteError, asyncio.CancelledError):
        if saved:
            _warn(bus, host.name,
                  f"the sweep stopped early: the points measured are kept in {out_path}")
        raise

    served = sweep_acceptance(result.points) if speculative else None
    comparison = compare_runs(baseline, result) if baseline is not None else None
    path = save_result(out_path, result, baseline=measured_baseline,
                       comparison=comparison.to_dict() if comparison else None)
    if comparison is not None:
        for w in comparison.warnings:
            _warn(bus, host.name, w)
    box_path = await keep_on_box(transport, host, bus, path)
    bus.emit(ev.BENCH_SUMMARY, host.name, result_file=str(path), box_file=box_path,
             **summary_fields(label, result, comparison))
    return BenchOutcome(result, measured_baseline, comparison, path, served, offline, box_path)


def summary_fields(label: str, run: BenchRun, comparison: Comparison | None) -> dict[str, Any]:
    """A sweep's bench.summary: the comparison with its baseline, or its best point. One
    place, so a result read back from the box (found_results) sums up as the live run did."""
    if comparison is not None:
        return {"label": label, **comparison.to_dict(), "summary": comparison.summary()}
    best = max(run.points, key=lambda p: p.output_tok_s)
    return {"label": label, "points": len(run.points), "rows": [], "crossover": None,
            "summary": f"{label}: {len(run.points)} points, best {best.output_tok_s:.1f} tok/s "
                       f"at c={best.concurrency}"}


# -- results kept on the box ----------------------------------------------------------------------
# A bench run's result file is also kept on the box, in `<workdir>/bench/` (the box's results
# folder), so a console opened later, on this laptop or another, shows the same sweep table:
# the box keeps the truth. `vllm bench serve --save-result --result-dir <workdir>/bench` puts
# a user's own vLLM runs there too, and they are read alike (remote/bench/vllm_results.py).
BOX_RESULTS_DIR = "bench"
RESULTS_READ = 20  # the newest files read on connect: a table of every run ever is no table
RESULT_MAX_BYTES = 4 << 20  # a result is kilobytes; anything this big is not one

# Run on the box (stdlib only): the results folder's JSON files, [name, mtime, size] each,
# oldest first; nothing when the folder does not exist.
_LIST = ("import json, os, sys\n"
         "d = sys.argv[1]\n"
         "rows = []\n"
         "for name in (os.listdir(d) if os.path.isdir(d) else []):\n"
         "    p = os.path.join(d, name)\n"
         "    if name.endswith('.json') and not name.startswith('.') and os.path.isfile(p):\n"
         "        st = os.stat(p)\n"
         "        rows.append([name, st.st_mtime, st.st_size])\n"
         "rows.sort(key=lambda r: (r[1], r[0]))\n"
         "print(json.dumps(rows))\n")


async def box_results_dir(transport: Transport, host: HostConfig) -> str:
    """`<workdir>/bench` on the box, the workdir resolved there (`~` is the box user's)."""
    return posixpath.join(await box_path(transport, host.workdir, host.python), BOX_RESULTS_DIR)


async def keep_on_box(transport: Transport, host: HostConfig, bus: EventBus,
                      path: Path) -> str | None:
    """A copy of the result file `path` in the box's results folder (under its own name);
    its path there, or None (said once) when the box refused it: the laptop's file stands."""
    try:
        dest = posixpath.join(await box_results_dir(transport, host), path.name)
        await transport.put(path, dest)
    except (OSError, RemoteError) as exc:
        _warn(bus, host.name, f"the bench result was not kept on {host.name} ({exc}): a "
              f"console opened later shows it only from {path}")
        return None
    return dest


async def found_results(transport: Transport, host: HostConfig, bus: EventBus, *,
                        seen: set[str] | None = None,
                        point_text: PointText | None = None) -> list[str]:
    """On connect: the bench results kept on the box (the console's, and `vllm bench serve
    --save-result` files put there), the newest RESULTS_READ, oldest first, each published as
    its sweep was (bench.point per point, its baseline's first, then its bench.summary), so the
    Bench screen's table and charts are those of the console that ran them. `seen` (the
    caller's: `bench:<box path>`) holds what this console has shown: read once. A file that
    is no result is said once and left. The box paths read."""
    from remote.bench.results import load_result

    seen = seen if seen is not None else set()
    folder = await box_results_dir(transport, host)
    done = await transport.run([host.python, "-c", _LIST, folder], timeout=60)
    try:
        rows = json.loads(done.stdout) if done.returncode == 0 else []
    except ValueError:
        rows = []
    read: list[str] = []
    with tempfile.TemporaryDirectory(prefix="eagle3-results-") as tmp:
        for name, _mtime, size in rows[-RESULTS_READ:]:
            box_path = posixpath.join(folder, str(name))
            if f"bench:{box_path}" in seen:
                continue
            seen.add(f"bench:{box_path}")
            try:
                if int(size) > RESULT_MAX_BYTES:
                    raise UsageError(f"{size} bytes, not a bench result")
                local = Path(tmp) / str(name)
                await transport.get(box_path, local)
                found = load_result(local)
            except (OSError, RemoteError) as exc:
                bus.emit(ev.CONSOLE_INFO, host.name,
                         message=f"bench results on {host.name}: {box_path} left out: {exc}")
                continue
            _publish_found(bus, host.name, found, box_path, point_text)
            read.append(box_path)
    return read


def _publish_found(bus: EventBus, host: str, found: ResultFile, box_path: str,
                   point_text: PointText | None) -> None:
    for run in (found.baseline, found.run):
        if run is None:
            continue
        for p in run.points:
            bus.emit(ev.BENCH_POINT, host, label=run.label, url=run.url, model=run.model,
                     source=run.source, box_file=box_path, **p.to_dict(),
                     summary=point_text(run.label, p) if point_text else None)
    comparison = Comparison.from_dict(found.comparison) if found.comparison else None
    if found.run.points:  # the summary the run published, where the file keeps it
        fields = found.summary or summary_fields(found.run.label, found.run, comparison)
        bus.emit(ev.BENCH_SUMMARY, host, **{**fields, "box_file": box_path, "found": True})


def compare(bus: EventBus, a: ResultFile, b: ResultFile,
            point_text: PointText | None = None) -> Comparison:
    """A (baseline) against B (speculative): speedup per concurrency and crossover. Either may
    be a `vllm bench serve` result. Every point of both is published as a bench.point (the
    Bench screen's sweep table: a recorded comparison replays with both runs in it), two runs
    of one label told apart by their files' names."""
    if a.run.label == b.run.label:
        a.run.label = f"{a.run.label} ({a.path.stem})"
        b.run.label = f"{b.run.label} ({b.path.stem})"
    comparison = compare_runs(a.run, b.run)
    for f in (a, b):
        if not f.complete:
            _warn(bus, "", f"{f.path} is incomplete (its sweep stopped early)")
        for p in f.run.points:
            bus.emit(ev.BENCH_POINT, "", label=f.run.label, url=f.run.url, model=f.run.model,
                     source=f.run.source, result_file=str(f.path), **p.to_dict(),
                     summary=point_text(f.run.label, p) if point_text else None)
    bus.emit(ev.BENCH_SUMMARY, "", label=b.run.label, baseline_file=str(a.path),
             result_file=str(b.path), **comparison.to_dict(), summary=comparison.summary())
    return comparison


async def watch(transport: Transport, host: HostConfig, bus: EventBus, *, interval: float,
                count: int | None, model: str | None,
                windows: list[dict[str, object]]) -> None:
    """Acceptance per scrape window, each a bench.watch event and a row appended to `windows`
    (the caller's, so it keeps the rows when the watch is interrupted)."""
    async with vllm_client(transport, host.vllm_url, is_local=host.is_local) as client:
        served_model = await resolve_model(client, model)
        bus.emit(ev.CONSOLE_INFO, host.name,
                 message=f"watching spec-decode acceptance of {served_model} at "
                 f"{client.shown_url} every {interval:g} s")

        def on_window(w: WatchWindow) -> None:
            payload = {"window": w.index, "seconds": w.seconds, "model": served_model,
                       "acceptance": w.acceptance.to_dict(),
                       "accepted_tok_s": w.accepted_tok_s, "drafted_tok_s": w.drafted_tok_s}
            windows.append(payload)
            bus.emit(ev.BENCH_WATCH, host.name, **payload,
                     summary=f"window {w.index} ({w.seconds:.1f} s): "
                     f"{w.acceptance.drafts:.0f} drafts, {w.acceptance.short()}")

        def on_reset(message: str) -> None:
            _warn(bus, host.name, message + " (watch continues from the new counters)")

        await watch_counters(client, served_model, interval=interval, count=count,
                             on_window=on_window, on_reset=on_reset)
