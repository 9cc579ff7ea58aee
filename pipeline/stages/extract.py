"""extract: the target's hidden states for the configured layer ids, written in the format the
installed speculators trains from (pipeline.formats), resumable sample by sample.

Before writing anything it reports bytes per token and the projected size of the dataset, and
refuses with those numbers when the output disk cannot hold them (plus extract.reserve_bytes).

Backends:
- hf: transformers with output_hidden_states (+ a pre-hook on the final norm for id N); any
  device. This is what the demo and the tests run.
- vllm: on the box. speculators 0.3.x: its VllmHiddenStatesGenerator (worker extension
  HiddenStatesWorkerExtension; needs the patcher's worker patch for multimodal wrappers such as
  Kimi-K2.5). That extension captures the *output of* layer L, so it is asked for L-1 to get
  our id L. speculators 0.9.x: `speculators generate-offline-data` against a vLLM server started
  with the extract_hidden_states speculative config (see _extract_vllm_09). Neither can run on
  this machine (no GPU, no vLLM): the code path follows the real sources but is untested here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from pipeline.config import PipelineConfig, bytes_per_token, check_free_space, human
from pipeline.errors import ConfigInvalid, PipelineError
from pipeline.formats import sample_name, speculators_path, write_sample
from pipeline.progress import Progress, emit
from pipeline.runner import StageContext

KEY_FILE = ".key"
CONVENTION = ("layer id L = hidden state entering decoder layer L (output of layer L-1); "
              "id N = last layer output before the final norm (vLLM aux_hidden_state_layers)")


def read_samples(prepare_dir: Path) -> list[dict[str, list[int]]]:
    with open(prepare_dir / "train.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _prepare_resume(ctx: StageContext) -> None:
    """Keep finished samples only if they were written for this exact key (and not --force:
    forcing recomputes everything; a plain re-run after a kill resumes)."""
    key_path = ctx.workdir / KEY_FILE
    old = key_path.read_text().strip() if key_path.exists() else None
    if old != ctx.key or ctx.force:
        for child in ctx.workdir.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
        key_path.write_text(ctx.key + "\n")
    hs = ctx.workdir / "hidden_states"
    hs.mkdir(exist_ok=True)
    for part in hs.glob("*.part"):
        part.unlink()  # a sample interrupted mid-write


def run(ctx: StageContext) -> tuple[list[Path], dict[str, Any]]:
    cfg = ctx.cfg
    fmt = speculators_path(cfg)
    samples = read_samples(ctx.input_dir("prepare"))
    n_tokens = sum(len(s["input_ids"]) for s in samples)
    bpt = bytes_per_token(cfg)
    projected = bpt * n_tokens
    emit("info", "extract", message=f"{bpt} bytes/token × {n_tokens} tokens = "
         f"{human(projected)} projected ({len(cfg.all_layer_ids)} layers × {cfg.hidden_size} × "
         "bf16 + ids/mask)", bytes_per_token=bpt, tokens=n_tokens, projected_bytes=projected)
    _prepare_resume(ctx)
    hs_dir = ctx.workdir / "hidden_states"
    todo = [i for i in range(len(samples)) if not (hs_dir / sample_name(fmt, i)).exists()]
    remaining = sum(len(samples[i]["input_ids"]) for i in todo) * bpt
    check_free_space(cfg, remaining, what=f"hidden states ({len(todo)} samples left)")

    progress = Progress("extract", len(samples), "samples")
    progress.resume_at(len(samples) - len(todo))
    if todo and len(todo) < len(samples):
        emit("info", "extract", message=f"resuming: {len(samples) - len(todo)} of "
             f"{len(samples)} samples already on disk")
    if cfg.extract.backend == "hf":
        _extract_hf(cfg, fmt, samples, todo, hs_dir, progress)
    elif fmt == "0.3":
        _extract_vllm_03(cfg, samples, todo, hs_dir, progress)
    else:
        _extract_vllm_09(cfg, ctx, samples, hs_dir, progress)
    progress.update(len(samples), force=True)

    outputs = [hs_dir / sample_name(fmt, i) for i in range(len(samples))]
    missing = [p.name for p in outputs if not p.exists()]
    if missing:
        raise PipelineError(f"extract: {len(missing)} samples missing after extraction "
                            f"(first: {missing[0]})")
    if fmt == "0.9":
        outputs += _write_arrow_dataset(ctx.workdir, samples)
    meta = {"format": fmt, "layer_ids": cfg.all_layer_ids, "aux_layer_ids": cfg.aux_layer_ids,
            "num_layers": cfg.num_layers, "hidden_size": cfg.hidden_size,
            "convention": CONVENTION, "backend": cfg.extract.backend, "samples": len(samples),
            "tokens": n_tokens, "bytes_per_token": bpt}
    meta_path = ctx.workdir / "meta.json"
    meta_path.write_text(json.dumps(meta, indent=2))
    return [*outputs, meta_path], {k: meta[k] for k in ("format", "layer_ids", "samples",
                                                          "tokens", "bytes_per_token")}


def _extract_hf(cfg: PipelineConfig, fmt: str, samples: list[dict[str, list[int]]],
                todo: list[int], hs_dir: Path, progress: Progress) -> None:
    if not todo:
        return
    import torch

    from pipeline.devices import pick_device, torch_dtype
    from pipeline.target import HiddenStateCapture, load_target

    device = pick_device(cfg.extract.device)
    model = load_target(cfg, device, torch_dtype(cfg.extract.dtype, device))
    capture = HiddenStateCapture(model, cfg.num_layers)
    ids_all = cfg.all_layer_ids
    tokens = 0
    for i in todo:
        s = samples[i]
        ids = torch.tensor([s["input_ids"]], dtype=torch.long, device=device)
        states, _ = capture(ids, ids_all)
        write_sample(fmt, hs_dir / sample_name(fmt, i), ids[0],
                     torch.tensor(s["loss_mask"], dtype=torch.long),
                     [states[lid] for lid in ids_all])
        tokens += len(s["input_ids"])
        progress.advance(tokens=tokens)


def _extract_vllm_03(cfg: PipelineConfig, samples: list[dict[str, list[int]]], todo: list[int],
                     hs_dir: Path, progress: Progress, batch: int = 32) -> None:
    """speculators 0.3.x: its own generator and worker extension (on the box only)."""
    if not todo:
        return
    import torch

    try:
        from speculators.data_generation.vllm_hidden_states_generator import (
            VllmHiddenStatesGenerator,
        )
    except ImportError as exc:
        raise ConfigInvalid(str(cfg.path), f"extract.backend = 'vllm' needs vLLM and "
                            f"speculators' generator in this python: {exc}") from None
    # Its worker captures the output of layer L; our id L is the input to layer L.
    output_of = [lid - 1 for lid in cfg.all_layer_ids]
    gen = VllmHiddenStatesGenerator(
        str(cfg.model_path), layer_ids=output_of, max_model_len=cfg.data.max_seq_len + 1,
        tensor_parallel_size=cfg.extract.tensor_parallel_size)
    for start in range(0, len(todo), batch):
        chunk = todo[start:start + batch]
        results = gen.generate([samples[i]["input_ids"] for i in chunk])
        for i, res in zip(chunk, results, strict=True):
            write_sample("0.3", hs_dir / sample_name("0.3", i), res["input_ids"],
                         torch.tensor(samples[i]["loss_mask"], dtype=torch.long),
                         list(res["hidden_states"]))
            progress.advance()


def _extract_vllm_09(cfg: PipelineConfig, ctx: StageContext, samples: list[dict[str, list[int]]],
                     hs_dir: Path, progress: Progress) -> None:
    """speculators 0.9.x: `speculators generate-offline-data` against a running vLLM server
    that serves the target with the extract_hidden_states speculative config. That server is
    the operator's (started from the console with the layer ids recorded here); this stage
    drives the client side, which resumes by itself (it skips existing hs_{i} files)."""
    dataset_dir = ctx.workdir
    _write_arrow_dataset(dataset_dir, samples)
    argv = [sys.executable, "-m", "speculators", "generate-offline-data",
            "--data-path", str(dataset_dir), "--output-path", str(hs_dir)]
    emit("info", "extract", message="running " + " ".join(argv))
    proc = subprocess.run(argv, check=False)
    if proc.returncode != 0:
        raise PipelineError(f"speculators generate-offline-data exited {proc.returncode}")


def _write_arrow_dataset(workdir: Path, samples: list[dict[str, list[int]]]) -> list[Path]:
    """The prepared rows as the Arrow dataset speculators 0.9 trains from (input_ids,
    loss_mask, seq_len), beside hidden_states/."""
    import datasets

    tmp = workdir / ".arrow.part"
    if tmp.exists():
        shutil.rmtree(tmp)
    ds = datasets.Dataset.from_dict({
        "input_ids": [s["input_ids"] for s in samples],
        "loss_mask": [s["loss_mask"] for s in samples],
        "seq_len": [len(s["input_ids"]) for s in samples],
    })
    ds.set_format("torch")  # persisted in state.json; the trainer compares torch tensors
    ds.save_to_disk(str(tmp))
    files = []
    for child in tmp.iterdir():
        dest = workdir / child.name
        if dest.exists():
            dest.unlink()
        child.rename(dest)
        files.append(dest)
    tmp.rmdir()
    return files
