"""All-reduce share of decode-step time on a real vLLM 0.32, tensor parallel 2, on this CPU.

Starts the tests' TP2 engine (tests/tp2_engine.py: tiny Llama, head_dim 32, n-gram speculation,
torch profiler on), then runs `capture` as `console allreduce capture --host local` does: POST
/start_profile, N greedy completions, /stop_profile, fetch the workers' traces, analyse. Prints,
from the same run:
- decode: all-reduce time inside decode steps / decode-step time (the figure asked for);
- baseline: the same ratio over the prefill steps of the same capture, and the ratio of the two;
- the op counted (vLLM's CPU TP all-reduce, `_C::shm_allreduce`), calls per step, engine start.
On 2 shared cores both ranks spin-wait in the shared-memory all-reduce for the slower rank, so
the share measures skew between ranks as much as data movement: read it as this machine's.

    python benchmarks/allreduce_decode_share.py [--requests 4] [--max-tokens 32] [--captures 2]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import int_options  # first: the repository on sys.path

from remote.allreduce.capture import capture
from remote.allreduce.trace import analyse_files
from remote.link.hosts import HostConfig
from remote.link.transport import LocalTransport
from remote.spine.bus import EventBus
from tests.tp2_engine import LAYERS, start_tp2_engine, stop_engine


async def one_capture(url: str, prof: Path, out: Path, requests: int, max_tokens: int
                      ) -> dict[str, Any]:
    host = HostConfig(name="local", ssh=None, python=sys.executable, workdir=str(out),
                      vllm_url=url)
    t = LocalTransport()
    await t.connect()
    try:
        files = await capture(t, host, EventBus(), profiler_dir=str(prof), local_dir=out,
                              seconds=0.5, requests=requests, max_tokens=max_tokens, poll=0.5)
    finally:
        await t.close()
    return analyse_files(files)


def main() -> int:
    args = int_options(__doc__.splitlines()[0], requests=4, max_tokens=32, captures=2)
    with tempfile.TemporaryDirectory(prefix="ar-decode-") as tmp:
        root = Path(tmp)
        engine = start_tp2_engine(root)
        try:
            print(f"engine: vLLM 0.32 TP2 on CPU, {LAYERS} layers, started in "
                  f"{engine.start_seconds:.0f}s")
            for i in range(args.captures):
                p = asyncio.run(one_capture(engine.url, engine.profiler_dir, root / f"c{i}",
                                            args.requests, args.max_tokens))
                d, f = p["decode"], p["prefill"]
                ops = ", ".join(f"{k['name']} x{k['calls']}" for k in p["kernels"])
                per_step = d["calls"] / d["steps"] if d["steps"] else 0.0
                ratio = d["share"] / f["share"] if f["share"] else float("nan")
                print(f"capture {i + 1}: decode all-reduce share {100 * d['share']:.1f}% "
                      f"({d['steps']} steps over 2 ranks, {per_step:.0f} calls/step); "
                      f"baseline prefill {100 * f['share']:.1f}% ({f['steps']} steps); "
                      f"decode/prefill {ratio:.2f}x; ops: {ops}")
        finally:
            stop_engine(engine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
