"""What hidden-state extraction through vLLM costs against the same engine's own prefill.

    python benchmarks/extract_throughput.py [--workdir DIR] [--rounds 3] [--widths 64x16,1024x1]
                                            [--pack 512] [--dtype bfloat16]

On a 1T-parameter target the ratio decides days of GPU time: extraction is a prefill of every
sample with states copied out of the worker and written to disk, so anything it adds beyond the
prefill (copies to the host, per-layer syncs, serialization between processes, file writes) is
paid on every token of the dataset.

How: the demo's prepared samples (the real pipeline's prepare stage on the demo conversations,
`python -m pipeline demo-setup` + `prepare`), packed into prompts of about `--pack` tokens, go
through ONE engine of the box environment (vLLM 0.32 CPU, scripts/box_env.py) started as the
extract stage starts it (pipeline.vllm_layer_capture with its worker extension). Per round, in
turns on that same engine:
- plain prefill: `LLM.generate(prompts, max_tokens=1)` with the capture paused (vLLM's own
  steps; the hooks return at once);
- extraction: the extract stage's own loop (`pipeline.stages.extract.capture_and_write`): the
  same prompts captured batch by batch and written as speculators 0.9 files.
Each width is a Llama target of that hidden size (64: the demo's trained target itself; wider:
built from config with random weights, the demo's vocabulary; the weights do not change the
cost). Printed per width: tokens/s of both, the ratio, and bytes written per token against
layers x hidden x dtype size. The last line, `extract/prefill: R`, is the widest target's ratio
(the closest to a real target, whose per-token compute dwarfs its per-token state bytes).

No figure is asserted: on 2 shared cores the numbers move with the neighbours' load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, pipeline  # first: the repository on sys.path

from pipeline.stages import PREPARE

RESULT = "RESULT "


# -- inside the box environment ----------------------------------------------------------------


def _packed(samples: list[dict[str, list[int]]], pack: int) -> list[dict[str, list[int]]]:
    """Consecutive samples joined up to `pack` tokens: prompts of a real dataset's length from the
    demo's short conversations (a sample longer than `pack` stays whole)."""
    out: list[dict[str, list[int]]] = []
    cur: dict[str, list[int]] = {"input_ids": [], "loss_mask": []}
    for s in samples:
        if cur["input_ids"] and len(cur["input_ids"]) + len(s["input_ids"]) > pack:
            out.append(cur)
            cur = {"input_ids": [], "loss_mask": []}
        cur["input_ids"] += s["input_ids"]
        cur["loss_mask"] += s["loss_mask"]
    if cur["input_ids"]:
        out.append(cur)
    return out


def inner(config: str, rounds: int, pack: int, repeat: int, profile: bool = False) -> int:
    """Runs in the box environment's Python (as a script: the engine spawns its workers): one
    engine, both routes in turns."""
    from pipeline import config as config_mod
    from pipeline.stages.extract import capture_and_write, read_samples
    from pipeline.state_size import stored_state_dtype
    from pipeline.vllm_layer_capture import LayerCapture

    cfg = config_mod.load(config, check_disk=False)
    limit = json.loads((cfg.model_path / "config.json").read_text()).get("max_position_embeddings")
    samples = _packed(read_samples(cfg.output_dir / PREPARE),
                      min(pack, int(limit or pack) - 1)) * repeat
    prompts = [s["input_ids"] for s in samples]
    tokens = sum(len(p) for p in prompts)
    t0 = time.monotonic()
    cap = LayerCapture(str(cfg.model_path), cfg.all_layer_ids,
                       max_model_len=max(len(p) for p in prompts) + 1, dtype=cfg.extract.dtype)
    start_s = time.monotonic() - t0
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
    todo = list(range(len(samples)))
    out = Path(tempfile.mkdtemp(prefix="extract-bench-"))
    times: dict[str, list[float]] = {"prefill": [], "extraction": []}
    cpu: dict[str, list[float]] = {"prefill": [], "extraction": []}
    try:
        for r in range(rounds + 1):  # round 0 warms both routes up and is not counted
            for route in ("prefill", "extraction"):
                hs_dir = out / f"r{r}"
                hs_dir.mkdir(exist_ok=True)
                c0, w0 = time.process_time(), time.perf_counter()
                if route == "prefill":
                    cap.llm.collective_rpc("_capture_pause", args=(True,))
                    cap.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                     params, use_tqdm=False)
                    cap.llm.collective_rpc("_capture_pause", args=(False,))
                else:
                    assert capture_and_write(cap, cfg, samples, todo, hs_dir, None) == tokens
                if r:
                    times[route].append(time.perf_counter() - w0)
                    cpu[route].append(time.process_time() - c0)
        written = sum(f.stat().st_size for f in (out / "r1").iterdir())
        if profile:  # where the extraction route's own time goes, beyond the engine's steps
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            capture_and_write(cap, cfg, samples, todo, out / "r1", None)
            prof.disable()
            pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(18)
    finally:
        cap.close()
        shutil.rmtree(out, ignore_errors=True)
    size = {"float32": 4, "bfloat16": 2, "float16": 2}[stored_state_dtype(cfg, "0.9")]
    print(RESULT + json.dumps({
        "hidden": cfg.hidden_size, "layers": cfg.num_layers, "layer_ids": cfg.all_layer_ids,
        "prompts": len(prompts), "tokens": tokens, "start_s": start_s, "times": times,
        "driver_cpu": cpu, "bytes_per_token": written / tokens,
        "state_bytes_per_token": len(cfg.all_layer_ids) * cfg.hidden_size * size}), flush=True)
    return 0


# -- the driver (the project's .venv) ----------------------------------------------------------


def _wide_target(demo: Path, hidden: int, dest: Path) -> None:
    """A Llama target of hidden size `hidden` with the demo's vocabulary and tokenizer files."""
    import torch
    from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM

    if (dest / "model.safetensors").exists():
        return
    base = AutoConfig.from_pretrained(demo / "target")
    torch.manual_seed(0)
    heads = max(2, hidden // 64)  # head_dim 64 (the CPU attention backend's sizes)
    config = LlamaConfig(
        vocab_size=base.vocab_size, hidden_size=hidden, intermediate_size=hidden * 11 // 4,
        num_hidden_layers=8, num_attention_heads=heads, num_key_value_heads=max(1, heads // 4),
        max_position_embeddings=4096, tie_word_embeddings=False,
        pad_token_id=base.pad_token_id, eos_token_id=base.eos_token_id, bos_token_id=None)
    partial = dest.with_name(dest.name + ".partial")
    model: Any = LlamaForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(str(partial))
    for f in (demo / "target").iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, partial / f.name)
    partial.rename(dest)


def _config(demo: Path, model: Path, dtype: str) -> Path:
    from pipeline.demo import pipeline_toml

    path = demo / f"bench-{model.name}.toml"
    path.write_text(pipeline_toml(title="# benchmarks/extract_throughput.py", model=str(model),
                                  output_dir=str(demo / "out"), backend="vllm", dtype=dtype,
                                  dataset=str(demo / "conversations.jsonl")))
    return path


def _measure(box_python: str, config: Path, rounds: int, pack: int,
             repeat: int) -> dict[str, Any]:
    proc = subprocess.run([box_python, __file__, "--inner", str(config), "--rounds", str(rounds),
                           "--pack", str(pack), "--repeat", str(repeat)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)]
    if proc.returncode or not lines:
        raise SystemExit(f"the engine run exited {proc.returncode}:\n"
                         f"{(proc.stdout + proc.stderr)[-4000:]}")
    return dict(json.loads(lines[-1][len(RESULT):]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="where the demo and targets are built (kept; reused)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--widths", default="64x16,1024x1",
                        help="hidden sizes, each xN: the samples repeated N times (the demo's "
                             "4,447 tokens are one batch; repeated, the writes of a batch overlap "
                             "the next batch's prefill as on a real dataset)")
    parser.add_argument("--repeat", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--pack", type=int, default=512, help="tokens per prompt (about)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--profile", action="store_true",
                        help="with --inner: a cProfile of one extraction round on stderr")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        return inner(args.inner, args.rounds, args.pack, args.repeat, args.profile)
    from tests import box_env

    box_python = str(box_env.ensure("vllm032"))
    work = Path(args.workdir or Path(tempfile.gettempdir()) / "extract-throughput").expanduser()
    demo = work / "demo"
    pipeline(sys.executable, "demo-setup", "--dir", str(demo))
    pipeline(sys.executable, PREPARE, "--config", str(demo / "pipeline.toml"))
    ratio = 0.0
    for spec in args.widths.split(","):
        w, _, n = spec.partition("x")
        width, repeat = int(w), int(n or 1)
        model = demo / "target"
        if width != 64:
            model = work / f"target-h{width}"
            _wide_target(demo, width, model)
        r = _measure(box_python, _config(demo, model, args.dtype), args.rounds, args.pack, repeat)
        times = r["times"]
        assert isinstance(times, dict)
        prefill, extract = statistics.median_high(times["prefill"]), statistics.median_high(times["extraction"])
        tokens = float(str(r["tokens"]))
        ratio = prefill / extract
        print(f"hidden {r['hidden']} x {r['layers']} layers, ids {r['layer_ids']}, "
              f"{r['prompts']} prompts / {int(tokens)} tokens, engine start {r['start_s']:.0f} s")
        print(f"  plain prefill {tokens / prefill:,.0f} tok/s; extraction {tokens / extract:,.0f} "
              f"tok/s; ratio {ratio:.3f} (median of {args.rounds} rounds)")
        print(f"  written {r['bytes_per_token']:,.0f} B/token vs states "
              f"{r['state_bytes_per_token']:,} B/token (ids {len(r['layer_ids'])} x hidden x dtype)")
    print(f"extract/prefill: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
