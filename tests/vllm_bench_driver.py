"""vLLM's own benchmark client (`vllm bench serve`), kept loaded: run with the box
environment's python, it reads one JSON command per stdin line and answers on stdout.

- a JSON list: the arguments of one `vllm bench serve`, run as the command runs them
  (`vllm bench serve` parses its arguments with vllm.benchmarks.serve.add_cli_args and calls
  vllm.benchmarks.serve.main, vllm/entrypoints/cli/benchmark/serve.py, vLLM 0.32; so does
  this); answered `@@peer done`.
- `{"open": {...}}` then `{"request": {...}}` per request: the request by request mode of the
  interleaved comparison (tests/vllm_peer.py, `interleaved`). It runs the pieces of
  vllm.benchmarks.serve.benchmark itself, not a copy: one aiohttp session made as benchmark()
  makes it, the initial test run (wait_for_endpoint with request 0) and the warm-ups on
  "open"; per request, fetch_spec_decode_metrics before and after one call of
  async_request_openai_chat_completions (vllm/benchmarks/lib/endpoint_request_func.py, the
  request function `--backend openai-chat` selects) with the RequestFuncInput benchmark()
  builds for `--dataset-name custom --skip-chat-template --temperature 0 --ignore-eos`. Each
  answered `@@peer result JSON`: the request's TTFT, latency and output tokens as vLLM's
  client took them, the counters' difference over its own window, and the CPU time it spent.

Why not one `vllm bench serve --num-prompts 1` per request: each invocation loads the
tokenizer, samples the dataset, sends the initial test prompt (a whole request) and its
warm-ups, and writes its result file. Measured (tests/vllm_peer.py, invocation_overhead,
printed by the slow test; 2026-12-06, load 2-8): 0.47-1.32 s beyond the request, where a
request of 24 tokens takes 0.12-0.24 s, so the two clients' requests of a pair would again be
a second or more apart.

Why not the `vllm` command each time: importing vLLM takes 45 s on this machine's loaded
shared cores (measured: `vllm bench serve --help`). Only the standard library and vLLM are
imported (it runs in the box environment).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from typing import Any

MARK = "@@peer"


class Requests:
    """One server, one session (benchmark()'s), requests sent one at a time."""

    def __init__(self, url: str, model: str, prompts: list[str], max_tokens: int) -> None:
        import aiohttp
        from vllm.benchmarks.lib.endpoint_request_func import ASYNC_REQUEST_FUNCS

        self.url = url
        self.model = model
        self.prompts = prompts
        self.max_tokens = max_tokens
        self.request_func = ASYNC_REQUEST_FUNCS["openai-chat"]
        self.session: aiohttp.ClientSession | None = None  # made in the running loop

    def input(self, i: int) -> Any:
        from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput

        return RequestFuncInput(model=self.model, model_name=None,
                                prompt=self.prompts[i % len(self.prompts)],
                                api_url=self.url + "/v1/chat/completions", prompt_len=0,
                                output_len=self.max_tokens, logprobs=None,
                                multi_modal_content=None, ignore_eos=True, extra_headers=None,
                                extra_body={"temperature": 0.0}, request_id=f"peer-{i}")

    async def open(self, warmups: int) -> None:
        import aiohttp
        from vllm.benchmarks.lib.ready_checker import wait_for_endpoint

        connector = aiohttp.TCPConnector(limit=1, limit_per_host=1, ttl_dns_cache=300,
                                         use_dns_cache=True, keepalive_timeout=60,
                                         enable_cleanup_closed=True, force_close=False,
                                         ssl=False)  # benchmark()'s, --max-concurrency 1
        self.session = aiohttp.ClientSession(connector=connector, trust_env=True,
                                             timeout=aiohttp.ClientTimeout(total=6 * 60 * 60))
        test = self.input(0)
        done = await wait_for_endpoint(self.request_func, test, self.session,
                                       timeout_seconds=600)
        if not done.success:
            raise ValueError(f"Initial test run failed: {done.error}")
        for _ in range(warmups):
            await self.request_func(request_func_input=test, session=self.session)

    async def one(self, i: int) -> dict[str, Any]:
        from vllm.benchmarks.serve import fetch_spec_decode_metrics

        cpu0 = time.process_time()
        before = await fetch_spec_decode_metrics(self.url, self.session)
        out = await self.request_func(request_func_input=self.input(i), session=self.session)
        after = await fetch_spec_decode_metrics(self.url, self.session)
        window = None
        if before is not None and after is not None:
            window = {"drafts": after.num_drafts - before.num_drafts,
                      "draft_tokens": after.num_draft_tokens - before.num_draft_tokens,
                      "accepted": after.num_accepted_tokens - before.num_accepted_tokens}
        return {"ok": bool(out.success), "error": out.error or None,
                "ttft": out.ttft if out.success else None,
                "latency": out.latency if out.success else None,
                "tokens": out.output_tokens or 0, "acceptance": window,
                "cpu_s": time.process_time() - cpu0}


def main() -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    loop = asyncio.new_event_loop()
    requests: Requests | None = None
    print(f"{MARK} ready", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        try:
            if isinstance(command, list):
                parser = FlexibleArgumentParser(prog="vllm bench serve")
                add_cli_args(parser)
                bench_main(parser.parse_args(command))
                print(f"{MARK} done", flush=True)
            elif "open" in command:
                o = command["open"]
                requests = Requests(o["url"], o["model"], o["prompts"], o["max_tokens"])
                loop.run_until_complete(requests.open(o["warmups"]))
                print(f"{MARK} result {{}}", flush=True)
            else:
                assert requests is not None, "request before open"
                result = loop.run_until_complete(requests.one(command["request"]["i"]))
                print(f"{MARK} result {json.dumps(result)}", flush=True)
        except BaseException as exc:  # said on the pipe: the caller raises
            traceback.print_exc(file=sys.stdout)
            print(f"{MARK} failed {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
    if requests is not None and requests.session is not None:
        loop.run_until_complete(requests.session.close())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
