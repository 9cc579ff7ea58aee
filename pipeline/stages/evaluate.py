"""evaluate: offline acceptance of the trained head, without vLLM.

Greedy speculative decoding on the held-out prompts of prepare: the target (transformers) gives
its hidden states, the head drafts k tokens after the last position, the target verifies them in
one forward pass; the leading matches are accepted and the target adds one token of its own.
Counted exactly as vLLM's spec-decode counters are (design.md §2): per drafting step
num_drafts += 1, num_draft_tokens += k, num_accepted_tokens += accepted, and
accepted_per_pos[i] += 1 for every accepted position i. Reported: mean acceptance length
1 + accepted/drafts, acceptance rate accepted/draft_tokens, per-position accepted_per_pos[i]/drafts.

With evaluate.baseline = true, an untrained head (same construction and seed) is measured on the
same prompts, so "did training help" is a number in the same report.

Where transformers cannot hold the target (a 1T-parameter model on 8 GPUs), evaluate never starts
that load: with evaluate.served_url it measures through a running vLLM server with the head
(pipeline/served.py, vLLM's own counters); without it, it refuses with the memory arithmetic
(pipeline/fit.py) before importing torch's weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline import fit, served
from pipeline.config_types import PipelineConfig
from pipeline.devices import pick_device
from pipeline.errors import ConfigInvalid, TargetTooBig
from pipeline.progress import Progress, emit
from pipeline.runner import StageContext


class Acceptance:
    def __init__(self, k: int) -> None:
        self.k = k
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = 0
        self.per_pos = [0] * k
        self.generated = 0

    def record(self, accepted: int) -> None:
        self.drafts += 1
        self.draft_tokens += self.k
        self.accepted += accepted
        for i in range(accepted):
            self.per_pos[i] += 1

    def result(self) -> dict[str, Any]:
        return {**served.acceptance(self.drafts, self.draft_tokens, self.accepted, self.per_pos),
                "generated_tokens": self.generated}


def speculative_decode(capture: Any, draft: Any, draft_fn: Any, prompt: list[int],
                       aux_ids: list[int], k: int, max_new: int, eos: int | None,
                       stats: Acceptance, device: str) -> list[int]:
    import torch

    seq = list(prompt)
    states, logits = capture(torch.tensor([seq], device=device), aux_ids)
    seq.append(int(logits[-1].argmax()))
    new = 1
    while new < max_new and seq[-1] != eos:
        hidden = torch.cat([states[i] for i in aux_ids], dim=-1)[: len(seq) - 1]
        proposal = draft_fn(draft, hidden, torch.tensor(seq[1:], device=device), k)
        cand = seq + proposal
        states, logits = capture(torch.tensor([cand], device=device), aux_ids)
        greedy = logits[len(seq) - 1: len(seq) + k].argmax(-1).tolist()
        accepted = 0
        while accepted < k and proposal[accepted] == greedy[accepted]:
            accepted += 1
        stats.record(accepted)
        seq += [*proposal[:accepted], greedy[accepted]]
        new += accepted + 1
    stats.generated += new
    return seq[len(prompt):]


def check_fit(cfg: PipelineConfig, device: str, free: dict[str, int] | None = None
              ) -> fit.FitReport:
    """Refuse, with the arithmetic, a load that cannot fit (free: measured when None)."""
    dtype = "float32" if device == "cpu" else "bfloat16"  # what run() loads with
    try:
        report = fit.check(cfg.model_path, dtype,
                           fit.device_free(device) if free is None else free)
    except ValueError as exc:
        raise ConfigInvalid("evaluate", f"cannot size the target from "
                            f"{cfg.model_path / 'config.json'} ({exc}), so it is not loaded; "
                            "set evaluate.served_url to measure through a vLLM server") from None
    emit("info", "evaluate", message=f"target memory: {report.arithmetic()}")
    if not report.fits:
        raise TargetTooBig("evaluate", f"the target cannot be loaded by transformers here: "
                           f"{report.arithmetic()}. Set evaluate.served_url to a vLLM server "
                           "serving the target with the trained head (the serve step's URL) "
                           "to measure acceptance there.")
    return report


def _prompts(ctx: StageContext) -> list[list[int]]:
    with open(ctx.input_dir("prepare") / "eval.jsonl", encoding="utf-8") as fh:
        prompts = [json.loads(line)["prompt_ids"] for line in fh if line.strip()]
    if not prompts:
        raise RuntimeError("no held-out prompts: set data.eval_samples >= 1")
    return prompts


def _say(head: str, r: dict[str, Any]) -> None:
    emit("info", "evaluate", message=f"{head}: mean acceptance length {r['mean_length']:.3f}, "
         f"rate {r['rate']:.3f}, per position " + " ".join(f"{x:.2f}" for x in r["per_position"]))


def _write(ctx: StageContext, source: str, prompts: int, heads: dict[str, Any],
           window: str = "") -> Path:
    """acceptance.json, the same fields whichever way the heads were measured."""
    out = ctx.workdir / "acceptance.json"
    out.write_text(json.dumps({
        "source": source, "num_speculative_tokens": ctx.cfg.evaluate.num_speculative_tokens,
        "prompts": prompts, "max_new_tokens": ctx.cfg.evaluate.max_new_tokens, "heads": heads,
        "definitions": f"vLLM spec_decode counters{window}: mean_length = 1 + accepted/drafts; "
                       "rate = accepted/draft_tokens; per_position[i] = accepted_per_pos[i]/drafts"},
        indent=2))
    return out


def run_served(ctx: StageContext) -> tuple[list[Path], dict[str, Any]]:
    cfg = ctx.cfg
    prompts = _prompts(ctx)
    k = cfg.evaluate.num_speculative_tokens
    progress = Progress("evaluate", len(prompts), "prompts")
    r = served.measure(cfg.evaluate.served_url, prompts, k, cfg.evaluate.max_new_tokens,
                       concurrency=cfg.evaluate.served_concurrency,
                       on_prompt=lambda: progress.advance(head="served"))
    _say(f"served head at {r['url']} ({r['served_model']})", r)
    out = _write(ctx, "served", len(prompts), {"served": r}, " over the evaluate window")
    return [out], {"source": "served", "url": r["url"], "mean_length": r["mean_length"],
                   "rate": r["rate"], "per_position": r["per_position"]}


def run(ctx: StageContext) -> tuple[list[Path], dict[str, Any]]:
    cfg = ctx.cfg
    if cfg.evaluate.served_url:
        return run_served(ctx)
    device = pick_device(cfg.evaluate.device)
    check_fit(cfg, device)

    import torch

    from pipeline import trainers
    from pipeline.target import HiddenStateCapture, load_target

    if device == "cpu":
        import torch._dynamo

        torch._dynamo.config.disable = True
    prompts = _prompts(ctx)
    model = load_target(cfg, device, torch.float32 if device == "cpu" else torch.bfloat16)
    capture = HiddenStateCapture(model, cfg.num_layers)
    eos = getattr(model.generation_config, "eos_token_id", None)
    eos = eos[0] if isinstance(eos, list) else eos
    impl, vocab = trainers.for_config(cfg), ctx.input_dir("vocab")
    heads = {"trained": impl.load_trained(cfg, ctx.input_dir("train") / "checkpoint", vocab, device)}
    if cfg.evaluate.baseline:
        heads["untrained"] = impl.untrained(cfg, vocab, device)
    k = cfg.evaluate.num_speculative_tokens
    progress = Progress("evaluate", len(prompts) * len(heads), "prompts")
    results: dict[str, Any] = {}
    for name, head in heads.items():
        stats = Acceptance(k)
        for p in prompts:
            speculative_decode(capture, head, impl.draft_tokens, p, cfg.aux_layer_ids, k,
                               cfg.evaluate.max_new_tokens, eos, stats, device)
            progress.advance(head=name)
        results[name] = stats.result()
        _say(f"{name} head", results[name])
    out = _write(ctx, "offline", len(prompts), results)
    summary = {"source": "offline", "mean_length": results["trained"]["mean_length"],
               "rate": results["trained"]["rate"],
               "per_position": results["trained"]["per_position"]}
    if "untrained" in results:
        summary["untrained_mean_length"] = results["untrained"]["mean_length"]
    return [out], summary
