"""The load driver: a concurrency sweep of streamed requests with a fixed output length.

Each point keeps exactly `concurrency` requests in flight (closed loop, as vLLM's own
benchmark does with --max-concurrency) and scrapes the spec-decode counters just before and
just after, so the acceptance figures cover the same window as the throughput.

How many requests a point runs: `rounds × concurrency` when the operator names rounds, else at
least `min_requests` (and never fewer than the concurrency), and in either case on until
`min_seconds` have passed. A p99 over four requests is their maximum: the default minimum
(MIN_REQUESTS) gives the median a few dozen samples, and every point reports its count. The
percentiles are numpy's default (linear between closest ranks), as `vllm bench serve`'s
np.percentile; its median is np.median, the same as p50 here.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from remote.bench.client import RequestResult, VllmClient
from remote.bench.metrics import SpecCounters, acceptance_between, sum_acceptance
from remote.bench.prompts import PromptSet
from remote.bench.results import DEFINITIONS, MIN_REQUESTS, BenchRun, Point
from remote.errors import BenchFailed, ModelMismatch
from remote.spine.events import format_ts, utc_now

MAX_ERRORS_KEPT = 5


def point_requests(concurrency: int, *, rounds: int | None, min_requests: int) -> int:
    """The requests a point starts with (before any min_seconds extension)."""
    if rounds is not None:
        return rounds * concurrency
    return max(min_requests, concurrency)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), q in 0..100."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


async def resolve_model(client: VllmClient, model: str | None) -> str:
    """The served model: the one named (checked against /v1/models) or the only one served."""
    served = await client.served_models()
    if not served:
        raise BenchFailed(f"{client.shown_url}/v1/models lists no model")
    if model is None:
        return served[0]
    if model not in served:
        raise ModelMismatch(
            f"{client.shown_url} serves {', '.join(repr(s) for s in served)}, not {model!r}"
        )
    return model


async def check_server(client: VllmClient, model: str | None, *, speculative: bool) -> str:
    """Reachable, serving the model, and (when speculation is expected) exposing the counters:
    checked before any load so a misconfigured run fails in a second, not after a sweep."""
    model = await resolve_model(client, model)
    if speculative:
        await _spec_counters(client, model)
    return model


async def _spec_counters(client: VllmClient, model: str) -> SpecCounters:
    return (await client.scrape()).for_model(model, client.shown_url)


@dataclass
class Window:
    """One measured window: its requests in the order sent, its length and its acceptance."""

    results: list[RequestResult]
    duration: float
    acceptance: dict[str, Any] | None
    lags: list[float]


async def run_window(
    client: VllmClient, model: str, prompts: PromptSet, concurrency: int, *, requests: int,
    max_tokens: int, speculative: bool, offset: int = 0, ignore_eos: bool = True,
    min_seconds: float = 0.0, temperature: float = 0.0, seed: int = 0,
) -> Window:
    """`requests` requests (more while `min_seconds` have not passed), `concurrency` at once,
    between two scrapes of the spec-decode counters."""
    before = await _spec_counters(client, model) if speculative else None
    sent: list[tuple[int, RequestResult]] = []
    started = time.perf_counter()
    next_index = itertools.count()

    def more(i: int) -> bool:
        return i < requests or time.perf_counter() - started < min_seconds

    async def worker() -> None:
        while more(i := next(next_index)):
            sent.append((i, await client.stream_chat(model, prompts.get(offset + i), max_tokens,
                                                     ignore_eos=ignore_eos,
                                                     temperature=temperature,
                                                     seed=seed + offset + i)))

    lags: list[float] = []
    monitor = asyncio.create_task(_loop_lag(lags))
    tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, max(requests, 1)))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in [*tasks, monitor]:
            task.cancel()
    duration = time.perf_counter() - started
    acceptance = None
    if before is not None:
        after = await _spec_counters(client, model)
        acceptance = acceptance_between(before, after, client.shown_url).to_dict()
    results = [r for _, r in sorted(sent, key=lambda done: done[0])]  # in the order sent
    return Window(results, duration, acceptance, lags)


async def run_point(
    client: VllmClient,
    model: str,
    prompts: PromptSet,
    concurrency: int,
    *,
    requests: int,
    max_tokens: int,
    speculative: bool,
    offset: int = 0,
    ignore_eos: bool = True,
    min_seconds: float = 0.0,
    temperature: float = 0.0,
    seed: int = 0,
) -> Point:
    """`requests` requests (more while `min_seconds` have not passed), `concurrency` at once.
    Request i of the sweep (offset + i) samples with seed `seed + offset + i` when temperature
    is above 0: a rerun sends every request with the seed it had before.

    Prompts with categories: one window per category, one after the other, each with its share
    of the requests (never fewer than the concurrency): the counters are the server's, summed
    over every request in flight, so a category's acceptance is only its own when its window
    holds nothing else. The point's figures are those of all its windows together."""
    async def window(subset: PromptSet, n: int, first: int, seconds: float) -> Window:
        return await run_window(client, model, subset, concurrency, requests=n,
                                max_tokens=max_tokens, speculative=speculative, offset=first,
                                ignore_eos=ignore_eos, min_seconds=seconds,
                                temperature=temperature, seed=seed)

    groups = prompts.by_category()
    if not groups:
        return point_of(concurrency, [await window(prompts, requests, offset, min_seconds)])
    share = max(concurrency, math.ceil(requests / len(groups)))
    windows: dict[str, Window] = {}
    for cat, subset in groups.items():
        windows[cat] = await window(subset, share, offset, min_seconds / len(groups))
        offset += len(windows[cat].results)
    point = point_of(concurrency, list(windows.values()))
    point.categories = {cat: category_figures(w) for cat, w in windows.items()}
    return point


def category_figures(w: Window) -> dict[str, Any]:
    """A category's window in a point: what its row in the tables shows."""
    ok = [r for r in w.results if r.ok]
    tokens = sum(r.output_tokens for r in ok)
    tpots = [tp for r in ok if (tp := r.tpot) is not None]
    return {"requests": len(w.results), "failed": len(w.results) - len(ok),
            "output_tokens": tokens, "duration": w.duration,
            "output_tok_s": tokens / w.duration if w.duration > 0 else 0.0,
            "tpot_p50": percentile(tpots, 50), "acceptance": w.acceptance}


def point_of(concurrency: int, windows: list[Window]) -> Point:
    """The point of one or more windows measured one after the other."""
    results = [r for w in windows for r in w.results]
    duration = sum(w.duration for w in windows)
    ok = [r for r in results if r.ok]
    errors = [r.error or "?" for r in results if not r.ok]
    if not ok:
        raise BenchFailed(
            f"all {len(results)} requests at concurrency {concurrency} failed: {errors[0]}"
        )
    measured = [w.acceptance for w in windows if w.acceptance is not None]
    acceptance = (measured[0] if len(measured) == 1 else sum_acceptance(measured)) \
        if measured else None
    tokens = sum(r.output_tokens for r in ok)
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    tpots = [tp for r in ok if (tp := r.tpot) is not None]
    itls = [gap for r in ok for gap in r.itl]
    e2els = [r.latency for r in ok if r.latency is not None]
    lags = [lag for w in windows for lag in w.lags]
    return Point(
        concurrency=concurrency,
        requests=len(results),
        failed=len(errors),
        output_tokens=tokens,
        duration=duration,
        output_tok_s=tokens / duration if duration > 0 else 0.0,
        req_s=len(ok) / duration if duration > 0 else 0.0,
        ttft_p50=percentile(ttfts, 50),
        ttft_p99=percentile(ttfts, 99),
        tpot_p50=percentile(tpots, 50),
        tpot_p99=percentile(tpots, 99),
        itl_p50=percentile(itls, 50),
        itl_p99=percentile(itls, 99),
        e2el_p50=percentile(e2els, 50),
        e2el_p99=percentile(e2els, 99),
        acceptance=acceptance,
        errors=errors[:MAX_ERRORS_KEPT],
        loop_lag_p99=percentile(lags, 99),
        ttfts=[r.ttft if r.ok else None for r in results],
        latencies=[r.latency if r.ok else None for r in results],
        output_lens=[r.output_tokens if r.ok else 0 for r in results],
    )


# The monitor's own period. 10 ms made the console's process wake 100 times a second, which on
# saturated shared cores delayed its reading of the first chunk: beside `vllm bench serve`
# (both clients at once, tests/vllm_peer.py) its TTFT read 1.2-2.3x vLLM's over seven runs,
# 0.94-1.02x with the monitor idle (docs/measurements.md). A lag is the overshoot past the
# period, so a longer period still measures it.
LAG_TICK_S = 0.1
# Above this the driver's own event loop, not the server, sets the pace of the timings.
LAG_WARN_S = 0.02


async def _loop_lag(lags: list[float]) -> None:
    """How late the event loop wakes a LAG_TICK_S sleeper: a load driver that cannot keep up with
    the chunks it receives (many streams on a slow laptop) would stretch TTFT/TPOT and flatten
    tokens/s, and report the client's limit as the server's."""
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(LAG_TICK_S)
        lags.append(max(0.0, time.perf_counter() - t0 - LAG_TICK_S))


async def run_sweep(
    client: VllmClient,
    prompts: PromptSet,
    concurrencies: Sequence[int],
    *,
    label: str,
    model: str | None,
    speculative: bool,
    max_tokens: int,
    rounds: int | None,
    warmup: int = 1,
    host: str = "",
    on_point: Callable[[BenchRun, Point], None] | None = None,
    ignore_eos: bool = True,
    min_requests: int = MIN_REQUESTS,
    min_seconds: float = 0.0,
    temperature: float = 0.0,
    seed: int = 0,
) -> BenchRun:
    """`rounds`: requests per point = rounds x concurrency; None: at least `min_requests`.
    `temperature` > 0 samples, each request with its own seed (run_point)."""
    model = await check_server(client, model, speculative=speculative)
    run = BenchRun(
        label=label, url=client.shown_url, model=model, speculative=speculative,
        max_tokens=max_tokens, rounds=rounds or 0, prompts=prompts.name,
        prompts_sha256=prompts.sha256, started=format_ts(utc_now()), host=host,
        server_version=await client.server_version(), warmup=warmup,
        min_requests=None if rounds is not None else min_requests,
        min_seconds=min_seconds or None, definitions=DEFINITIONS,
        temperature=temperature, seed=seed if temperature > 0 else None,
    )
    if warmup > 0:
        # Warm-up only readies the engine; its answers are thrown away. It never stops at EOS:
        # a target whose first token is its end token would otherwise fail the warm-up and hide
        # what the measured requests, which do stop there, report for themselves.
        warm = await asyncio.gather(*(client.stream_chat(model, prompts.get(i), max_tokens,
                                                         ignore_eos=True)
                                      for i in range(warmup)))
        bad = [r for r in warm if not r.ok]
        if len(bad) == len(warm):
            raise BenchFailed(f"warm-up request to {client.shown_url} failed: {bad[0].error}")
    offset = 0
    for c in concurrencies:
        point = await run_point(client, model, prompts, c,
                                requests=point_requests(c, rounds=rounds,
                                                        min_requests=min_requests),
                                max_tokens=max_tokens, speculative=speculative, offset=offset,
                                ignore_eos=ignore_eos, min_seconds=min_seconds,
                                temperature=temperature, seed=seed)
        offset += point.requests
        run.points.append(point)
        if on_point is not None:
            on_point(run, point)
    return run
