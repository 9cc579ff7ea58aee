"""HTTP to vLLM's OpenAI-compatible server: /metrics, /v1/models and streamed chat requests.

A request's timings are the ones `vllm bench serve` takes (vLLM 0.32,
vllm/benchmarks/lib/endpoint_request_func.py, `async_request_openai_chat_completions`; the
definitions are quoted in docs/measurements.md), so the console's figures and vLLM's own
client agree by definition, not by luck: every stream chunk whose `choices` is non-empty is a
token chunk, whatever its text (the first is the role chunk, and a token that decodes to no
text still is one); TTFT is the first such chunk, ITL the gaps between the following ones, E2E
the last one (the trailing usage chunk is no token), TPOT (E2E - TTFT) / (output tokens - 1).

The streamed requests go through aiohttp, as vLLM's client sends them: through httpx the same
code read TTFT about 3 ms later per request (one process, the two clients' requests in turn
against the vLLM test double: 10.4 ms vs 7.3 ms for vLLM's request function, 7.5 ms through
aiohttp; docs/measurements.md), a cost of the client that a starved CPU multiplies. The plain
GETs (/metrics, /v1/models, /version) take the same session: they are not timed, but /metrics
is read before and after every window (twice a request in a point of one request), and a GET
through httpx cost 3.0 ms of CPU against aiohttp's 0.8 (2026-12-07): CPU the client burns
between requests is time it then waits for a core when its answer arrives (#49's TTFT p99).

Timing is taken on this side of the forward, as a user of the service would see it: TTFT
includes the tunnel's round trip (small on a LAN, visible over a WAN; it cancels out of a
baseline-vs-speculative comparison made over the same tunnel). Tokens are
counted from the final `usage` chunk (`stream_options.include_usage`), not from chunks: with
speculation one chunk often carries several tokens, and counting chunks would hide the speedup.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from remote.bench.metrics import SpecScrape, parse_spec_counters
from remote.errors import MetricsMalformed, NoServer

Messages = list[dict[str, str]]


@dataclass
class RequestResult:
    """One request, timed as `vllm bench serve` times it (seconds after the send)."""

    ok: bool
    error: str | None = None
    ttft: float | None = None  # the first chunk with `choices` (vLLM's TTFT)
    latency: float | None = None  # the last chunk with `choices` (vLLM's E2E latency)
    output_tokens: int = 0
    chunk_times: list[float] = field(default_factory=list)  # every chunk with `choices`
    text_chunks: int = 0  # chunks whose delta carried text: an answer that has none failed

    @property
    def tpot(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1): vLLM's TPOT (serve.py, calculate_metrics),
        undefined for an answer of one token."""
        if self.ttft is None or self.latency is None or self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)

    @property
    def itl(self) -> list[float]:
        """The gaps between successive token chunks after the first (vLLM's ITL): a chunk that
        carries several tokens (speculation) is one gap, as vLLM counts it."""
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]


class VllmClient:
    """One connection pool to one server. `url` is where the requests go (the local end of the
    forward); `shown_url` is the server as the operator configured it, used in messages."""

    def __init__(self, url: str, *, shown_url: str | None = None, timeout: float = 600.0) -> None:
        self.url = url.rstrip("/")
        self.shown_url = (shown_url or url).rstrip("/")
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None  # made in the running loop

    def _streams(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),  # every request of a point at once
                timeout=aiohttp.ClientTimeout(total=None, connect=10.0,
                                              sock_read=self.timeout))
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> VllmClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _no_server(self, exc: Exception) -> NoServer:
        detail = str(exc) or type(exc).__name__
        return NoServer(f"no server at {self.shown_url}: {detail}")

    async def _get(self, path: str) -> tuple[int, str]:
        """(HTTP status, body) of a GET; a server that cannot be reached raises NoServer."""
        try:
            async with self._streams().get(self.url + path) as resp:
                return resp.status, (await resp.read()).decode("utf-8", "replace")
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._no_server(exc) from None

    async def metrics_text(self) -> str:
        status, text = await self._get("/metrics")
        if status != 200:
            raise MetricsMalformed(
                f"{self.shown_url}/metrics answered HTTP {status}: is this a vLLM server?"
            )
        return text

    async def scrape(self) -> SpecScrape:
        return parse_spec_counters(await self.metrics_text(), self.shown_url)

    async def served_models(self) -> list[str]:
        status, text = await self._get("/v1/models")
        if status != 200:
            raise MetricsMalformed(
                f"{self.shown_url}/v1/models answered HTTP {status}: "
                "is this vLLM's OpenAI-compatible server?"
            )
        try:
            data = json.loads(text)
            return [str(m["id"]) for m in data["data"]]
        except (ValueError, KeyError, TypeError):
            raise MetricsMalformed(
                f"{self.shown_url}/v1/models did not answer an OpenAI model list"
            ) from None

    async def server_version(self) -> str | None:
        """vLLM's /version, kept with the results (None when the server has no such route)."""
        status, text = await self._get("/version")
        if status != 200:
            return None
        try:
            version = json.loads(text).get("version")
        except (ValueError, AttributeError):
            return None
        return str(version) if version is not None else None

    async def stream_chat(self, model: str, messages: Messages, max_tokens: int,
                          *, ignore_eos: bool = True, temperature: float = 0.0,
                          seed: int | None = None) -> RequestResult:
        """One streamed request with a fixed output length (ignore_eos). A request that fails is
        reported in the result; a server that cannot be reached at all raises NoServer.
        ignore_eos=False stops at the model's end token, as the pipeline's offline evaluate
        does: acceptance past the end of an answer measures text no one would generate."""
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": max_tokens,
            "ignore_eos": ignore_eos,
            **sampling(temperature, seed),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        t0 = time.perf_counter()
        result = RequestResult(ok=False)
        usage_tokens: int | None = None
        finish_reason: str | None = None
        try:
            async with self._streams().post(self.url + "/v1/chat/completions",
                                            json=body) as resp:
                if resp.status != 200:
                    text = (await resp.read()).decode("utf-8", "replace")
                    result.error = f"HTTP {resp.status}: {_one_line(text)}"
                    return result
                async for raw in resp.content:
                    line = raw.decode("utf-8", "replace").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    # taken before the chunk is parsed, as vLLM's client takes it
                    arrived = time.perf_counter() - t0
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        result.error = f"malformed stream chunk: {_one_line(data)}"
                        return result
                    if not isinstance(chunk, dict):
                        continue
                    if isinstance(chunk.get("usage"), dict):
                        tokens = chunk["usage"].get("completion_tokens")
                        if isinstance(tokens, int):
                            usage_tokens = tokens
                    if "error" in chunk:
                        result.error = f"server error: {_one_line(json.dumps(chunk['error']))}"
                        return result
                    finish_reason = _finish_reason(chunk) or finish_reason
                    if chunk.get("choices"):
                        if result.ttft is None:
                            result.ttft = arrived
                        result.chunk_times.append(arrived)
                        result.latency = arrived
                        if _has_content(chunk):
                            result.text_chunks += 1
        except aiohttp.ClientConnectorError as exc:
            raise self._no_server(exc) from None
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            result.error = f"{type(exc).__name__}: {_one_line(str(exc))}"
            return result
        result.output_tokens = usage_tokens if usage_tokens is not None else result.text_chunks
        if not result.text_chunks and result.output_tokens < 2:
            # vLLM's client counts such a request as a success (its role chunk gives a TTFT);
            # the console fails it and says why: an answer of at most one token (its first
            # its end token) measures no decoding. An answer whose tokens all decode to no
            # text (tokens the server's detokenizer skips, which a tiny target samples at T > 0)
            # did decode: the server's usage counts them, and it stands.
            result.error = _no_content_error(finish_reason, ignore_eos)
            return result
        result.ok = True
        return result


def sampling(temperature: float, seed: int | None) -> dict[str, Any]:
    """A request's sampling parameters. Greedy (temperature 0) needs no seed. Above 0 the
    request names its own `seed` (vLLM's per-request SamplingParams.seed, OpenAI's `seed`
    field): the same prompt with the same seed draws the same tokens, so a rerun, or the same
    request sent to a baseline and to a speculative server, samples alike and the two are
    comparable (speculative decoding keeps the target's distribution; docs/design.md §12).
    top_p 1 is stated, not left to a server default that could differ."""
    if temperature <= 0:
        return {"temperature": 0.0}
    body: dict[str, Any] = {"temperature": temperature, "top_p": 1.0}
    if seed is not None:
        body["seed"] = seed
    return body


def _has_content(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") or {}
        if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")):
            return True
        if choice.get("text"):
            return True
    return False


def _finish_reason(chunk: dict[str, Any]) -> str | None:
    return next((str(choice["finish_reason"]) for choice in chunk.get("choices") or []
                 if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str)), None)


def _no_content_error(finish_reason: str | None, ignore_eos: bool) -> str:
    """Why a request has no TTFT to report. A target whose first token is its end token is
    not a broken server: saying so points the operator at the target (or at --stop-at-eos),
    where "no content" alone reads like a transport fault."""
    if finish_reason == "stop" and not ignore_eos:
        return ("the answer was empty: the model's first token was its end token "
                "(finish_reason stop; the bench stops at EOS)")
    if finish_reason is not None:
        return f"the stream carried no content (finish_reason {finish_reason})"
    return "the stream carried no content"


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
