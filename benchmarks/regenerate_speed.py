"""Regeneration's generation rate beside a plain client, on one real vLLM server (issue 50).

    python benchmarks/regenerate_speed.py [--samples 200] [--concurrency 8] [--max-tokens 32]\
        [--rounds 3]

Builds the demo (pipeline/demo.py) in a temporary directory, starts one vLLM server for its
target with the box environment (scripts/box_env.py), then, in turn and against that server:
1. a plain client: `concurrency` threads of httpx (a pooled, keep-alive HTTP client, nothing else)
   sending prepare's requests (the same training conversations, the same sampling settings and
   per-conversation seeds) and timing the batch;
2. `python -m pipeline prepare` with `regenerate = true` and `vllm_url` = the server, at the
   same concurrency: its rate is its own progress record's (conversations regenerated / the
   seconds from its first request to its last answer; tokenizing and writing the prepare outputs
   afterwards are not generation);
3. 1 and 2 repeated `rounds` times, then 1 once more: each side's mean rate,
   neither measured only first or only last on a shared machine's moving load.
Prints each rate, each prepare run's ratio to the mean of the plain runs beside it, and, last,
`regenerate / plain client: R`, the median of those ratios (goal >= 0.9).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import ROOT, int_options

from pipeline import config as pconfig
from pipeline.progress import parse
from pipeline.stages import PREPARE
from pipeline.stages.prepare import load_conversations
from tests import box_env
from tests.box_env import run_env
from tests.sshd_harness import free_port


def start_server(python: Path, target: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
            "--host", "127.0.0.1", "--port", str(port), "--enforce-eager"]
    return subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            env=run_env(), start_new_session=True)


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    import httpx

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM exited {proc.returncode}: see {log}")
        try:
            if httpx.get(url + "/v1/models", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"vLLM did not answer in 600 s: see {log}")


def train_conversations(cfg_path: Path) -> list[list[dict[str, str]]]:
    """prepare's training conversations, chosen as prepare chooses them."""
    cfg = pconfig.load(cfg_path)
    convs = load_conversations(cfg)
    random.Random(cfg.data.seed).shuffle(convs)
    n_eval = min(cfg.data.eval_samples, max(len(convs) - 1, 0))
    train = convs[n_eval:]
    return train[: cfg.data.samples] if cfg.data.samples else train


def plain_client(url: str, model: str, convs: list[list[dict[str, str]]], concurrency: int,
                 max_tokens: int) -> tuple[float, int]:
    """Conversations/s and completion tokens of one batch, single-turn conversations."""
    import httpx

    client = httpx.Client(base_url=url, timeout=600,
                          limits=httpx.Limits(max_connections=concurrency))

    def one(i: int) -> int:
        first = next(j for j, t in enumerate(convs[i]) if t["role"] == "assistant")
        body = {"model": model, "messages": convs[i][:first], "max_tokens": max_tokens,
                "temperature": 0.0, "top_p": 1.0, "seed": i}
        resp = client.post("/v1/chat/completions", json=body)
        resp.raise_for_status()
        return int(resp.json()["usage"]["completion_tokens"])

    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(one, range(len(convs))))
    seconds = time.monotonic() - t0
    client.close()
    return len(convs) / seconds, tokens


def prepare_rate(cfg: Path) -> tuple[float, int]:
    """prepare's own rate from its last progress record of the regeneration."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pipeline", PREPARE, "--config", str(cfg),
                           "--force"], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"prepare failed: {done.stderr[-2000:]}")
    records = [r for r in map(parse, done.stdout.splitlines()) if r is not None]
    last = [r for r in records if r["type"] == "progress"
            and r.get("unit") == "conversations regenerated"][-1]
    return last["done"] / last["elapsed"], int(last["tokens"])


def main() -> int:
    args = int_options(__doc__.split("\n\n")[0], samples=200, concurrency=8, max_tokens=32,
                       rounds=3)
    python = box_env.ensure("vllm032")
    from pipeline.demo import build_demo

    with tempfile.TemporaryDirectory(prefix="regen-speed-") as tmp:
        root = Path(tmp)
        cfg = build_demo(root / "demo")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        text = cfg.read_text().replace("eval_samples = 8", "\n".join([
            "eval_samples = 8", f"samples = {args.samples}", "regenerate = true",
            f"regenerate_max_new_tokens = {args.max_tokens}",
            f"regenerate_concurrency = {args.concurrency}", f'vllm_url = "{url}"']))
        cfg.write_text(text)
        convs = train_conversations(cfg)
        log = root / "vllm.log"
        proc = start_server(python, root / "demo" / "target", port, log)
        try:
            wait_ready(url, proc, log)
            import httpx

            model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
            plain_client(url, model, convs[:16], args.concurrency, args.max_tokens)  # warm-up
            plain, ours, tokens = [], [], []
            for _ in range(args.rounds):  # plain, prepare, ..., plain: neither side first alone
                rate, tok = plain_client(url, model, convs, args.concurrency, args.max_tokens)
                plain.append(rate)
                rate, tok_r = prepare_rate(cfg)
                ours.append(rate)
                tokens += [tok, tok_r]
            rate, tok = plain_client(url, model, convs, args.concurrency, args.max_tokens)
            plain.append(rate)
            tokens.append(tok)
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(60)
    print(json.dumps({"conversations": len(convs), "concurrency": args.concurrency,
                      "max_tokens": args.max_tokens, "completion_tokens": tokens}))
    print(f"plain client (httpx, {args.concurrency} threads): "
          + ", ".join(f"{x:.2f}" for x in plain) + " conversations/s")
    print("prepare regenerating: " + ", ".join(f"{x:.2f}" for x in ours) + " conversations/s")
    # Each prepare run against the mean of the plain runs just before and after it: a shared
    # machine's load moves between runs, a pair sees nearly the same load. The median pair.
    pairs = sorted(r / ((plain[i] + plain[i + 1]) / 2) for i, r in enumerate(ours))
    print("per pair: " + ", ".join(f"{x:.2f}" for x in pairs))
    print(f"regenerate / plain client: {statistics.median(pairs):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
