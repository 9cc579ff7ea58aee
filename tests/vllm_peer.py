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

Each client's result file keeps every request's TTFT, latency and output tokens (vLLM's with
--save-detailed, the console's always), so request i of one run sits beside request i of the
other (`per_request`): the same prompt, the same tokens. A figure compared request by request
(Alternating.paired_ratio) is the median over many such pairs, where a stall moves only the
requests it hit; a request either client saw arrive in one burst is left out and counted
(Timed.streamed: it timed the stall, not the client).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


class VllmPeer:
    """vLLM's own client kept loaded (tests/vllm_bench_driver.py, with the box environment's
    python): each `run` is one `vllm bench serve` with the arguments `vllm_bench` passes, its
    --save-result file read back. Importing vLLM costs 45 s here; alternating pairs pay it
    once."""

    def __init__(self, python: Path) -> None:
        driver = Path(__file__).with_name("vllm_bench_driver.py")
        self.proc = subprocess.Popen([str(python), str(driver)], env={**run_env(),
                                     "PYTHONUNBUFFERED": "1"}, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._ready = False  # it imports vLLM meanwhile: the first run waits for it

    def _until(self, what: str) -> str:
        seen: list[str] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            seen.append(line)
            if line.startswith("@@peer "):
                word = line.split()[1]
                if word == what:
                    return "".join(seen)
                raise AssertionError("vllm bench serve " + line[7:].strip() + ":\n"
                                     + "".join(seen[-30:]))
        raise AssertionError(f"vLLM's bench client exited {self.proc.wait()}:\n"
                             + "".join(seen[-30:]))

    def run(self, s: PeerSettings, prompts: Path, out_dir: Path, name: str) -> dict[str, Any]:
        argv = _vllm_argv(Path("python"), s, prompts, out_dir, name)[3:]  # after `vllm bench serve`
        if not self._ready:
            self._until("ready")
            self._ready = True
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        output = self._until("done")
        return _vllm_result(0, output, out_dir, name)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the driver's loop ends: it exits by itself
        end_process(self.proc, grace_s=30, terminate=False)


@dataclass
class Alternating:
    """`pairs` runs of each client, one client at a time (never both at once: two clients on
    one server share its steps and each slows the other, which read 0.7-7x when tried), the
    order swapped every pair (vLLM first, then the console first, ...), so a machine whose
    speed drifts weighs on both alike. Each run's figures are its own medians (p50 over its
    requests). A figure's ratio is the median over the pairs of each pair's console/vLLM ratio:
    a pair's two runs share the machine's moment, while the machine's speed drifts between
    pairs (TTFT p50 of one client read 14 ms in one pair and 22 ms two pairs later), so the
    per-client medians over the pairs would compare different moments."""

    console: list[dict[str, Any]] = field(default_factory=list)  # the console's runs
    vllm: list[dict[str, Any]] = field(default_factory=list)  # vLLM's result files

    def figures(self) -> dict[str, tuple[float, float]]:
        """name -> (console, vLLM): the median over the runs of each run's figure."""
        runs = [figures(c, v) for c, v in zip(self.console, self.vllm, strict=True)]
        return {name: (statistics.median(r[name][0] for r in runs),
                       statistics.median(r[name][1] for r in runs)) for name in runs[0]}

    def pair_ratios(self, name: str) -> list[float]:
        return [c / v if v else float("inf") for c, v in (
            figures(a, b)[name] for a, b in zip(self.console, self.vllm, strict=True))]

    def ratio(self, name: str) -> float:
        """The median over the pairs of console/vLLM for `name`."""
        return statistics.median(self.pair_ratios(name))

    def requests(self) -> list[tuple[Timed, Timed]]:
        """(console_i, vLLM_i) for every request i of every pair."""
        return [both for ours, theirs in zip(self.console, self.vllm, strict=True)
                for both in per_request(ours, theirs)]

    def streamed(self) -> list[tuple[Timed, Timed]]:
        """The requests both clients saw streaming (Timed.streamed, BURST_S)."""
        return [(c, v) for c, v in self.requests() if c.streamed and v.streamed]

    def request_ratios(self, name: str) -> list[float]:
        """console_i / vLLM_i for `name` (in PER_REQUEST) over the requests both clients saw
        streaming."""
        return [cf / vf for c, v in self.streamed()
                if (cf := c.figure(name)) is not None and (vf := v.figure(name))]

    def paired_ratio(self, name: str) -> float:
        """The median of request_ratios: the figure set against the issue's 15 % (the slow
        test prints it; its docstring says what a stall can and cannot move)."""
        return statistics.median(self.request_ratios(name))


def compare(python: Path, s: PeerSettings, eval_prompts: Path, out_dir: Path, pairs: int,
            meanwhile: Callable[[Path], None] | None = None) -> Alternating:
    """`pairs` alternating pairs of both clients over the prompt set's single-turn prompts
    (`eval_prompts`: the demo's eval.jsonl), vLLM's client loaded once; `meanwhile(prompts)`
    runs while it imports vLLM."""
    prompts = single_turn_prompts(eval_prompts, out_dir / "prompts.jsonl")
    peer = VllmPeer(python)
    try:
        if meanwhile is not None:
            meanwhile(prompts)
        return alternating(peer, s, prompts, out_dir, "pair", pairs)
    finally:
        peer.close()


def report(runs: Alternating) -> tuple[list[str], float]:
    """The lines that say each pair's ratios, then each figure's console/vLLM ratio; and the
    ratio furthest from 1. TTFT, TPOT and E2E p50: the median over all requests of the
    paired per-request ratios (Alternating.paired_ratio); the other figures: the median over
    the pairs of each pair's ratio (Alternating.ratio)."""
    lines = []
    for i, (ours, theirs) in enumerate(zip(runs.console, runs.vllm, strict=True)):
        pair = figures(ours, theirs)
        lines.append(f"pair {i} ({'vllm first' if i % 2 == 0 else 'console first'}): "
                     + ", ".join(f"{name} {c / v:.2f}" for name, (c, v) in pair.items() if v))
    pairs = runs.requests()
    lines.append(f"requests seen streaming by both clients: {len(runs.streamed())} of "
                 f"{len(pairs)} (in one burst: console {sum(not c.streamed for c, _ in pairs)}, "
                 f"vllm {sum(not v.streamed for _, v in pairs)}; Timed.streamed)")
    worst = 1.0
    paired = {f"{name} p50": name for name in PER_REQUEST}
    for name, (c, v) in runs.figures().items():
        if name in paired:
            ratios = runs.request_ratios(paired[name])
            ratio = statistics.median(ratios)
            how = (f"median of {len(ratios)} streamed requests' paired ratios, IQR "
                   f"{_quantile(ratios, 0.25):.2f}-{_quantile(ratios, 0.75):.2f}; "
                   f"median of the pairs' ratios {runs.ratio(name):.3f}")
        else:
            ratio = runs.ratio(name)
            how = "median of the pairs' ratios"
        if abs(ratio - 1) > abs(worst - 1):
            worst = ratio
        lines.append(f"{name}: console/vllm {ratio:.3f} ({how}; medians: console {c:.6g}, "
                     f"vllm {v:.6g})")
    return lines, worst


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def alternating(peer: VllmPeer, s: PeerSettings, prompts: Path, out_dir: Path, name: str,
                pairs: int) -> Alternating:
    """Both clients over the same prompts, alternately (Alternating says why)."""
    done = Alternating()
    for i in range(pairs):
        order = ("vllm", "console") if i % 2 == 0 else ("console", "vllm")
        for who in order:
            if who == "vllm":
                done.vllm.append(peer.run(s, prompts, out_dir, f"{name}-{i}-vllm"))
            else:
                done.console.append(console_bench(s, prompts, out_dir, f"{name}-{i}-console"))
    return done


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


# The figures compared request by request (Alternating.paired_ratio).
PER_REQUEST = ("TTFT", "TPOT", "E2E")


def per_request(console_run: dict[str, Any], vllm: dict[str, Any]) -> list[tuple[Timed, Timed]]:
    """(console_i, vLLM_i) for the requests in the order sent that neither failed. The
    console's result file keeps each request's TTFT, latency and tokens (Point.ttfts, ...), as
    `vllm bench serve --save-detailed` keeps its own (`ttfts`, `latencies`, `output_lens`). Both
    sent prompt row i as request i (vllm_rows, --disable-shuffle), greedy with ignore_eos:
    request i decodes the same tokens on both sides, which the output tokens confirm."""
    (point,) = console_run["points"]
    ours = list(zip(point["ttfts"], point["latencies"], point["output_lens"], strict=True))
    theirs = list(zip(vllm["ttfts"], vllm["latencies"], vllm["output_lens"], strict=True))
    if [o[2] for o in ours] != [t[2] for t in theirs]:
        raise AssertionError(f"the two runs' requests differ: output tokens "
                             f"{[o[2] for o in ours]} vs {[t[2] for t in theirs]}")
    return [(Timed(float(c_ttft), float(c_lat), n), Timed(float(v_ttft), float(v_lat), n))
            for (c_ttft, c_lat, n), (v_ttft, v_lat, _) in zip(ours, theirs, strict=True)
            if c_ttft is not None and c_lat is not None and v_ttft]  # failed: no figure
