"""The adapter to speculators 0.9.x's `speculators train` command: its TrainConfig + cli.main run in
this process with the argv the command would take (pipeline.trainers picks it), and its
Eagle3DraftModel for evaluation, on CPU too.

What CPU needs (docs/design.md), done without editing speculators:
- its local rank must be the string "cpu": maybe_setup_distributed() sets it to 0 (a CUDA
  ordinal) for a single process, so the name the CLI module imported is wrapped to set "cpu"
  after it ran. Under torchrun (several ranks, pipeline/ranks.py) its setup asks the
  accelerator for the device and backend (`torch.accelerator.set_device_index`: "Cannot access
  accelerator device when none is available"), so on CPU the wrapper does that setup with gloo
  instead (init_process_group, then its own SP/DP groups); its trainer's DDP and distributed
  batch sampler then run unchanged;
- torch.accelerator.synchronize() (its step timer) fails without an accelerator: a no-op;
- its checkpointer loads a resumed checkpoint to get_current_device(), "cuda:0" without an
  accelerator: "cpu" instead;
- flags --draft-attn-impl sdpa --loss-implementation eager --num-workers 0.
Checkpoints (pipeline/trainers/resume.py): its own resume (`resume_from_checkpoint`, the saved
local and global step) from the newest checkpoint that checks; `train.checkpoint_every_steps`
is its `checkpoint_freq` (a float in epochs: N / steps per epoch, set once the loader is built);
`train.checkpoint_every_minutes` saves through the same save call from its per-step callback,
rank 0's clock deciding for every rank; each save is staged and published whole.
Layer ids: 0.9 uses the pipeline's convention (id L enters layer L, N is the last layer's
output), so --target-layer-ids gets the three auxiliary ids as they are.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from pipeline.config_types import PipelineConfig
from pipeline.errors import PipelineError
from pipeline.progress import Progress
from pipeline.stages import TRAIN
from pipeline.trainers import resume
from pipeline.trainers.common import METRICS_KEY, MetricsToProgress, load_vocab


def _cpu_patches() -> None:
    import torch

    torch.accelerator.synchronize = lambda *_a, **_k: None  # type: ignore[assignment]
    import speculators.train.checkpointer as checkpointer
    import speculators.train.cli as cli

    # Resuming loads to its "current device", "cuda:0" when there is no accelerator.
    checkpointer.get_current_device = lambda: "cpu"  # type: ignore[attr-defined]
    import speculators.train.distributed as distributed

    original = distributed.maybe_setup_distributed

    def setup_on_cpu(sp_size: int = 1) -> None:
        if "LOCAL_RANK" not in os.environ:  # one process: upstream's own setup
            original(sp_size)
        else:  # torchrun on CPU: upstream's setup with gloo instead of the accelerator's
            import torch.distributed as dist

            dist.init_process_group("gloo")
            distributed._is_distributed = True
            distributed._rank = dist.get_rank()
            distributed._world_size = dist.get_world_size()
            distributed._init_sp_process_groups(distributed._rank, distributed._world_size,
                                                sp_size)
        distributed._local_rank = "cpu"  # type: ignore[assignment]

    cli.maybe_setup_distributed = setup_on_cpu  # type: ignore[attr-defined]


def _ddp_options() -> Any:
    """speculators wraps its model in DistributedDataParallel with torch's defaults (trainer.py
    `_setup_model_ddp`); here with `forward_sync_buffers=False` (`broadcast_buffers=False` on
    an older torch): by default rank 0's buffers are broadcast before every forward, one more
    collective a step at which the ranks wait for the slowest, and the head's buffers are
    constants (d2t/t2d, read from the vocab stage's files, and the rotary frequencies);
    `batched_grad_copy` where torch has it: a bucket's gradients copied in one op, not one per
    parameter, the same values (issue 51, docs/measurements.md). Returns the undo."""
    from speculators.train import trainer as trainer_mod

    ddp = trainer_mod.DistributedDataParallel
    known = inspect.signature(ddp.__init__).parameters
    extra: dict[str, Any] = ({"forward_sync_buffers": False} if "forward_sync_buffers" in known
                             else {"broadcast_buffers": False})
    if "batched_grad_copy" in known:
        extra["batched_grad_copy"] = True

    class Ddp(ddp):  # type: ignore[misc,valid-type]
        def __init__(self, module: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(module, *args, **{**extra, **kwargs})

    trainer_mod.DistributedDataParallel = Ddp
    return lambda: setattr(trainer_mod, "DistributedDataParallel", ddp)


def train_argv(cfg: PipelineConfig, data_dir: Path, vocab_dir: Path, save_dir: Path,
               device: str) -> list[str]:
    t = cfg.train
    argv = [
        "--speculator-type", "eagle3",
        "--verifier-name-or-path", str(cfg.model_path),
        "--data-path", str(data_dir),
        "--save-path", str(save_dir),
        "--log-dir", str(save_dir.parent / "logs"),
        "--epochs", str(t.epochs),
        "--lr", str(t.lr),
        "--num-layers", str(t.num_layers),
        "--ttt-steps", str(t.ttt_steps),
        "--total-seq-len", str(t.total_seq_len),
        "--d2t-path", str(vocab_dir / "d2t.npy"),
        "--t2d-path", str(vocab_dir / "t2d.npy"),
        "--draft-vocab-size", str(cfg.vocab.draft_vocab_size),
        "--target-layer-ids", *[str(i) for i in cfg.aux_layer_ids],
        "--seed", str(t.seed),
        "--on-missing", "raise",
    ]
    if cfg.target.trust_remote_code:
        argv.append("--trust-remote-code")
    if device == "cpu":
        argv += ["--draft-attn-impl", "sdpa", "--loss-implementation", "eager",
                 "--num-workers", "0", "--hidden-states-dtype", "float32"]
    return argv


def _node_sampler(cfg: PipelineConfig, extract_dir: Path) -> tuple[Any, list[Any], list[Any]] | None:
    """train.data = local-shards: speculators' dataloader module gets our per-node sampler
    (pipeline/trainers/shard_sampler.py) in place of its global one, so this box's ranks pack
    only the shard this box holds (extract's meta.json: every shard's range and the one held).
    Returns (undo, record, val): record collects (epoch, global indices) of the train split,
    val the validation split's samplers."""
    from pipeline.trainers.shard_sampler import LOCAL_SHARDS, NodeShards, NodeShardSampler

    if cfg.train.data != LOCAL_SHARDS:
        return None
    meta = json.loads((extract_dir / "meta.json").read_text())
    shards = NodeShards(tuple((int(a), int(b)) for a, b in meta["shards"]))
    held = list(meta["local_shards"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != len(shards.ranges) * local_world:
        raise PipelineError(
            f"train.data = \"local-shards\": {world} ranks in all for {len(shards.ranges)} "
            f"shards of {local_world} rank(s) each: every box must run the same number of ranks "
            "(train.nproc_per_node)")
    node, local_rank = int(held[0]), int(os.environ.get("LOCAL_RANK", "0"))
    import speculators.train.dataloader as dataloader

    original = dataloader._setup_dataloader
    record: list[Any] = []
    val: list[NodeShardSampler] = []

    def setup(dataset: Any, *args: Any, **kwargs: Any) -> Any:
        offset = int(getattr(dataset, "start_file_idx", 0))
        train_split = offset == 0

        def sampler(*, batch_max_length: int, lengths: Any, num_replicas: int, rank: int,
                    seed: int = 0, max_batches: int | None = None) -> NodeShardSampler:
            made = NodeShardSampler(lengths=list(lengths), batch_max_length=batch_max_length,
                                    offset=offset, shards=shards, node=node,
                                    local_rank=local_rank, local_world=local_world, seed=seed,
                                    max_batches=max_batches,
                                    record=record if train_split else None)
            if not train_split:
                val.append(made)
            return made

        dataloader.MultipackDistributedBatchSamplerV2 = sampler  # type: ignore[assignment,misc]
        try:
            return original(dataset, *args, **kwargs)
        finally:
            dataloader.MultipackDistributedBatchSamplerV2 = upstream

    upstream = dataloader.MultipackDistributedBatchSamplerV2
    dataloader._setup_dataloader = setup  # type: ignore[assignment]
    return (lambda: setattr(dataloader, "_setup_dataloader", original)), record, val


def _runs(indices: list[int]) -> list[list[int]]:
    """[[first, last], ...] of consecutive indices: a shard's samples in a few numbers."""
    out: list[list[int]] = []
    for i in sorted(indices):
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


class _MetricsToProgress(MetricsToProgress):
    """A step's metrics become a (rate-limited) progress record; an epoch's validation
    metrics (logged once per epoch, after its checkpoint) a record of their own, always
    printed: after the last epoch it marks the end of training (`trained`), before
    speculators' teardown, so a rate read off the records (benchmarks/train_scaling.py) covers
    the training, not the clean-up after it. The first epoch's step count fixes the total (the
    estimate counts every token; speculators holds a tenth back for validation)."""

    def __init__(self, progress: Progress, epochs: int) -> None:
        super().__init__(progress)
        self.epochs = epochs
        self.val: dict[str, float] = {}
        self.val_samplers: list[Any] = []  # local shards: pad batches to leave out of the loss
        self.resumed_from: int | None = None
        self.sealed: Any = lambda block=True: None  # resume.Saves.wait: its line said first

    def resumed(self, got: resume.Resumed) -> None:
        """A run resumed at step got.step: progress goes on from there (the rate counts only
        this run's steps) and every record says where it resumed (the loss chart keeps the
        curve up to there)."""
        self.resumed_from = got.step
        if got.total:
            self.progress.total = got.total
        self.progress.resume_at(got.step)

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        msg = record.msg
        if isinstance(msg, dict) and isinstance(msg.get("val"), dict) and "epoch" in msg:
            self.epoch_end(int(msg["epoch"]), msg["val"])

    def report(self, msg: dict[str, Any]) -> None:
        self.sealed(block=False)
        step = int(msg.get("global_step", self.progress.done)) + 1
        self.progress.update(step, epoch=msg.get("epoch"),
                             loss=self.last.get("loss", self.last.get("loss_sum")),
                             **self._from())

    def _from(self) -> dict[str, Any]:
        return {} if self.resumed_from is None else {"resumed_from": self.resumed_from}

    def epoch_end(self, epoch: int, val: dict[str, Any]) -> None:
        self.sealed()  # the epoch's checkpoint line before its validation's (the end: `trained`)
        # speculators' loss figures are means over every rank's batches, a pad (local shards)
        # counting as loss 0: scaled to the mean over the real ones (shard_sampler.py).
        every, real = self.val_samplers[-1].filled if self.val_samplers else (1, 1)
        scale = every / real if real else 1.0
        self.val = {k: round(float(v) * (scale if "loss" in k else 1.0), 5)
                    for k, v in val.items() if isinstance(v, (int, float))}
        if epoch == 0 and self.progress.done:
            self.progress.total = self.progress.done * self.epochs
        self.progress.update(self.progress.done, force=True, epoch=epoch,
                             val_loss=self.val.get("loss_epoch"),
                             trained=epoch + 1 >= self.epochs, **self._from())


class _NoStepDicts(logging.Filter):
    """speculators' console handler (rank 0's) renders every step's metric dict through rich,
    ~25 lines a step: most of the stage's log, and 2-3 ms of rank 0's CPU a step (measured
    here), which the other ranks wait for at the next all-reduce. The step's loss reaches the
    log as a progress record instead; the per-epoch validation dicts still print."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "speculators.metrics" and isinstance(record.msg, dict)
                    and METRICS_KEY in record.msg)


def train(cfg: PipelineConfig, extract_dir: Path, vocab_dir: Path, save_dir: Path,
          device: str) -> dict[str, Any]:
    """`speculators train` on extract's hidden_states/hs_{i}.safetensors (its --data-path is
    extract's directory)."""
    return train_with(cfg, extract_dir, device, train_argv(cfg, extract_dir, vocab_dir, save_dir,
                                                            device))


def train_with(cfg: PipelineConfig, extract_dir: Path, device: str,
               argv: list[str]) -> dict[str, Any]:
    """`speculators train` with this argv (online mode's: pipeline.trainers.online), its
    metrics as our progress records."""
    if device == "cpu":
        _cpu_patches()
    from speculators.train.cli import main
    from speculators.train.config import TrainConfig

    n_tokens = json.loads((extract_dir / "meta.json").read_text())["tokens"] \
        if (extract_dir / "meta.json").exists() else 0
    # Under torchrun each rank steps through its share of the batches.
    world = int(os.environ.get("WORLD_SIZE", "1"))
    approx_steps = max(1, -(-cfg.train.epochs * -(-n_tokens // cfg.train.total_seq_len) // world))
    progress = Progress(TRAIN, approx_steps, "steps")
    handler = _MetricsToProgress(progress, cfg.train.epochs)
    metrics = logging.getLogger("speculators.metrics")
    quiet = _NoStepDicts()
    import speculators.train.cli as cli

    original_setup = cli.setup_metric_logger

    def setup_then_attach(*args: Any, **kwargs: Any) -> None:
        # Its dictConfig replaces the metric logger's handlers: attach ours after it.
        original_setup(*args, **kwargs)
        metrics.setLevel(logging.INFO)
        metrics.addHandler(handler)
        for h in logging.getLogger().handlers:  # its console handler (setup_root_logger)
            h.filters.insert(0, quiet)  # before its FormatDictFilter turns the dict to text

    cli.setup_metric_logger = setup_then_attach  # type: ignore[attr-defined]
    node = _node_sampler(cfg, extract_dir)
    if node is not None:
        handler.val_samplers = node[2]
    save_dir = Path(argv[argv.index("--save-path") + 1])
    undo, saves, got = resume.patch_09(cfg, save_dir, handler)
    handler.sealed = saves.wait
    undo_ddp = _ddp_options()
    try:
        with saves.training():  # a seal in flight is ended and said even if the trainer raises
            main(TrainConfig.resolve(argv))
    finally:
        undo_ddp()
        undo()
        if node is not None:
            node[0]()
        metrics.removeHandler(handler)
        for h in logging.getLogger().handlers:
            h.removeFilter(quiet)
        cli.setup_metric_logger = original_setup  # type: ignore[attr-defined]
    resumed = got[0] if got else resume.Resumed()
    for copy in resumed.received:  # a rank > 0's copy of rank 0's checkpoint: not its own
        shutil.rmtree(copy, ignore_errors=True)
    if saves.interrupted:  # speculators' SIGTERM path returns as if training had ended
        raise PipelineError(f"train: interrupted by a signal at step {progress.done}: the "
                            "newest sealed checkpoint is kept and a rerun resumes from it")
    progress.total = max(progress.total, progress.done)
    progress.update(progress.done, force=True, **handler._from())
    out = {"steps": progress.done, "final": handler.last, "val": handler.val,
           **resume.summary(resumed, progress.done)}
    if node is not None:  # what this rank read: its box's shard, epoch by epoch
        out["samples"] = {str(e): _runs(ix) for e, ix in node[1]}
    return out


def _prepare_model(model: Any, device: str) -> Any:
    # Evaluation runs the model's own forward on arbitrary lengths: dense (sdpa) attention.
    from torch.nn.attention.flex_attention import create_mask

    cfg = model.config.transformer_layer_config
    cfg._attn_implementation = "sdpa"
    model._attn_impl = "sdpa"
    model._create_mask_fn = create_mask  # what its __init__ picks for sdpa
    return model.to(device).float().eval()


def load_trained(cfg: PipelineConfig, checkpoint: Path, vocab_dir: Path, device: str) -> Any:
    from speculators.models.eagle3 import Eagle3DraftModel

    if device == "cpu":
        import torch._dynamo

        torch._dynamo.config.disable = True
    model = Eagle3DraftModel.from_pretrained(str(checkpoint))
    return _prepare_model(model, device)


def untrained(cfg: PipelineConfig, vocab_dir: Path, device: str) -> Any:
    import torch
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.train.cli import create_transformer_layer_config

    torch.manual_seed(cfg.train.seed)
    d2t, t2d = load_vocab(vocab_dir)
    layer_cfg = create_transformer_layer_config(
        verifier_name_or_path=str(cfg.model_path), num_layers=cfg.train.num_layers,
        draft_arch="llama", hidden_act="silu", sliding_window=0, full_attention_indices=[],
        mrope_full_head_hack=False, trust_remote_code=cfg.target.trust_remote_code)
    model = Eagle3DraftModel.from_training_args(
        verifier_config=layer_cfg, t2d=t2d, d2t=d2t, draft_vocab_size=int(d2t.shape[0]),
        norm_before_residual=True, verifier_name_or_path=str(cfg.model_path),
        target_layer_ids=cfg.aux_layer_ids, ttt_steps=cfg.train.ttt_steps,
        draft_attn_impl="sdpa")
    return _prepare_model(model, device)


def draft_tokens(model: Any, hidden: Any, input_ids: Any, k: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model(hidden_states=hidden[None].float(), input_ids=input_ids[None],
                    document_ids=torch.zeros_like(input_ids)[None], ttt_steps=k)
    ids = [int(t[0, -1]) for t in out]
    d2t = model.d2t
    return [i + int(d2t[i]) for i in ids]
