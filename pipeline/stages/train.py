"""train: an EAGLE-3 head with the installed speculators' own trainer (library Trainer for
0.3.x, `speculators train` for 0.9.x), then the serving artefacts:

- train/checkpoint/: config.json + model.safetensors of the last epoch, the directory vLLM's
  `--speculative-config` points at. Its config records `eagle_aux_hidden_state_layer_ids` (the
  ids vLLM captures when serving, in its own input-to-layer convention, which is the pipeline's)
  and an `eagle3_console` block with every id, the convention in words, and the target's layer
  count, so a head is never served one layer off.
- train/speculative_config.json: the JSON for `vllm serve ... --speculative-config '<it>'`.

The trainer's checkpoints are written under `<output_dir>/.train.resume/checkpoints/` (not the
stage's temporary directory, which a failed run loses), each sealed whole
(pipeline/checkpoints.py): a rerun after any death resumes from the newest complete one, unless
forced (`--force`, `--from train`) or the stage's key changed. On success they move into
train/checkpoints/ as before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from pipeline import checkpoints
from pipeline.devices import pick_device
from pipeline.formats import installed, speculators_path
from pipeline.manifest import stage_dir
from pipeline.progress import emit
from pipeline.runner import StageContext
from pipeline.stages.extract import CONVENTION


def run(ctx: StageContext) -> tuple[list[Path], dict[str, Any]]:
    cfg = ctx.cfg
    fmt = speculators_path(cfg)
    meta = json.loads((ctx.input_dir("extract") / "meta.json").read_text())
    if meta["layer_ids"] != cfg.all_layer_ids or meta["format"] != fmt:
        raise RuntimeError(f"extract wrote layers {meta['layer_ids']} in format {meta['format']}"
                           f", train expects {cfg.all_layer_ids} in {fmt}: re-run extract")
    device = pick_device(cfg.train.device)
    kept = checkpoints.resume_dir(cfg.output_dir, ctx.key, force=ctx.force,
                                  say=lambda m: emit("info", "train", message=m))
    save_dir = kept / "checkpoints"
    emit("info", "train", message=f"speculators {installed()} ({fmt} path) on "
         f"{device}: {cfg.train.epochs} epochs, lr {cfg.train.lr}, {cfg.train.num_layers} layer(s)")
    emit("info", "train", message=checkpoints_said(cfg, fmt))
    from pipeline import nodes, ranks, trainers

    # torchrun over the boxes (pipeline/nodes.py) or this box's ranks (pipeline/ranks.py);
    # rank 0 writes save_dir. Online mode is one training process beside its server.
    nproc = ranks.ranks_per_node(cfg, device)
    if cfg.train.mode == "online":  # states from a live server, none on disk
        from pipeline.trainers import online

        result = online.train(cfg, ctx.input_dir("extract"), ctx.input_dir("vocab"), save_dir,
                              device)
    elif nodes.across(cfg):
        result = nodes.train_across(cfg, save_dir, device)
        result["hosts"] = list(cfg.train.hosts)
    elif nproc > 1:
        result = ranks.train_local(cfg, save_dir, device, nproc)
    else:
        result = trainers.for_config(cfg).train(cfg, ctx.input_dir("extract"),
                                                ctx.input_dir("vocab"), save_dir, device)
    result.setdefault("world_size", 1)  # one process; the ranks' results carry their own
    newest_first = checkpoints.epoch_dirs(save_dir)
    if not newest_first:
        raise RuntimeError(f"the trainer wrote no checkpoint under {save_dir}")
    last = newest_first[0]
    shutil.rmtree(save_dir / checkpoints.WRITING, ignore_errors=True)
    save_dir.rename(ctx.workdir / "checkpoints")  # the stage's outputs, as before resuming
    shutil.rmtree(kept)
    last = ctx.workdir / "checkpoints" / last.name
    serve = ctx.workdir / "checkpoint"
    serve.mkdir()
    shutil.copy2(last / "model.safetensors", serve / "model.safetensors")
    conf = json.loads((last / "config.json").read_text())
    conf["eagle_aux_hidden_state_layer_ids"] = cfg.aux_layer_ids
    conf["eagle3_console"] = {
        "layer_ids": cfg.all_layer_ids, "aux_layer_ids": cfg.aux_layer_ids,
        "layer_id_convention": CONVENTION, "target_num_layers": cfg.num_layers,
        "speculators": installed(), "format": fmt, "epochs": cfg.train.epochs,
    }
    (serve / "config.json").write_text(json.dumps(conf, indent=2))
    final_serve = stage_dir(cfg, "train") / "checkpoint"
    spec = {"method": "eagle3", "model": str(final_serve),
            "num_speculative_tokens": cfg.evaluate.num_speculative_tokens,
            "draft_tensor_parallel_size": cfg.evaluate.draft_tensor_parallel_size}
    spec_path = ctx.workdir / "speculative_config.json"
    spec_path.write_text(json.dumps(spec) + "\n")
    emit("info", "train", message=f"serve with: --speculative-config '{json.dumps(spec)}'")
    outputs = [p for p in ctx.workdir.rglob("*") if p.is_file()]
    return outputs, {"checkpoint": str(final_serve), "speculative_config": spec,
                     "epochs": cfg.train.epochs, **result}


def checkpoints_said(cfg: Any, fmt: str) -> str:
    """How often this run checkpoints, in one line (0.3 can only at epoch ends)."""
    t = cfg.train
    if fmt == "0.3":
        return ("checkpoints: at the end of every epoch only (speculators 0.3's library Trainer "
                "saves nowhere else: train.checkpoint_every_steps / _minutes cannot be finer); "
                "a rerun resumes from the last complete one")
    when = [f"every {t.checkpoint_every_steps} steps"] if t.checkpoint_every_steps else []
    if t.checkpoint_every_minutes:
        when.append(f"every {t.checkpoint_every_minutes:g} min")
    return f"checkpoints: {', '.join([*when, 'at the end of every epoch'])}; a rerun resumes " \
        "from the newest complete one"
