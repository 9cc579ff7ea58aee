"""The load driver: a concurrency sweep of streamed requests with a fixed output length.

Each point keeps exactly `concurrency` requests in flight (closed loop, as vLLM's own
benchmark does with --max-concurrency) for `rounds × concurrency` requests, and scrapes the
spec-decode counters just before and just after, so the acceptance figures cover the same window
as the throughput.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence

from remote.bench.client import RequestResult, VllmClient
from remote.bench.errors import BenchFailed, ModelMismatch
from remote.bench.metrics import SpecCounters, acceptance_between
from remote.bench.prompts import PromptSet
from remote.bench.results import BenchRun, Point
from remote.link.errors import UsageError
from remote.spine.events import format_ts, utc_now

MAX_ERRORS_KEPT = 5


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), q in 0..100."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def parse_concurrency(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--concurrency {text!r}: expected comma-separated integers") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"--concurrency {text!r}: expected positive integers")
    return sorted(set(values))


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
) -> Point:
    before = await _spec_counters(client, model) if speculative else None
    results: list[RequestResult] = []
    next_index = iter(range(requests))

    async def worker() -> None:
        for i in next_index:
            results.append(await client.stream_chat(model, prompts.get(offset + i), max_tokens,
                                                    ignore_eos=ignore_eos))

    lags: list[float] = []
    monitor = asyncio.create_task(_loop_lag(lags))
    started = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, requests))]
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

    ok = [r for r in results if r.ok]
    errors = [r.error or "?" for r in results if not r.ok]
    if not ok:
        raise BenchFailed(
            f"all {len(results)} requests at concurrency {concurrency} failed: {errors[0]}"
        )
    tokens = sum(r.output_tokens for r in ok)
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    tpots = [tp for r in ok if (tp := r.tpot) is not None]
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
        acceptance=acceptance,
        errors=errors[:MAX_ERRORS_KEPT],
        loop_lag_p99=percentile(lags, 99),
    )


LAG_TICK_S = 0.01
# Above this the driver's own event loop, not the server, sets the pace of the timings.
LAG_WARN_S = 0.02


async def _loop_lag(lags: list[float]) -> None:
    """How late the event loop wakes a 10 ms sleeper: a load driver that cannot keep up with
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
    rounds: int,
    warmup: int = 1,
    host: str = "",
    on_point: Callable[[BenchRun, Point], None] | None = None,
    ignore_eos: bool = True,
) -> BenchRun:
    model = await check_server(client, model, speculative=speculative)
    run = BenchRun(
        label=label, url=client.shown_url, model=model, speculative=speculative,
        max_tokens=max_tokens, rounds=rounds, prompts=prompts.name,
        prompts_sha256=prompts.sha256, started=format_ts(utc_now()), host=host,
        server_version=await client.server_version(),
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
        point = await run_point(client, model, prompts, c, requests=rounds * c,
                                max_tokens=max_tokens, speculative=speculative, offset=offset,
                                ignore_eos=ignore_eos)
        offset += rounds * c
        run.points.append(point)
        if on_point is not None:
            on_point(run, point)
    return run
