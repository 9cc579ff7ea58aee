"""extract: the target's hidden states for the configured layer ids, written in the format the
installed speculators trains from (pipeline.formats), resumable sample by sample.

Before writing anything it reports bytes per token and the projected size of the dataset, and
refuses with those numbers when the output disk cannot hold them (plus extract.reserve_bytes).

Backends:
- hf: transformers with output_hidden_states (+ a pre-hook on the final norm for id N); any
  device. This is what the demo and the tests run.
- vllm: on the box. speculators 0.3.x: its worker extension HiddenStatesWorkerExtension in a
  plain `vllm.LLM` (pipeline.vllm_capture; not its generator, which breaks on vLLM 0.16); needs
  the patcher's worker recipes for multimodal wrappers such as Kimi-K2.5 and for vLLM >= 0.16.
  That extension captures the *output of* layer L, so it is asked for L-1 to get our id L.
  Tested on the real vLLM 0.16 CPU engine (tests/pipeline/test_engine_vllm016.py).
  speculators 0.9.x, chosen by what the box has (the extract log line says which):
  - with CUDA: speculators 0.9's own route. This stage starts vLLM with the
    extract_hidden_states speculative config (as 0.9's launch_vllm.py does) and runs
    `speculators generate-offline-data` against it; vLLM's ExampleHiddenStatesConnector writes
    the files. Not run by the tests (no GPU here).
  - without CUDA: that connector cannot run (CUDA streams/events, pinned memory in vLLM 0.32),
    so the states come from our worker extension's hooks in a plain `vllm.LLM`
    (pipeline.vllm_layer_capture), batches of samples in flight, chunked prefill allowed, every
    sample's row count checked; the same files (hs_{i}.safetensors in the engine's dtype, as
    the connector writes them, plus the Arrow dataset). Compared with hf on every sample on the
    real vLLM 0.32 CPU engine (tests/pipeline/test_extract_vllm032.py).
"""

from __future__ import annotations

import json
import os
import shutil
from functools import partial
from pathlib import Path
from typing import Any

from pipeline.config_types import PipelineConfig
from pipeline.disk_space import check_free_space
from pipeline.errors import ConfigInvalid, PipelineError
from pipeline.formats import sample_name, speculators_path, write_arrow_dataset, write_sample
from pipeline.progress import Progress, emit
from pipeline.runner import StageContext
from pipeline.shards import SHARD_MANIFEST, Shard, shard_dir_name, shard_key, split
from pipeline.state_size import bytes_per_token, stored_state_dtype
from pipeline.trainers.shard_sampler import LOCAL_SHARDS
from pipeline.units import fmt_bytes
from pipeline.write_pool import CaptureFeed

KEY_FILE = ".key"
CONVENTION = ("layer id L = hidden state entering decoder layer L (output of layer L-1); "
              "id N = last layer output before the final norm (vLLM aux_hidden_state_layers)")


def read_samples(prepare_dir: Path) -> list[dict[str, list[int]]]:
    with open(prepare_dir / "train.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def prepare_resume(ctx: StageContext) -> None:
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
    bpt = bytes_per_token(cfg, fmt)
    projected = bpt * n_tokens
    emit("info", "extract", message=f"{bpt} bytes/token × {n_tokens} tokens = "
         f"{fmt_bytes(projected)} projected ({len(cfg.all_layer_ids)} layers × {cfg.hidden_size} × "
         f"{stored_state_dtype(cfg, fmt)} + ids/mask)", bytes_per_token=bpt, tokens=n_tokens,
         projected_bytes=projected)
    prepare_resume(ctx)
    hs_dir = ctx.workdir / "hidden_states"
    online = cfg.train.mode == "online"  # the rows only: train's server makes the states
    if cfg.train.data == LOCAL_SHARDS:  # this box's own shard(s) only (extract_shard.py)
        placed, local = place_local(ctx, fmt, samples, hs_dir)
        return _dataset_and_meta(ctx, fmt, samples, n_tokens, bpt, placed, local)
    todo = [] if online else [i for i in range(len(samples))
                              if not (hs_dir / sample_name(fmt, i)).exists()]
    if online:
        emit("info", "extract", message="train.mode = online: no states written here, the "
             "extraction server generates them while training (pipeline/trainers/online.py)")
    if todo and cfg.extract.hosts:
        raise PipelineError(
            f"extract: extract.hosts is set ({', '.join(cfg.extract.hosts)}) and {len(todo)} of "
            f"{len(samples)} samples are not gathered here yet: `console run` extracts them on "
            "those boxes and gathers them here (docs/pipeline.md, Sharded extraction)")
    if not online:
        extract_todo(ctx, fmt, samples, todo, hs_dir)
    outputs = [] if online else [hs_dir / sample_name(fmt, i) for i in range(len(samples))]
    missing = [p.name for p in outputs if not p.exists()]
    if missing:
        raise PipelineError(f"extract: {len(missing)} samples missing after extraction "
                            f"(first: {missing[0]})")
    return _dataset_and_meta(ctx, fmt, samples, n_tokens, bpt, outputs, {})


def _dataset_and_meta(ctx: StageContext, fmt: str, samples: list[dict[str, Any]], n_tokens: int,
                      bpt: int, outputs: list[Path], extra: dict[str, Any]
                      ) -> tuple[list[Path], dict[str, Any]]:
    """The stage's end, whichever way the states got here: the Arrow dataset (0.9) and
    meta.json (with `extra`: local shards' ranges), and the manifest's summary."""
    cfg = ctx.cfg
    if fmt == "0.9":
        outputs = [*outputs, *write_arrow_dataset(ctx.workdir, samples)]
    meta = {"format": fmt, "layer_ids": cfg.all_layer_ids, "aux_layer_ids": cfg.aux_layer_ids,
            "num_layers": cfg.num_layers, "hidden_size": cfg.hidden_size,
            "convention": CONVENTION, "backend": cfg.extract.backend, "samples": len(samples),
            "tokens": n_tokens, "bytes_per_token": bpt, **extra}
    meta_path = ctx.workdir / "meta.json"
    meta_path.write_text(json.dumps(meta, indent=2))
    return [*outputs, meta_path], {k: meta[k] for k in ("format", "layer_ids", "samples",
                                                          "tokens", "bytes_per_token", *extra)}


def extract_todo(ctx: StageContext, fmt: str, samples: list[dict[str, list[int]]],
                 todo: list[int], hs_dir: Path) -> None:
    """The samples of `todo` (indices into `samples`) extracted into `hs_dir` by the configured
    backend: the one extraction route of the stage and of a shard (pipeline/stages/
    extract_shard.py), so a shard's files are the stage's files for the same samples."""
    cfg = ctx.cfg
    bpt = bytes_per_token(cfg, fmt)
    remaining = sum(len(samples[i]["input_ids"]) for i in todo) * bpt
    check_free_space(cfg, remaining, what=f"hidden states ({len(todo)} samples left)")

    progress = Progress("extract", len(samples), "samples")
    progress.resume_at(len(samples) - len(todo))
    if todo and len(todo) < len(samples):
        emit("info", "extract", message=f"resuming: {len(samples) - len(todo)} of "
             f"{len(samples)} samples already on disk")
    if todo and cfg.extract.backend == "hf":
        _extract_hf(cfg, fmt, samples, todo, hs_dir, progress)
    elif todo and fmt == "0.3":
        _extract_vllm_03(cfg, samples, todo, hs_dir, progress)
    elif todo:
        import torch

        route = "server" if torch.cuda.is_available() else "hooks"  # the module docstring: why
        emit("info", "extract", message=f"vLLM extraction route: {route} "
             f"({VLLM_09_ROUTES[route]})", route=route)
        _require_vllm(cfg)
        if route == "server":
            from pipeline.stages.extract_server import extract_vllm_09

            extract_vllm_09(cfg, ctx, samples, hs_dir, progress)
        else:
            _extract_vllm_hooks(cfg, samples, todo, hs_dir, progress)
    if progress.emitted != len(samples):  # the routes' own last line, with the writer's figures
        progress.update(len(samples), force=True)


def _extract_hf(cfg: PipelineConfig, fmt: str, samples: list[dict[str, list[int]]],
                todo: list[int], hs_dir: Path, progress: Progress) -> None:
    import torch

    from pipeline.devices import pick_device, torch_dtype
    from pipeline.target import HiddenStateCapture, load_target

    device = pick_device(cfg.extract.device)
    model = load_target(cfg, device, torch_dtype(cfg.extract.dtype, device))
    capture = HiddenStateCapture(model, cfg.num_layers)
    ids_all = cfg.all_layer_ids
    feed = CaptureFeed(progress)
    with feed.pool:
        for i in todo:
            s = samples[i]
            with feed.capturing(len(s["input_ids"])):
                ids = torch.tensor([s["input_ids"]], dtype=torch.long, device=device)
                states, _ = capture(ids, ids_all)
            path = hs_dir / sample_name(fmt, i)
            feed.hand_over(path, len(s["input_ids"]), partial(
                write_sample, fmt, path, ids[0], torch.tensor(s["loss_mask"], dtype=torch.long),
                [states[lid] for lid in ids_all]))
        feed.finish()


def worker_03_layer_ids(cfg: PipelineConfig) -> list[int]:
    """speculators 0.3's worker extension captures the *output of* layer L (after layer L ran,
    before the final norm); our id L is the state *entering* layer L, i.e. the output of L-1."""
    return [lid - 1 for lid in cfg.all_layer_ids]


def _require_vllm(cfg: PipelineConfig) -> None:
    """vLLM importable here, and the preflight's notes said, before a capture engine or the
    extraction server starts (a missing vLLM is a config error: the backend was chosen for a
    python without it)."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise ConfigInvalid(str(cfg.path), f"extract.backend = 'vllm' needs vLLM in this "
                            f"python: {exc}") from None
    from pipeline.preflight import check

    for note in check(cfg.model_path, cfg.extract.tensor_parallel_size):
        emit("info", "extract", message=note)


def _extract_vllm_03(cfg: PipelineConfig, samples: list[dict[str, list[int]]], todo: list[int],
                     hs_dir: Path, progress: Progress) -> None:
    """speculators 0.3.x: its worker extension inside a plain `vllm.LLM` (pipeline.vllm_capture
    says why not its generator), one sample at a time, every row count checked."""
    import torch

    _require_vllm(cfg)
    from pipeline.vllm_capture import VllmCapture

    worker_ids = worker_03_layer_ids(cfg)
    cap = VllmCapture(str(cfg.model_path), worker_ids, max_model_len=cfg.data.max_seq_len + 1,
                      tensor_parallel_size=cfg.extract.tensor_parallel_size,
                      dtype=cfg.extract.dtype, trust_remote_code=cfg.target.trust_remote_code)
    try:
        feed = CaptureFeed(progress)
        with feed.pool:
            for i in todo:
                ids = samples[i]["input_ids"]
                with feed.capturing(len(ids)):
                    by_layer = dict(zip(cap.layers, cap.capture(ids), strict=True))
                path = hs_dir / sample_name("0.3", i)
                feed.hand_over(path, len(ids), partial(
                    write_sample, "0.3", path, torch.tensor(ids, dtype=torch.long),
                    torch.tensor(samples[i]["loss_mask"], dtype=torch.long),
                    [by_layer[w] for w in worker_ids]))
            feed.finish()
    finally:
        cap.close()


VLLM_09_ROUTES = {
    "server": "CUDA present: speculators 0.9's extract_hidden_states server + "
              "generate-offline-data",
    "hooks": "no CUDA here, and vLLM's ExampleHiddenStatesConnector needs it: our worker "
             "extension's layer hooks in vllm.LLM (pipeline.vllm_layer_capture)",
}


def _batches(samples: list[dict[str, list[int]]], todo: list[int],
             budget: int) -> list[list[int]]:
    """`todo` cut into runs of at most `budget` prompt tokens (at least one sample each): one
    run is in flight at a time, and the worker holds its states until it is written."""
    runs: list[list[int]] = []
    used = budget
    for i in todo:
        n = len(samples[i]["input_ids"])
        if used + n > budget:
            runs.append([])
            used = 0
        runs[-1].append(i)
        used += n
    return runs


BATCH_TOKENS = 1 << 15


def _extract_vllm_hooks(cfg: PipelineConfig, samples: list[dict[str, list[int]]],
                        todo: list[int], hs_dir: Path, progress: Progress) -> None:
    """speculators 0.9's files without CUDA (VLLM_09_ROUTES): batches of samples through
    pipeline.vllm_layer_capture, each sample written as soon as its batch is back."""
    from pipeline.vllm_layer_capture import LayerCapture

    cap = LayerCapture(str(cfg.model_path), cfg.all_layer_ids,
                       max_model_len=cfg.data.max_seq_len + 1,
                       tensor_parallel_size=cfg.extract.tensor_parallel_size,
                       dtype=cfg.extract.dtype, trust_remote_code=cfg.target.trust_remote_code,
                       max_num_batched_tokens=cfg.extract.max_num_batched_tokens)
    emit("info", "extract", message=f"capturing layer ids {cfg.all_layer_ids} at the outputs "
         f"of {cap.layers_path}[id-1] ({cap.num_layers} layers; {cap.workers} worker(s), "
         f"capturing on rank {', '.join(map(str, cap.capturing_ranks)) or 'none'})"
         + (f"; not built (text only): {', '.join(cap.not_built)}" if cap.not_built else ""),
         workers=cap.workers, capturing_ranks=cap.capturing_ranks, not_built=cap.not_built)
    try:
        capture_and_write(cap, cfg, samples, todo, hs_dir, progress)
    finally:
        cap.close()


def capture_and_write(cap: Any, cfg: PipelineConfig, samples: list[dict[str, list[int]]],
                      todo: list[int], hs_dir: Path, progress: Progress | None) -> int:
    """The hooks route's work on a started LayerCapture: every sample of `todo` captured batch
    by batch, each batch's files written by a thread while the engine runs the next one (the
    engine computes in its own process; the writes would otherwise add to every batch's time);
    the tokens done. Apart from the engine's start so benchmarks/extract_throughput.py times this
    very loop against plain prefill. The batch's samples are written by the stage's writer pool
    (pipeline.write_pool: several threads where the disk takes more than one thread's copy);
    the next batch's are handed over once they are all written, so memory holds two batches
    at most, as with one writer thread, and a capture that finishes first waits and is
    counted on the progress line."""
    import torch

    dtype = getattr(torch, stored_state_dtype(cfg, "0.9"))
    feed = CaptureFeed(progress)
    with feed.pool:
        for run in _batches(samples, todo, BATCH_TOKENS):
            with feed.capturing(sum(len(samples[i]["input_ids"]) for i in run)):
                got = cap.capture([samples[i]["input_ids"] for i in run])
            feed.pool.wait(0)  # the previous batch's files (a failed write raises here)
            for i, states in zip(run, got, strict=True):
                ids = samples[i]["input_ids"]
                path = hs_dir / sample_name("0.9", i)
                feed.hand_over(path, len(ids), partial(
                    write_sample, "0.9", path, torch.tensor(ids, dtype=torch.long),
                    torch.tensor(samples[i]["loss_mask"], dtype=torch.long), states,
                    dtype=dtype), in_flight=len(run))
            del got
        return feed.finish()


def shard_config_digest(cfg: PipelineConfig) -> str:
    return cfg.section_digest("target", "extract")


def complete_shard(d: Path, key: str) -> dict[str, Any] | None:
    """The shard's manifest when it matches `key` and every file it lists is there, whole."""
    try:
        m = json.loads((d / SHARD_MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if m.get("key") != key:
        return None
    for f in m.get("files", []):
        p = d / "hidden_states" / f["name"]
        if not p.exists() or p.stat().st_size != f["size"]:
            return None
    return dict(m)


LOCAL_DIR = "extract-local"  # under output_dir: this box's own shard (train.data = local-shards)


def local_shard_dir(cfg: PipelineConfig, shard: Shard, n: int) -> Path:
    return cfg.output_dir / LOCAL_DIR / shard_dir_name(shard, n)


def place_local(ctx: StageContext, fmt: str, samples: list[dict[str, Any]],
                hs_dir: Path) -> tuple[list[Path], dict[str, Any]]:
    """The extract stage with train.data = local-shards: the shards this box extracted (their
    manifests match this config's samples, every file there at its size) linked into
    hidden_states/ at their global numbers; the others are not here and never read. Returns
    the placed files and what meta.json records: every shard's range and the ones held."""
    cfg = ctx.cfg
    shards = split([len(s["input_ids"]) for s in samples], len(cfg.extract.hosts))
    n = len(shards)
    held: list[int] = []
    placed: list[Path] = []
    for s in shards:
        d = local_shard_dir(cfg, s, n)
        m = complete_shard(d, shard_key(shard_config_digest(cfg), fmt, samples[s.start:s.end]))
        if m is None or s.count == 0:
            continue
        for j, f in enumerate(m["files"]):
            dest = hs_dir / sample_name(fmt, s.start + j)
            if not dest.exists():
                tmp = dest.with_name(dest.name + ".part")
                try:
                    os.link(d / "hidden_states" / f["name"], tmp)
                except OSError:
                    shutil.copyfile(d / "hidden_states" / f["name"], tmp)
                os.replace(tmp, dest)
            placed.append(dest)
        held.append(s.index)
    if len(held) != 1:
        what = "no shard" if not held else f"shards {[k + 1 for k in held]}"
        raise PipelineError(
            f"extract: train.data = \"local-shards\" and this box holds {what} of this "
            f"config's {n} under {cfg.output_dir / LOCAL_DIR} (each box trains on the one shard "
            "it extracted: `console run` extracts them; docs/pipeline.md)")
    emit("info", "extract", message=f"train.data = local-shards: shard {held[0] + 1}/{n} "
         f"(samples {shards[held[0]].start}..{shards[held[0]].end - 1}) is on this box; the "
         "other shards stay on their boxes", local_shards=held)
    return placed, {"shards": [[s.start, s.end] for s in shards], "local_shards": held}
