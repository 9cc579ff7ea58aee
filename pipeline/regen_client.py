"""One chat request to a vLLM OpenAI server, for regeneration (pipeline/regenerate.py), in the
standard library alone: prepare runs in whatever python the box has (the box environment, a
container's), and every vLLM server speaks this API (`/v1/models`, `/v1/chat/completions`).

A request the server refuses (HTTP 4xx/5xx: a prompt past its context, a bad parameter) or one
that outlasts its time limit is `RequestRefused` with the reason: one conversation skipped, the run goes
on. A server that stops answering at all (connection refused or reset) is a PipelineError: every
later request would fail the same way, so counting them as skipped would hide a dead server.

Thinking: vLLM returns it beside the answer (`reasoning_content`, renamed `reasoning` in later
releases) when the server runs a reasoning parser, else inline as `<think>...</think>` in the
content. `turn_of` keeps it in the form the target's chat template renders (the template's own
`reasoning_content` field where it reads one, else the inline span the target wrote), or drops it.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pipeline.errors import PipelineError, RequestRefused

THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)


@dataclass(frozen=True)
class Reply:
    content: str
    reasoning: str  # "" when the server returned none separately
    completion_tokens: int


# Where a vLLM server's OpenAI API answers under its base URL. The URL form is owned here: the
# pipeline keeps a server's address as its base URL (`base_url`: a user's data.vllm_url may be
# written either way) and adds the API's root only where a request or a tool is pointed at it
# (`api_url`), the servers it starts itself included (pipeline/stages/extract_server.py
# `loopback_server`).
API = "/v1"


def base_url(url: str) -> str:
    """`http://host:port` from a URL given with or without `/v1` and a trailing slash."""
    return url.rstrip("/").removesuffix(API)


def api_url(url: str) -> str:
    """`http://host:port/v1` (what speculators' `--endpoint` and `--vllm-endpoint` take) from a
    URL given either way."""
    return base_url(url) + API


_LOCAL = threading.local()  # each thread's kept-alive connection to the server


def _connection(url: str, timeout: float) -> http.client.HTTPConnection:
    """This thread's connection to `url`'s server, kept alive across requests, as pooled
    clients do (urllib opens a new TCP connection for every request)."""
    parts = urlsplit(url)
    key = (parts.scheme, parts.hostname, parts.port)
    conn = getattr(_LOCAL, "conns", {}).get(key)
    if conn is None:
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
        _LOCAL.__dict__.setdefault("conns", {})[key] = conn
    conn.timeout = timeout
    if conn.sock is not None:
        conn.sock.settimeout(timeout)
    return conn


def _drop(url: str) -> None:
    parts = urlsplit(url)
    conn = getattr(_LOCAL, "conns", {}).pop((parts.scheme, parts.hostname, parts.port), None)
    if conn is not None:
        conn.close()


def _open(method: str, url: str, body: bytes | None, timeout: float) -> Any:
    """The JSON answer of one request; RequestRefused for an HTTP error or a timeout, PipelineError for
    a server that does not answer. A kept-alive connection the server closed is retried once."""
    path = urlsplit(url).path or "/"
    for attempt in (0, 1):
        conn = _connection(url, timeout)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        except TimeoutError:
            _drop(url)
            raise RequestRefused(f"timed out after {timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            _drop(url)
            if attempt == 0 and isinstance(exc, (http.client.RemoteDisconnected, BrokenPipeError,
                                                 ConnectionResetError)):
                continue  # the server closed an idle kept-alive connection
            raise PipelineError(f"the vLLM server at {base_url(url)} stopped answering: "
                                f"{type(exc).__name__}: {exc}") from None
        if resp.status >= 400:
            raise RequestRefused(f"HTTP {resp.status}: {_error_text(data, resp.reason)}")
        try:
            return json.loads(data)
        except ValueError:
            raise RequestRefused(f"HTTP {resp.status}: not JSON: {data[:200]!r}") from None
    raise AssertionError("not reached")


def _error_text(body: bytes, reason: str) -> str:
    """The server's own message (OpenAI error JSON), on one line, cut short."""
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
        err = data.get("error", data) if isinstance(data, dict) else data
        text = str(err.get("message", err) if isinstance(err, dict) else err)
    except ValueError:
        text = text or reason
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def model_id(url: str, timeout: float = 30) -> str:
    """The model the server serves (the first of `/v1/models`)."""
    try:
        data = _open("GET", api_url(url) + "/models", None, timeout)
    except RequestRefused as exc:
        raise PipelineError(f"the vLLM server at {url} did not list its model: "
                            f"{exc.reason}") from None
    models = data.get("data") if isinstance(data, dict) else None
    if not models or not isinstance(models[0], dict) or "id" not in models[0]:
        raise PipelineError(f"the vLLM server at {url} lists no model: {str(data)[:200]}")
    return str(models[0]["id"])


def chat(url: str, model: str, messages: list[dict[str, str]], sampling: dict[str, Any],
         timeout: float) -> Reply:
    """One chat completion; `sampling` is the request's max_tokens, temperature, top_p, seed."""
    body = json.dumps({"model": model, "messages": messages, **sampling}).encode()
    data = _open("POST", api_url(url) + "/chat/completions", body, timeout)
    try:
        choice = data["choices"][0]
        msg = choice["message"]
        content = msg.get("content") or ""
        reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
        tokens = int((data.get("usage") or {}).get("completion_tokens") or 0)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):
        raise RequestRefused(f"unexpected answer: {json.dumps(data)[:200]}") from None
    return Reply(content=str(content), reasoning=str(reasoning), completion_tokens=tokens)


def strip_thinking(text: str) -> str:
    """`text` without its `<think>` spans (an unclosed one runs to the end)."""
    return THINK.sub("", text).strip()


def turn_of(reply: Reply, *, keep_thinking: bool, template_reads_reasoning: bool
            ) -> dict[str, str]:
    """The assistant turn to store: thinking kept in the form the chat template renders, or
    dropped. A template that reads `reasoning_content` renders it its own way; any other
    template sees the thinking where the target wrote it, inline before the answer."""
    content = reply.content.strip()
    if not keep_thinking:
        return {"role": "assistant", "content": strip_thinking(content)}
    if not reply.reasoning:
        return {"role": "assistant", "content": content}
    if template_reads_reasoning:
        return {"role": "assistant", "content": content,
                "reasoning_content": reply.reasoning.strip()}
    return {"role": "assistant",
            "content": f"<think>\n{reply.reasoning.strip()}\n</think>\n\n{content}"}


def history_turn(turn: dict[str, str]) -> dict[str, str]:
    """A turn as sent back to the server in a later request: role and answer, thinking left
    out (what reasoning targets' templates do with earlier turns' thinking)."""
    content = turn.get("content", "")
    if turn.get("role") == "assistant":
        content = strip_thinking(content)
    return {"role": turn.get("role", ""), "content": content}
