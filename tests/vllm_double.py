"""Test double of vLLM's OpenAI-compatible server, for the bench tests (vLLM cannot run here).

It is faithful to what the console relies on (docs/design.md §2.7, vllm/v1/spec_decode/metrics.py and
vllm/v1/metrics/loggers.py of vLLM 0.16):
- `GET /version`, `GET /v1/models`, `POST /v1/chat/completions` streamed as server-sent
  events: a role chunk with empty content (sent, as vLLM's serving_chat does, with the
  request's first output, not before the prefill), one chunk per engine step carrying every
  token that step produced (`empty_text_tokens`: the request's first tokens decode to no text,
  as a small model's often do) (with speculation a chunk carries several tokens), a finish chunk, a `usage`
  chunk when `stream_options.include_usage` is set, then `data: [DONE]`. `max_tokens` + `ignore_eos` give
  exactly `max_tokens` tokens. An unknown model gets vLLM's 404 error body.
- `GET /metrics` in Prometheus text, written by prometheus_client as vLLM's Counters are:
  `vllm:spec_decode_num_drafts_total`, `..._num_draft_tokens_total`,
  `..._num_accepted_tokens_total` with labels model_name and engine, and
  `..._num_accepted_tokens_per_pos_total` with labels model_name, engine and position, each with
  its `_created` series; absent when the double runs without speculation, as in vLLM. A few other
  vLLM series sit around them so the console has to pick its own.

Speed model (explicit, so tests can predict the figures they measure):
- One engine loop. Each step lasts `step_base_s + step_per_seq_s * b` seconds, b being the
  sequences running in it (at most `max_num_seqs`; the rest wait in a queue, FIFO).
- A sequence's first step is its prefill and yields 1 token (that is its TTFT).
- Baseline: every later step yields 1 token.
- Speculative: every later step is one draft of `num_speculative_tokens` (K) tokens per sequence;
  the draft's accepted count a is taken in turn from `accept_pattern` (cycled, one entry per
  draft, over all sequences); the step yields 1 + a tokens (the bonus token plus the accepted
  ones, cut at max_tokens) and the counters advance by drafts += 1, draft_tokens += K,
  accepted += a, accepted_per_pos[i] += 1 for i < a, on engine `request_index % engines`.
  Verifying K+1 positions per sequence is what makes a speculative step dearer per sequence, so
  a speculative double is configured with a larger `step_per_seq_s`: faster than the baseline at
  low concurrency, slower at high.
`predicted_tok_s` gives the output tokens/s this model implies for a closed loop of c requests.

Test controls (not in vLLM): `GET /_double/state` (counters, requests seen), `POST
/_double/counters` (set the counters of one engine to given values), `POST /_double/restart`
(zero the counters and re-create them, as a server restart does); in the config,
`advance_per_scrape` (known increments after every scrape, for watch windows) and
`restart_at_scrape`.

Run: `python -m tests.vllm_double '{"speculative": true}' [PORT]` prints `listening PORT` (a
free port when none is given) then serves. Tests start it with the `vllm_double` fixture
(tests/vllm_double_fixture.py). It imports only the stdlib and prometheus_client, so it starts
fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

DOUBLE_VERSION = "0.16.0+test-double"


@dataclass
class DoubleConfig:
    model: str = "double-model"
    speculative: bool = False
    num_speculative_tokens: int = 3
    accept_pattern: list[int] = field(default_factory=lambda: [2])
    step_base_s: float = 0.008
    step_per_seq_s: float = 0.001
    max_num_seqs: int = 256
    engines: int = 1
    # Also expose spec counters for a second model_name (filtering must drop them).
    other_model: str | None = None
    # Test controls for watch mode: after each /metrics answer, add these to engine 0's counters
    # ({"drafts", "draft_tokens", "accepted", "per_pos"}), and restart at the Nth scrape (1-based).
    advance_per_scrape: dict[str, Any] | None = None
    restart_at_scrape: int | None = None
    # The first tokens of every answer decode to empty text (their chunks carry content "").
    empty_text_tokens: int = 0

    def __post_init__(self) -> None:
        if any(a < 0 or a > self.num_speculative_tokens for a in self.accept_pattern):
            raise ValueError("accept_pattern entries must lie in 0..num_speculative_tokens")
        if not self.accept_pattern:
            raise ValueError("accept_pattern must not be empty")

    def step_time(self, batch: int) -> float:
        return self.step_base_s + self.step_per_seq_s * batch

    def predicted_tok_s(self, concurrency: int, max_tokens: int) -> float:
        """Output tokens/s of a closed loop of `concurrency` requests moving in waves (every
        request of a wave starts and ends together). Exact for a constant accept_pattern."""
        b = min(concurrency, self.max_num_seqs)
        per_step = 1 + (sum(self.accept_pattern) / len(self.accept_pattern)
                        if self.speculative else 0)
        steps = 1 + math.ceil((max_tokens - 1) / per_step)
        return b * max_tokens / (steps * self.step_time(b))


@dataclass
class _Counts:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)


@dataclass
class _Seq:
    index: int
    max_tokens: int
    queue: asyncio.Queue[int | None]
    produced: int = 0
    cancelled: bool = False


class _Engine:
    def __init__(self, cfg: DoubleConfig) -> None:
        self.cfg = cfg
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.wakeup = asyncio.Event()
        self.draft_index = 0
        self.generated = 0
        self.max_running = 0
        self.counts: list[_Counts] = []
        self.created = 0.0
        self.restart()

    def restart(self) -> None:
        k = self.cfg.num_speculative_tokens
        self.counts = [_Counts(per_pos=[0] * k) for _ in range(self.cfg.engines)]
        self.created = time.time()

    def submit(self, seq: _Seq) -> None:
        self.waiting.append(seq)
        self.wakeup.set()

    async def loop(self) -> None:
        """Steps end on a fixed schedule (each one `step_time` after the previous), so the
        double's own processing, done while the next step "runs", does not slow its model."""
        clock = asyncio.get_running_loop().time
        step_end = clock()
        while True:
            if not self.running and not self.waiting:
                self.wakeup.clear()
                await self.wakeup.wait()
                step_end = clock()
            while self.waiting and len(self.running) < self.cfg.max_num_seqs:
                self.running.append(self.waiting.popleft())
            self.max_running = max(self.max_running, len(self.running))
            step_end = max(step_end, clock() - self.cfg.step_base_s)
            step_end += self.cfg.step_time(len(self.running))
            await asyncio.sleep(max(0.0, step_end - clock()))
            for seq in list(self.running):
                if not seq.cancelled:
                    n = self._step(seq)
                    seq.produced += n
                    self.generated += n
                    seq.queue.put_nowait(n)
                if seq.cancelled or seq.produced >= seq.max_tokens:
                    self.running.remove(seq)
                    seq.queue.put_nowait(None)

    def _step(self, seq: _Seq) -> int:
        remaining = seq.max_tokens - seq.produced
        if seq.produced == 0 or not self.cfg.speculative:
            return min(1, remaining)
        a = self.cfg.accept_pattern[self.draft_index % len(self.cfg.accept_pattern)]
        self.draft_index += 1
        c = self.counts[seq.index % self.cfg.engines]
        c.drafts += 1
        c.draft_tokens += self.cfg.num_speculative_tokens
        c.accepted += a
        for i in range(a):
            c.per_pos[i] += 1
        return min(1 + a, remaining)


class _SpecCollector:
    """Writes the counters through prometheus_client, exactly as vLLM's Counters appear."""

    def __init__(self, double: VllmDouble) -> None:
        self.double = double

    def collect(self) -> Iterator[Any]:
        d = self.double
        eng = d.engine
        running = GaugeMetricFamily("vllm:num_requests_running", "Number of requests running.",
                                    labels=["model_name", "engine"])
        running.add_metric([d.cfg.model, "0"], len(eng.running))
        yield running
        gen = CounterMetricFamily("vllm:generation_tokens", "Number of generation tokens.",
                                  labels=["model_name", "engine"])
        gen.add_metric([d.cfg.model, "0"], eng.generated, created=eng.created)
        yield gen
        if not d.cfg.speculative:
            return
        series: list[tuple[str, _Counts]] = [(d.cfg.model, c) for c in eng.counts]
        names = ["model_name", "engine"]
        fams = {
            "drafts": CounterMetricFamily("vllm:spec_decode_num_drafts",
                                          "Number of spec decoding drafts.", labels=names),
            "draft_tokens": CounterMetricFamily("vllm:spec_decode_num_draft_tokens",
                                                "Number of draft tokens.", labels=names),
            "accepted": CounterMetricFamily("vllm:spec_decode_num_accepted_tokens",
                                            "Number of accepted tokens.", labels=names),
        }
        per_pos = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens_per_pos",
                                      "Accepted tokens per draft position.",
                                      labels=[*names, "position"])
        if d.cfg.other_model:
            other = _Counts(drafts=1000, draft_tokens=3000, accepted=7,
                            per_pos=[5, 2] + [0] * (d.cfg.num_speculative_tokens - 2))
            series.append((d.cfg.other_model, other))
        for n, (model, c) in enumerate(series):
            engine = str(n if model == d.cfg.model else 0)
            for key, fam in fams.items():
                fam.add_metric([model, engine], getattr(c, key), created=eng.created)
            for pos, v in enumerate(c.per_pos):
                per_pos.add_metric([model, engine, str(pos)], v, created=eng.created)
        yield from fams.values()
        yield per_pos


class VllmDouble:
    def __init__(self, cfg: DoubleConfig) -> None:
        self.cfg = cfg
        self.engine = _Engine(cfg)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_SpecCollector(self))  # type: ignore[arg-type]
        self.requests_seen = 0
        self.scrapes = 0
        self.bodies_checked: dict[str, Any] = {"ignore_eos": [], "max_tokens": [], "stream": [],
                                               "temperature": [], "seed": []}

    async def serve(self, port: int) -> asyncio.Server:
        self._engine_task = asyncio.get_running_loop().create_task(self.engine.loop())
        return await asyncio.start_server(self._handle, "127.0.0.1", port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """HTTP/1.1 with keep-alive (streams use chunked transfer encoding, as uvicorn does), so
        the client's connection pool is reused as it is against vLLM."""
        try:
            while True:
                request_line = (await reader.readline()).decode("latin-1").strip()
                if not request_line:
                    return
                method, path, _ = request_line.split(" ", 2)
                headers: dict[str, str] = {}
                while (line := (await reader.readline()).decode("latin-1").strip()):
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                await self._route(method, path.split("?")[0], body, writer)
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(self, method: str, path: str, body: bytes,
                     writer: asyncio.StreamWriter) -> None:
        if method == "GET" and path == "/metrics":
            self.scrapes += 1
            if self.scrapes == self.cfg.restart_at_scrape:
                self.engine.restart()
            text = generate_latest(self.registry)
            if self.cfg.advance_per_scrape:
                c, adv = self.engine.counts[0], self.cfg.advance_per_scrape
                c.drafts += adv["drafts"]
                c.draft_tokens += adv["draft_tokens"]
                c.accepted += adv["accepted"]
                c.per_pos = [a + b for a, b in zip(c.per_pos, adv["per_pos"], strict=True)]
            await _respond(writer, 200, text, "text/plain; version=0.0.4; charset=utf-8")
        elif method == "GET" and path == "/version":
            await _json(writer, 200, {"version": DOUBLE_VERSION})
        elif method == "GET" and path == "/v1/models":
            await _json(writer, 200, {"object": "list", "data": [
                {"id": self.cfg.model, "object": "model", "owned_by": "vllm"}]})
        elif method == "POST" and path == "/v1/chat/completions":
            await self._chat(json.loads(body or b"{}"), writer)
        elif method == "GET" and path == "/_double/state":
            await _json(writer, 200, self.state())
        elif method == "POST" and path == "/_double/counters":
            data = json.loads(body)
            c = self.engine.counts[int(data.get("engine", 0))]
            c.drafts = data["drafts"]
            c.draft_tokens = data["draft_tokens"]
            c.accepted = data["accepted"]
            c.per_pos = list(data["per_pos"])
            await _json(writer, 200, self.state())
        elif method == "POST" and path == "/_double/restart":
            self.engine.restart()
            await _json(writer, 200, self.state())
        else:
            await _json(writer, 404, {"detail": "Not Found"})

    def state(self) -> dict[str, Any]:
        return {
            "config": asdict(self.cfg),
            "counters": [asdict(c) for c in self.engine.counts],
            "requests_seen": self.requests_seen,
            "scrapes": self.scrapes,
            "generated": self.engine.generated,
            "max_running": self.engine.max_running,
            "bodies": self.bodies_checked,
        }

    async def _chat(self, req: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        if req.get("model") != self.cfg.model:
            await _json(writer, 404, {"error": {
                "message": f"The model `{req.get('model')}` does not exist.",
                "type": "NotFoundError", "param": None, "code": 404}})
            return
        index = self.requests_seen
        self.requests_seen += 1
        for key in self.bodies_checked:
            self.bodies_checked[key].append(req.get(key))
        max_tokens = int(req.get("max_tokens") or 16)
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        seq = _Seq(index, max_tokens, asyncio.Queue())
        self.engine.submit(seq)
        rid = f"chatcmpl-double-{index}"
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {"id": rid, "object": "chat.completion.chunk", "created": created,
                    "model": self.cfg.model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                 "finish_reason": finish}]}
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        def send(data: bytes) -> None:
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        try:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                         b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")
            produced = 0
            first = True
            while (n := await seq.queue.get()) is not None:
                if first:
                    send(chunk({"role": "assistant", "content": ""}))
                    first = False
                empty = self.cfg.empty_text_tokens
                text = "".join(f"t{produced + i} " for i in range(n) if produced + i >= empty)
                produced += n
                send(chunk({"content": text}))
                await writer.drain()
            send(chunk({}, "length"))
            if include_usage:
                usage = {"id": rid, "object": "chat.completion.chunk", "created": created,
                         "model": self.cfg.model, "choices": [],
                         "usage": {"prompt_tokens": 10, "completion_tokens": produced,
                                   "total_tokens": 10 + produced}}
                send(b"data: " + json.dumps(usage).encode() + b"\n\n")
            send(b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            seq.cancelled = True
            raise


async def _respond(writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str) -> None:
    reason = {200: "OK", 404: "Not Found"}.get(status, "Error")
    writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\n"
                 f"content-length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()


async def _json(writer: asyncio.StreamWriter, status: int, data: Any) -> None:
    await _respond(writer, status, json.dumps(data).encode(), "application/json")


async def _main(cfg: DoubleConfig, port: int) -> None:
    server = await VllmDouble(cfg).serve(port)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    config = DoubleConfig(**json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}"))
    asyncio.run(_main(config, int(sys.argv[2]) if len(sys.argv) > 2 else 0))

