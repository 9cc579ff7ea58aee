"""Serve, then bench: the closing step of the pipeline (the demo's last two steps).

One engine at a time: the baseline server (target alone) is started, swept and stopped, then
the speculative server (target + the pipeline's head) likewise, over the same prompts, output
length and concurrencies. Two engines at once would share the box's cores or memory and each
would slow the other, so the speedup would measure the contention, not the speculation; on a
GPU box the same sequence costs one extra engine start.

The prompts are the pipeline's own held-out prompts (prepare/eval.jsonl), and requests stop at
the end token as evaluate does, so "offline X vs served Y" compares the same decoding of the
same prompts: the difference is the engine.
"""

from __future__ import annotations

import posixpath
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pipeline.stages import EVALUATE, PREPARE
from remote.bench.compare import Comparison, compare_runs
from remote.bench.driver import run_sweep
from remote.bench.prompts import load_prompts
from remote.bench.reach import vllm_client
from remote.bench.results import MIN_REQUESTS, BenchRun, Point
from remote.bench.served import sweep_acceptance
from remote.errors import UsageError
from remote.serving.serve import ServeRunner, default_url, read_offline, serving


@dataclass
class ServedBench:
    baseline: BenchRun
    speculative: BenchRun
    comparison: Comparison
    served: dict[str, Any] | None  # sweep_acceptance of the speculative run
    offline: dict[str, object] | None  # evaluate/acceptance.json (trained head)
    start_seconds: dict[str, float]  # role -> engine start (launch to first answer)


async def serve_and_bench(runner: ServeRunner, config: str, output_dir: str, *,
                          concurrencies: list[int], max_tokens: int, rounds: int | None,
                          min_requests: int = MIN_REQUESTS, vllm_args: list[str] | None = None,
                          on_point: Callable[[str, BenchRun, Point], None],
                          on_ready: Callable[[str, float], None],
                          urls: dict[str, str] | None = None) -> ServedBench:
    """`rounds`: rounds x concurrency requests per point; None: at least `min_requests` (the
    default of `console bench run`, remote/bench/results.py). `urls`: role -> address as seen
    from the box (default: vllm_url, and its port + 1 for the baseline). Both ports are
    checked before the first engine starts: a taken speculative port found only after the
    baseline's start and sweep would waste both."""
    where = {role: (urls or {}).get(role) or default_url(runner.host, role)
             for role in ("baseline", "speculative")}
    if where["baseline"] == where["speculative"]:
        raise UsageError(f"the baseline and speculative servers would both listen at "
                         f"{where['baseline']}: give the baseline another port")
    for role, url in where.items():
        await runner.check_port(url, role)
    with tempfile.TemporaryDirectory(prefix="eagle3-serve-") as tmp:

        async def fetched(stage: str, name: str) -> Path:
            await runner.transport.get(posixpath.join(output_dir, stage, name), Path(tmp) / name)
            return Path(tmp) / name

        offline = read_offline(await fetched(EVALUATE, "acceptance.json"))  # the trained head
        # the pipeline's held-out prompts (their rows carry `messages`)
        prompts = load_prompts(await fetched(PREPARE, "eval.jsonl"))
    runs: dict[str, BenchRun] = {}
    starts: dict[str, float] = {}
    for role in ("baseline", "speculative"):
        async with serving(runner, config, role, url=where[role], vllm_args=vllm_args) as served:
            starts[role] = served.seconds or 0.0  # always measured by a start
            on_ready(role, starts[role])
            async with vllm_client(runner.transport, served.url,
                                   is_local=runner.host.is_local) as client:
                runs[role] = await run_sweep(
                    client, prompts, concurrencies, label=role, model=None,
                    speculative=role == "speculative", max_tokens=max_tokens, rounds=rounds,
                    host=runner.host.name, on_point=partial(on_point, role), ignore_eos=False,
                    min_requests=min_requests)
    spec = runs["speculative"]
    return ServedBench(baseline=runs["baseline"], speculative=spec,
                       comparison=compare_runs(runs["baseline"], spec),
                       served=sweep_acceptance(spec.points), offline=offline,
                       start_seconds=starts)
