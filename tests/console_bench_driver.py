"""`console bench run`'s own driver code, one request at a time: the console's side of the
interleaved comparison with vLLM's client (tests/vllm_peer.py, `interleaved`), in a process
of its own as vLLM's client is (inside pytest's process, whose heap holds the engine and demo
fixtures, the console's event loop was seen blocked 200-280 ms at p99).

    python -m tests.console_bench_driver URL MODEL PROMPTS MAX_TOKENS WARMUPS

It does what remote.bench.driver.run_sweep does before its points (check_server, then the
warm-up requests), prints `@@peer ready`, then reads one request index per stdin line and
runs it as a point of one request at concurrency 1 (remote.bench.driver.run_point with
offset i: the spec-decode counters scraped before and after, request i of the prompt set,
ignore_eos), answering `@@peer result JSON`: the request's TTFT, latency and output tokens,
the point's acceptance window, and the CPU time the driver spent on it (scrapes included: on
shared cores a client that burns more CPU waits longer for one when its answer arrives).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from remote.bench.client import VllmClient
from remote.bench.driver import check_server, run_point
from remote.bench.prompts import load_prompts

MARK = "@@peer"


async def serve(url: str, model: str, prompts_path: str, max_tokens: int, warmups: int) -> None:
    prompts = load_prompts(prompts_path)
    async with VllmClient(url) as client:
        model = await check_server(client, model, speculative=True)
        for i in range(warmups):  # run_sweep's warm-up
            await client.stream_chat(model, prompts.get(i), max_tokens, ignore_eos=True)
        print(f"{MARK} ready", flush=True)
        for line in sys.stdin:  # nothing else runs meanwhile: a blocking read is fine
            if not line.strip():
                continue
            cpu0 = time.process_time()
            point = await run_point(client, model, prompts, 1, requests=1,
                                    max_tokens=max_tokens, speculative=True,
                                    offset=int(line))
            ok = not point.failed
            print(f"{MARK} result " + json.dumps({
                "ok": ok, "error": point.errors[0] if point.errors else None,
                "ttft": (point.ttfts or [None])[0], "latency": (point.latencies or [None])[0],
                "tokens": (point.output_lens or [0])[0], "acceptance": point.acceptance,
                "cpu_s": time.process_time() - cpu0}),
                flush=True)


def main() -> int:
    url, model, prompts, max_tokens, warmups = sys.argv[1:6]
    asyncio.run(serve(url, model, prompts, int(max_tokens), int(warmups)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
