"""`vllm bench serve` (vLLM's own client, the box environment's `vllm`) and `console bench run`
on the same server and prompts: shared by the slow test that holds them equal
(tests/remote/bench/test_bench_vs_vllm.py) and benchmarks/bench_vs_vllm.py.

Both clients get the same single-turn prompts in the same order, greedy, a fixed output length
(ignore_eos), one warm-up request and the same concurrency; each reads the spec-decode
counters before and after its own window. The console is pointed at the server directly (a
host without ssh), as vLLM's client is: a port forward would add its round trip to one side.
vLLM's custom dataset renders a prompt with the chat template unless told not to, and its chat
backend sends the text as the user turn: `--skip-chat-template` keeps the template to the
server, as the console does.

The timings are compared request by request, interleaved (`interleaved`, Interleaved):
request i by one client, at once request i by the other, the order swapped every i, so the two
timings of a pair share the machine's moment. Each client is kept loaded in a process of its
own and runs its own code per request: vLLM's the request function and counter scrape of
`vllm bench serve` (tests/vllm_bench_driver.py; a whole invocation per request would cost more
than the request, `invocation_overhead`), the console's `console bench run`'s driver, a point
of one request (tests/console_bench_driver.py). Each reads the spec-decode counters over its
own window (the one request), so the acceptance of each request is compared too. The whole
commands are still run once each (the slow test: `vllm` itself, and `console bench compare`
on their result files).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote.bench.driver import percentile
from remote.bench.prompts import PromptSet, load_prompts
from tests.box_env import run_env
from tests.child_process import end_process

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class PeerSettings:
    url: str  # the server, e.g. http://127.0.0.1:8000
    model: str  # the served model's name (also its tokenizer: a path on this machine)
    requests: int = 8
    concurrency: int = 1
    max_tokens: int = 24
    warmups: int = 1


def single_turn_prompts(source: Path, dest: Path) -> Path:
    """The prompt set's last user turns as `{"prompt": text}` rows: the one shape both clients
    read (vLLM's custom dataset takes a single prompt per row)."""
    prompts: PromptSet = load_prompts(source)
    rows = [next(t["content"] for t in reversed(conv) if t["role"] == "user")
            for conv in prompts.conversations]
    dest.write_text("".join(json.dumps({"prompt": r}) + "\n" for r in rows))
    return dest


def vllm_rows(prompts: Path, n: int, dest: Path) -> Path:
    """`n` rows cycled from `prompts` (vLLM oversamples a short file at random; the console
    cycles it in order): both then send row i as request i."""
    rows = [ln for ln in prompts.read_text().splitlines() if ln.strip()]
    dest.write_text("".join(rows[i % len(rows)] + "\n" for i in range(n)))
    return dest


def _vllm_argv(python: Path, s: PeerSettings, prompts: Path, out_dir: Path,
               name: str) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = vllm_rows(prompts, s.requests, out_dir / f"{name}.prompts.jsonl")
    return [str(python.parent / "vllm"), "bench", "serve", "--backend", "openai-chat",
            "--base-url", s.url, "--endpoint", "/v1/chat/completions", "--model", s.model,
            "--tokenizer", s.model, "--dataset-name", "custom", "--dataset-path", str(rows),
            "--skip-chat-template", "--disable-shuffle", "--num-prompts", str(s.requests),
            "--custom-output-len", str(s.max_tokens), "--ignore-eos", "--temperature", "0",
            "--max-concurrency", str(s.concurrency), "--num-warmups", str(s.warmups),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            "--save-result", "--save-detailed", "--result-dir", str(out_dir), "--result-filename",
            f"{name}.json", "--metadata", f"max_tokens={s.max_tokens}", "--disable-tqdm"]


def _vllm_result(rc: int, output: str, out_dir: Path, name: str) -> dict[str, Any]:
    if rc != 0:
        raise AssertionError(f"vllm bench serve exited {rc}:\n"
                             + "\n".join(output.splitlines()[-30:]))
    return dict(json.loads((out_dir / f"{name}.json").read_text()))


def vllm_bench(python: Path, s: PeerSettings, prompts: Path, out_dir: Path,
               name: str) -> dict[str, Any]:
    """`vllm bench serve` against `s.url`, alone; its --save-result file (read back as JSON)."""
    argv = _vllm_argv(python, s, prompts, out_dir, name)
    done = subprocess.run(argv, env=run_env(), capture_output=True, text=True, timeout=900)
    return _vllm_result(done.returncode, done.stderr + done.stdout, out_dir, name)



class _Peer:
    """A client kept loaded in a process of its own that answers `@@peer WORD ...` lines."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, cwd=REPO, env={**(env or os.environ),
                                     "PYTHONUNBUFFERED": "1"}, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def _until(self, what: str) -> str:
        """The output up to the line `@@peer WHAT ...` (that line last)."""
        seen: list[str] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            seen.append(line)
            if line.startswith("@@peer "):
                word = line.split()[1]
                if word == what:
                    return "".join(seen)
                raise AssertionError(f"{self.name} {line[7:].strip()}:\n" + "".join(seen[-30:]))
        raise AssertionError(f"{self.name} exited {self.proc.wait()}:\n" + "".join(seen[-30:]))

    name = "the peer"

    def send(self, command: object, answer: str = "result") -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._until(answer)

    def result(self, command: object) -> dict[str, Any]:
        last = self.send(command).rstrip("\n").rsplit("\n", 1)[-1]
        return dict(json.loads(last.split(" ", 2)[2]))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the driver's loop ends: it exits by itself
        end_process(self.proc, grace_s=30, terminate=False)


class VllmPeer(_Peer):
    """vLLM's own client kept loaded (tests/vllm_bench_driver.py, with the box environment's
    python): `run` is one `vllm bench serve` with the arguments `vllm_bench` passes, its
    --save-result file read back; `open` and `request` send requests one at a time through the
    command's own request function. Importing vLLM costs 45 s here; it is paid once."""

    name = "vllm bench serve"

    def __init__(self, python: Path) -> None:
        super().__init__([str(python), str(Path(__file__).with_name("vllm_bench_driver.py"))],
                         run_env())
        self._ready = False  # it imports vLLM meanwhile: the first command waits for it

    def _wait_ready(self) -> None:
        if not self._ready:
            self._until("ready")
            self._ready = True

    def run(self, s: PeerSettings, prompts: Path, out_dir: Path, name: str) -> dict[str, Any]:
        argv = _vllm_argv(Path("python"), s, prompts, out_dir, name)[3:]  # after `vllm bench serve`
        self._wait_ready()
        return _vllm_result(0, self.send(argv, "done"), out_dir, name)

    def open(self, s: PeerSettings, rows: list[str]) -> None:
        self._wait_ready()
        self.result({"open": {"url": s.url, "model": s.model, "prompts": rows,
                              "max_tokens": s.max_tokens, "warmups": s.warmups}})

    def request(self, i: int) -> dict[str, Any]:
        return self.result({"request": {"i": i}})


class ConsolePeer(_Peer):
    """`console bench run`'s driver kept loaded (tests/console_bench_driver.py, this python):
    check_server and the warm-up once, then run_point per request."""

    name = "console bench run"

    def __init__(self, s: PeerSettings, prompts: Path) -> None:
        super().__init__([sys.executable, "-m", "tests.console_bench_driver", s.url, s.model,
                          str(prompts), str(s.max_tokens), str(s.warmups)])
        self._until("ready")

    def request(self, i: int) -> dict[str, Any]:
        return self.result(i)


@dataclass
class Interleaved:
    """Both clients request by request: request i by one client, at once request i by the
    other, the order swapped every i (vLLM first on even i), one at a time (never both at
    once: two clients on one server share its steps and each slows the other, which read
    0.7-7x when tried). The two timings of a pair are a request's length apart (a few hundred
    ms), where whole runs one after the other were seconds apart and the machine's speed
    drifts over seconds (one pair of whole runs read TTFT ratios 0.38-2.15 across its
    requests). A figure's ratio is the median over the pairs of console_i / vLLM_i, leaving
    out (and counting) the pairs either client saw arrive in one burst (Timed.streamed)."""

    console: list[dict[str, Any]] = field(default_factory=list)  # each request's answer
    vllm: list[dict[str, Any]] = field(default_factory=list)
    overhead_s: float | None = None  # one whole `vllm bench serve --num-prompts 1`, less its request

    def requests(self) -> list[tuple[Timed, Timed]]:
        """(console_i, vLLM_i) for the requests neither client failed; request i decodes the
        same tokens on both sides (greedy, ignore_eos), which the output tokens confirm."""
        out = []
        for c, v in zip(self.console, self.vllm, strict=True):
            if not (c["ok"] and v["ok"]):
                continue  # failed: no figure
            if c["tokens"] != v["tokens"]:
                raise AssertionError(f"the two clients' requests differ: output tokens "
                                     f"{c['tokens']} vs {v['tokens']}")
            out.append((Timed(float(c["ttft"]), float(c["latency"]), int(c["tokens"])),
                            Timed(float(v["ttft"]), float(v["latency"]), int(v["tokens"]))))
        return out

    def streamed(self) -> list[tuple[Timed, Timed]]:
        """The requests both clients saw streaming (Timed.streamed, BURST_S)."""
        return [(c, v) for c, v in self.requests() if c.streamed and v.streamed]

    def request_ratios(self, name: str) -> list[float]:
        """console_i / vLLM_i for `name` (in PER_REQUEST) over the requests both clients saw
        streaming."""
        return [cf / vf for c, v in self.streamed()
                if (cf := c.figure(name)) is not None and (vf := v.figure(name))]

    def paired_ratio(self, name: str) -> float:
        """The median of request_ratios: the figure the slow test holds within 15 %."""
        return statistics.median(self.request_ratios(name))

    def acceptance(self) -> tuple[dict[str, int], dict[str, int]]:
        """Each client's counters summed over its own windows (one request each)."""
        def summed(side: list[dict[str, Any]]) -> dict[str, int]:
            return {k: sum(int((r["acceptance"] or {}).get(k) or 0) for r in side)
                    for k in ("drafts", "draft_tokens", "accepted")}

        return summed(self.console), summed(self.vllm)


def interleaved(vllm: VllmPeer, s: PeerSettings, prompts: Path, pairs: int) -> Interleaved:
    """`pairs` requests by each client, interleaved (Interleaved says how)."""
    rows = [json.loads(ln)["prompt"] for ln in prompts.read_text().splitlines() if ln.strip()]
    vllm.open(s, rows)
    console = ConsolePeer(s, prompts)
    try:
        done = Interleaved()
        for i in range(pairs):
            for who in ("vllm", "console") if i % 2 == 0 else ("console", "vllm"):
                if who == "vllm":
                    done.vllm.append(vllm.request(i))
                else:
                    done.console.append(console.request(i))
        return done
    finally:
        console.close()


def invocation_overhead(vllm: VllmPeer, s: PeerSettings, prompts: Path, out_dir: Path) -> float:
    """What one `vllm bench serve --num-prompts 1` (the command's code, vLLM already imported)
    costs beyond its request: the price per request of interleaving whole invocations."""
    one = dataclasses.replace(s, requests=1)
    vllm._wait_ready()  # vLLM's import is not the invocation's
    t0 = time.perf_counter()
    result = vllm.run(one, prompts, out_dir, "one-invocation")
    return time.perf_counter() - t0 - float(result["latencies"][0])


def compare(python: Path, s: PeerSettings, eval_prompts: Path, out_dir: Path, pairs: int,
            meanwhile: Callable[[Path], None] | None = None) -> Interleaved:
    """`pairs` interleaved requests by both clients over the prompt set's single-turn prompts
    (`eval_prompts`: the demo's eval.jsonl), vLLM's client loaded once; `meanwhile(prompts)`
    runs while it imports vLLM."""
    prompts = single_turn_prompts(eval_prompts, out_dir / "prompts.jsonl")
    peer = VllmPeer(python)
    try:
        if meanwhile is not None:
            meanwhile(prompts)
        overhead = invocation_overhead(peer, s, prompts, out_dir)
        runs = interleaved(peer, s, prompts, pairs)
        runs.overhead_s = overhead
        return runs
    finally:
        peer.close()


def report(runs: Interleaved) -> tuple[list[str], float]:
    """The lines that say each figure's console/vLLM ratio, and the ratio furthest from 1.
    TTFT, TPOT and E2E: the median of the paired per-request ratios (Interleaved); p99: the
    ratio of each client's p99 over the streamed requests; acceptance: of the summed windows."""
    pairs = runs.requests()
    streamed = runs.streamed()
    lines = [f"{len(runs.console)} interleaved pairs (request i by one client, then by the "
             "other, the order swapped every i), one at a time at concurrency 1",
             f"requests seen streaming by both clients: {len(streamed)} of {len(pairs)} "
             f"(in one burst: console {sum(not c.streamed for c, _ in pairs)}, vllm "
             f"{sum(not v.streamed for _, v in pairs)}; Timed.streamed)"]
    cpu = [statistics.median(float(r.get("cpu_s") or 0.0) for r in side) * 1000
           for side in (runs.console, runs.vllm)]
    lines.append(f"client CPU per request (scrapes included), median: console {cpu[0]:.1f} ms, "
                 f"vllm {cpu[1]:.1f} ms")
    if runs.overhead_s is not None:
        lines.append(f"one whole `vllm bench serve --num-prompts 1` costs {runs.overhead_s:.2f} s "
                     "beyond its request (why requests go through its request function)")
    worst = 1.0
    for name in PER_REQUEST:
        ratios = runs.request_ratios(name)
        ratio = statistics.median(ratios)
        ours = statistics.median(f for c, _ in streamed if (f := c.figure(name)) is not None)
        theirs = statistics.median(f for _, v in streamed if (f := v.figure(name)) is not None)
        worst = ratio if abs(ratio - 1) > abs(worst - 1) else worst
        lines.append(f"{name} p50: console/vllm {ratio:.3f} (median of {len(ratios)} paired "
                     f"ratios, IQR {_quantile(ratios, 25):.2f}-{_quantile(ratios, 75):.2f}; "
                     f"medians: console {ours:.6g}, vllm {theirs:.6g})")
    for name in ("TTFT", "TPOT"):
        ours = _quantile([f for c, _ in streamed if (f := c.figure(name)) is not None], 99)
        theirs = _quantile([f for _, v in streamed if (f := v.figure(name)) is not None], 99)
        ratio = ours / theirs
        worst = ratio if abs(ratio - 1) > abs(worst - 1) else worst
        lines.append(f"{name} p99: console/vllm {ratio:.3f} (console {ours:.6g}, vllm "
                     f"{theirs:.6g})")
    ours_acc, theirs_acc = runs.acceptance()
    for name, key in (("mean acceptance length", "drafts"), ("acceptance rate", "draft_tokens")):
        c = (1.0 if key == "drafts" else 0.0) + ours_acc["accepted"] / ours_acc[key]
        v = (1.0 if key == "drafts" else 0.0) + theirs_acc["accepted"] / theirs_acc[key]
        worst = c / v if abs(c / v - 1) > abs(worst - 1) else worst
        lines.append(f"{name}: console/vllm {c / v:.3f} (console {c:.4g}, vllm {v:.4g})")
    return lines, worst


def _quantile(values: list[float], q: float) -> float:
    """The q-th percentile as both clients take theirs (numpy's linear: remote/bench/driver.py)."""
    got = percentile(values, q)
    if got is None:
        raise AssertionError("no request both clients saw streaming: nothing to compare")
    return got


def console_bench(s: PeerSettings, prompts: Path, out_dir: Path, name: str) -> dict[str, Any]:
    """`console bench run` against `s.url` from a host without ssh, in a process of its own as
    vLLM's client is (inside pytest's process, whose heap holds the engine and demo fixtures,
    the console's event loop was seen blocked 200-280 ms at p99: TTFT then measured the
    blocking, TPOT read 9 µs); its result file's run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    toml = out_dir / "peer-console.toml"
    toml.write_text(f'[hosts.peer]\nvllm_url = "{s.url}"\nworkdir = "{out_dir / "peer-box"}"\n')
    out = out_dir / f"{name}.json"
    done = subprocess.run(
        [sys.executable, "-m", "console", "bench", "run", "--host", "peer", "--config", str(toml),
         "--concurrency", str(s.concurrency), "--requests", str(s.requests),
         "--max-tokens", str(s.max_tokens), "--warmup", str(s.warmups),
         "--prompts", str(prompts), "--model", s.model, "--out", str(out), "--no-record",
         "--json"], cwd=REPO, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise AssertionError(f"console bench run exited {done.returncode}:\n"
                             + "\n".join((done.stderr + done.stdout).splitlines()[-30:]))
    return dict(json.loads(out.read_text())["run"])


def served_model(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url + "/v1/models", timeout=30) as resp:
        return str(json.loads(resp.read())["data"][0]["id"])

# Each figure: (name, the console point's key, vLLM's result key, vLLM's unit per second).
FIGURES: tuple[tuple[str, str, str, float], ...] = (
    ("TTFT p50", "ttft_p50", "median_ttft_ms", 1000.0),
    ("TTFT p99", "ttft_p99", "p99_ttft_ms", 1000.0),
    ("TPOT p50", "tpot_p50", "median_tpot_ms", 1000.0),
    ("TPOT p99", "tpot_p99", "p99_tpot_ms", 1000.0),
    ("ITL p50", "itl_p50", "median_itl_ms", 1000.0),
    ("E2E p50", "e2el_p50", "median_e2el_ms", 1000.0),
    ("output tok/s", "output_tok_s", "output_throughput", 1.0),
)


def figures(console_run: dict[str, Any], vllm: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """name -> (console, vLLM) in the console's units (seconds, tok/s, acceptance)."""
    (point,) = console_run["points"]
    out = {name: (float(point[key]), float(vllm[vkey]) / unit)
           for name, key, vkey, unit in FIGURES}
    acc = point.get("acceptance") or {}
    if "spec_decode_acceptance_length" in vllm:
        out["mean acceptance length"] = (float(acc["mean_length"]),
                                         float(vllm["spec_decode_acceptance_length"]))
        out["acceptance rate"] = (float(acc["rate"]),
                                  float(vllm["spec_decode_acceptance_rate"]) / 100.0)
    return out


# A stream whose token chunks after the first all came within this span was not seen
# streaming: its reader (or the server's API process) was off the CPU until the answer was
# done, so its TTFT is that stall and its TPOT near zero. A real answer here spans tens of ms
# (a decode step takes 3 ms or more on this CPU engine), so 1 ms cannot cut a streamed one.
BURST_S = 0.001


@dataclass(frozen=True)
class Timed:
    """One request as either client timed it (seconds after its send)."""

    ttft: float
    latency: float
    tokens: int

    @property
    def tpot(self) -> float | None:
        """vLLM's per-request TPOT (serve.py, calculate_metrics)."""
        return (self.latency - self.ttft) / (self.tokens - 1) if self.tokens > 1 else None

    @property
    def streamed(self) -> bool:
        return self.tokens < 2 or self.latency - self.ttft >= BURST_S

    def figure(self, name: str) -> float | None:
        return {"TTFT": self.ttft, "TPOT": self.tpot, "E2E": self.latency}[name]


# The figures compared request by request (Interleaved.paired_ratio).
PER_REQUEST = ("TTFT", "TPOT", "E2E")
