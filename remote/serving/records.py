"""A vLLM server running on the box, as the console that started it knew it, and its record.

Once a server answers, what the console knows of it (URL, model, pid, seconds to start) is
written beside the job's own record on the box (`<run dir>/served.json`), so a console opened
later (`console serve status`, the TUI on connect) shows the server as the console that started
it did: the box keeps the truth, not the laptop's memory. A job without the record (an older
console, or one that quit while the engine loaded) is read from its command line instead.
"""

from __future__ import annotations

import json
import math
import posixpath
import tempfile
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import httpx

from remote.bench.reach import forwarded, parse_vllm_url
from remote.errors import RemoteError, UsageError
from remote.jobs.records import RunInfo
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.pipeline_runner import argv_value
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.sanitize import visible


def first_model(resp: httpx.Response) -> str:
    """The first model of a /v1/models answer ("" when it is not the list vLLM answers)."""
    try:
        return str(resp.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        return ""


@dataclass(frozen=True)
class Served:
    role: str
    url: str  # as seen from the box (what the bench forwards to)
    run_id: str
    seconds: float | None  # from launch until it answered (None: not known to this console)
    model: str = ""  # the served model's name (/v1/models)
    pid: int | None = None  # the server's pid on the box (the job's: vLLM replaces the runner)
    ready: bool = True  # False: the job runs but no console has seen it answer yet
    # What it speculates with (`serve start --draft`): pipeline, none, ngram or a head
    # directory on the box; "" when not known (a server started before drafts, or found
    # without its record). k: num_speculative_tokens asked for (None: the draft's own).
    draft: str = ""
    k: int | None = None

    def event_fields(self) -> dict[str, object]:
        fields: dict[str, object] = {"role": self.role, "url": self.url, "run_id": self.run_id,
                                     "model": self.model, "pid": self.pid}
        if self.draft:
            fields["draft"] = self.draft
        if self.k is not None:
            fields["k"] = self.k
        return fields

    def draft_text(self) -> str:
        """`draft ngram, K=3`, or "" when not known."""
        if not self.draft:
            return ""
        return f"draft {self.draft}" + (f", K={self.k}" if self.k is not None else "")

    def line(self) -> str:
        """One line for `serve status` and the start's message."""
        parts = [f"job {self.run_id}"]
        if self.pid is not None:
            parts.append(f"pid {self.pid}")
        if self.model:
            parts.append(f"model {self.model}")
        if self.draft_text():
            parts.append(self.draft_text())
        if self.seconds is not None:
            parts.append(f"answered after {self.seconds:.0f} s")
        state = "" if self.ready else " (starting: not answering yet)"
        return f"{self.role} server at {self.url}{state}: {', '.join(parts)}"


RECORD_NAME = "served.json"  # in the serve job's run directory, beside the helper's files


def url_from_argv(argv: list[str], host: HostConfig) -> str:
    """Where a serve job listens, from its own command line (`--bind H --port P`): the URL a
    console without its record shows. The host's vllm_url when it names the same place (its
    scheme and path kept), else plain http."""
    bind, port = argv_value(argv, "--bind"), argv_value(argv, "--port")
    if not bind or not port.isdigit():
        return ""
    with suppress(UsageError):
        url = parse_vllm_url(host.vllm_url)
        if (url.host, url.port) == (bind, int(port)):
            return str(url)
    return f"http://{bind}:{port}"


def draft_from_argv(argv: list[str]) -> tuple[str, int | None]:
    """What a serve job speculates with, from its own command line (`--draft=D`, `--k=K`,
    `--baseline`): ("", None) for a job started before drafts (no --draft: the pipeline's)."""
    if "--baseline" in argv:
        return "none", None
    draft, k = "", None
    for word in argv:
        if word == "--":
            break
        if word.startswith("--draft="):
            draft = word[len("--draft="):]
        elif word.startswith("--k=") and word[4:].isdigit():
            k = int(word[4:])
    return draft, k


def record_path(info: RunInfo) -> str:
    return posixpath.join(posixpath.dirname(info.log_path), RECORD_NAME)


async def write_record(transport: Transport, bus: EventBus, host: str, info: RunInfo,
                       served: Served) -> None:
    """served.json in the job's run directory (written whole, then renamed by put): what a
    later console reads back. A box that refuses the write loses only that: said once."""
    record = {"role": served.role, "url": served.url, "run_id": served.run_id,
              "model": served.model, "pid": served.pid, "seconds": served.seconds,
              "draft": served.draft, "k": served.k}
    try:
        with tempfile.TemporaryDirectory(prefix="eagle3-served-") as tmp:
            local = Path(tmp) / RECORD_NAME
            local.write_text(json.dumps(record) + "\n", encoding="utf-8")
            await transport.put(local, record_path(info))
    except (OSError, RemoteError) as exc:
        bus.emit(ev.CONSOLE_WARNING, host, message=f"{served.role} server: its record "
                 f"{record_path(info)} was not written ({exc}); a console opened later shows "
                 "it without its model and start time")


RECORD_MAX_BYTES = 64 << 10  # served.json is ~200 B: a bigger one is not read whole
TEXT_MAX = 200  # a model name or role longer than this is cut where it is shown
PID_MAX = 1 << 22  # Linux's largest pid (pid_max's ceiling)


def _text(value: object, limit: int = TEXT_MAX) -> str:
    text = visible(str(value))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def parse_record(text: str, info: RunInfo) -> Served | None:
    """What served.json says, each field only of its type (issue 48 row 6: a box wrote
    `"pid": 1e400` and serve status crashed; NaN or negative seconds were shown as a start
    time; a 10 MB model name was printed and recorded whole): a pid outside 2..PID_MAX is the
    job's own, seconds that are not a finite number >= 0 are unknown, text is drawn safe and
    cut. None when it is not the record this module writes."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("role"), str) \
            or not isinstance(data.get("url"), str):
        return None
    seconds = data.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not math.isfinite(seconds) or seconds < 0:
        seconds = None
    pid = data.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 1 < pid <= PID_MAX:
        pid = info.pid
    k = data.get("k")  # draft and k: absent from a record written before drafts (#49)
    if isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= 1024:
        k = None
    return Served(role=_text(data["role"], 40), url=_text(data["url"], 2000), run_id=info.run_id,
                  seconds=float(seconds) if seconds is not None else None,
                  model=_text(data.get("model") or ""), pid=pid,
                  draft=_text(data.get("draft") or "", 4096), k=k)


async def read_record(transport: Transport, info: RunInfo) -> Served | None:
    """The served.json of a running serve job, None without one (or with another file there).
    Its first RECORD_MAX_BYTES only: a record is a few hundred bytes."""
    done = await transport.run(["head", "-c", str(RECORD_MAX_BYTES), record_path(info)],
                               timeout=60)
    if done.returncode != 0:
        return None
    return parse_record(done.stdout, info)


async def answering(transport: Transport, host: HostConfig, url: str) -> str | None:
    """The model the server at `url` serves, None when it does not answer (yet)."""
    parse_vllm_url(url)  # a URL that is not one is the caller's error, not a silent server
    try:
        async with forwarded(transport, url, is_local=host.is_local) as (_, local), \
                httpx.AsyncClient(base_url=local, timeout=5.0) as http:
            resp = await http.get("/v1/models")
            return first_model(resp) if resp.status_code == 200 else None
    except (OSError, RemoteError, httpx.HTTPError):
        return None
