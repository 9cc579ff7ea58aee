"""The adapter to speculators 0.3.x's library Trainer over its Eagle3DraftModel: the pipeline builds
the draft model, the data loaders and the trainer itself (pipeline.trainers picks it), on CPU too.

What CPU needs (docs/design.md), and how it is done here without editing speculators:
- device placement: TrainerConfig(local_rank="cpu"); the trainer calls model.to(local_rank)
  and tensor.to(local_rank), which accept a device string.
- flex_attention has no CPU backward: the decoder layers get a dense attention implementation
  registered under its own name, which evaluates the same mask_mod speculators builds into its
  BlockMask on every (query, key) pair and calls scaled_dot_product_attention with it.
- Eagle3DraftModel.forward is wrapped in torch.compile; on CPU that would compile with inductor
  (minutes on two cores), so dynamo is disabled there.
- importing speculators.data_generation runs the package __init__, which imports vLLM; nothing
  here imports that package.
- the trainer globs every file ending in "pt" under its data path: extract writes only
  data_{i}.pt there (partial files end in .part).
- resuming: its checkpointer loads to "cuda:0" (checkpointer.py), so on CPU its two load
  methods are replaced by the same loads to "cpu". It checkpoints at each epoch's end only (no
  finer point exists in its loop); each save is staged and sealed (pipeline/trainers/resume.py)
  and the rerun resumes at the next epoch from the newest complete one.
On GPUs the upstream choices stand (flex attention, compile, local rank 0); under torchrun
(pipeline/ranks.py) its own distributed setup and FSDP path (CUDA only: refused on CPU there).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from pipeline.config_types import PipelineConfig
from pipeline.fit import text_config
from pipeline.progress import Progress
from pipeline.stages import TRAIN
from pipeline.trainers import resume
from pipeline.trainers.common import MetricsToProgress, load_vocab

DENSE_ATTN = "eagle3_console_dense"


def dense_attention_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                            scaling: float | None = None, **_kwargs: Any) -> tuple[Any, None]:
    """The BlockMask's mask_mod evaluated densely: same attention pattern as flex_attention,
    differentiable on CPU. query [B, Hq, Q, D], key/value [B, Hkv, K, D]."""
    import torch
    import torch.nn.functional as F

    q_len, k_len = query.shape[-2], key.shape[-2]
    dev = query.device
    q_idx = torch.arange(q_len, device=dev).view(q_len, 1)
    kv_idx = torch.arange(k_len, device=dev).view(1, k_len)
    zero = torch.zeros((), dtype=torch.long, device=dev)
    mask = attention_mask.mask_mod(zero, zero, q_idx, kv_idx)
    mask = mask.expand(q_len, k_len)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


def build_draft(cfg: PipelineConfig, d2t: Any, t2d: Any, *, dense: bool) -> Any:
    """An untrained Eagle3DraftModel for this target, as speculators' own train script builds
    it, with the layer ids and their convention recorded in its config."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    from pipeline.verifier_view import verifier_dir

    v = text_config(json.loads((cfg.model_path / "config.json").read_text()))
    layer_cfg = LlamaConfig(
        vocab_size=v["vocab_size"], hidden_size=v["hidden_size"],
        intermediate_size=v["intermediate_size"], num_hidden_layers=cfg.train.num_layers,
        num_attention_heads=v["num_attention_heads"],
        num_key_value_heads=v.get("num_key_value_heads", v["num_attention_heads"]),
        hidden_act=v.get("hidden_act", "silu"),
        max_position_embeddings=v.get("max_position_embeddings", 4096),
        initializer_range=v.get("initializer_range", 0.02),
        rms_norm_eps=v.get("rms_norm_eps", 1e-6), head_dim=v.get("head_dim"),
    )
    if dense:
        from transformers.modeling_utils import AttentionInterface

        AttentionInterface.register(DENSE_ATTN, dense_attention_forward)
    layer_cfg._attn_implementation = DENSE_ATTN if dense else "simple_flex_attention"
    spec_cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=layer_cfg,
        draft_vocab_size=int(d2t.shape[0]),
        norm_before_residual=True,
        eagle_aux_hidden_state_layer_ids=cfg.aux_layer_ids,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(
                proposal_type="greedy", speculative_tokens=cfg.train.ttt_steps)],
            default_proposal_method="greedy",
            # A text-only view for wrappers / remote-code models (pipeline.verifier_view).
            verifier=VerifierConfig(name_or_path=str(verifier_dir(cfg.model_path,
                                                                  cfg.output_dir)),
                                    architectures=v.get("architectures") or ["LlamaForCausalLM"]),
        ),
    )
    return Eagle3DraftModel(config=spec_cfg, t2d=t2d, d2t=d2t)


class _MetricsToProgress(MetricsToProgress):
    resumed_from: int | None = None

    def report(self, msg: dict[str, Any]) -> None:
        said = {} if self.resumed_from is None else {"resumed_from": self.resumed_from}
        self.progress.advance(loss=self.last.get("loss"), epoch=msg.get("epoch"),
                              acc_0=self.last.get("full_acc_0"), **said)


def _load_on_cpu() -> None:
    """Its SingleGPUCheckpointer loads to "cuda:0" (written into the source): the same loads
    to "cpu"."""
    import torch
    from speculators.train import checkpointer as ck

    def load_model(self: Any, model: Any, float_dtype: Any = None) -> None:
        state = ck.load_safetensors_state_dict(self.model_path(self.previous_epoch), "cpu")
        model.load_state_dict(ck.convert_float_dtype(state, float_dtype or model.dtype),
                              strict=False)

    def load_opt(self: Any, model: Any, optimizer: Any, float_dtype: Any = None) -> None:
        state = torch.load(self.optimizer_path(self.previous_epoch), weights_only=True,
                           map_location="cpu")
        optimizer.load_state_dict(ck.convert_float_dtype(state, float_dtype or model.dtype))

    ck.SingleGPUCheckpointer.load_model_state_dict = load_model  # type: ignore[method-assign]
    ck.SingleGPUCheckpointer.load_optimizer_state_dict = load_opt  # type: ignore[method-assign]


def train(cfg: PipelineConfig, extract_dir: Path, vocab_dir: Path, save_dir: Path,
          device: str) -> dict[str, Any]:
    """The library Trainer on extract's data_{i}.pt files (under hidden_states/)."""
    import torch
    from speculators.train.data import (
        Eagle3SampleFileDataset,
        create_collate_fn,
        list_files,
        standardize_data_v1,
    )
    from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2
    from speculators.train.noise_transforms import AddUniformNoise
    from speculators.train.trainer import Trainer, TrainerConfig
    from torch.utils.data import DataLoader

    cpu = device == "cpu"
    if cpu:
        import torch._dynamo

        torch._dynamo.config.disable = True
    # Under torchrun (pipeline/ranks.py; CUDA only, refused on CPU there): speculators' own
    # setup (device index, nccl) and its FSDP path, each rank on its share of the batches.
    distributed = "LOCAL_RANK" in os.environ  # speculators' own rule (one GPU included)
    local_rank: int | str = "cpu" if cpu else 0
    rank, world = 0, 1
    if distributed:
        from speculators.train.utils import maybe_setup_distributed

        local_rank, world, rank, _ = maybe_setup_distributed()
    torch.manual_seed(cfg.train.seed)
    d2t, t2d = load_vocab(vocab_dir)
    model = build_draft(cfg, d2t.to(device), t2d.to(device), dense=cpu)
    seq = cfg.train.total_seq_len
    files = sorted(str(p) for p in list_files(str(extract_dir / "hidden_states")))

    def loader(file_list: list[str], noise: bool) -> Any:
        ds = Eagle3SampleFileDataset(
            file_list=file_list, max_len=seq, standardize_fn=standardize_data_v1,
            transform=AddUniformNoise(std=cfg.train.noise_std,
                                      tensors=("hidden_states", "verifier_last_hidden_states"))
            if noise and cfg.train.noise_std > 0 else None)
        sampler = MultipackDistributedBatchSamplerV2(
            batch_max_length=seq, lengths=ds.approx_lengths, num_replicas=world, rank=rank,
            seed=cfg.train.seed)
        return DataLoader(ds, batch_sampler=sampler, num_workers=0 if cpu else 4,
                          pin_memory=not cpu, collate_fn=create_collate_fn(seq))

    # A validation split only when there is enough data for one to mean something.
    n_val = len(files) // 10 if len(files) >= 20 else 0
    train_loader = loader(files[n_val:], noise=True)
    val_loader = loader(files[:n_val], noise=False) if n_val else None
    steps = cfg.train.epochs * len(train_loader)
    progress = Progress(TRAIN, steps, "steps")
    handler = _MetricsToProgress(progress)
    if cpu:
        _load_on_cpu()
    per_epoch = len(train_loader)
    found = resume.choose(save_dir, rank=rank)
    if found is not None:  # its own rule: the newest epoch directory, the next epoch on
        found[1]["steps_per_epoch"] = found[1].get("steps_per_epoch") or per_epoch
    got = resume.announce(found, cfg.train.epochs)
    if got.resumed:
        handler.resumed_from = got.step
        progress.resume_at(got.step)
    metrics_logger = logging.getLogger("speculators.metrics")
    metrics_logger.setLevel(logging.INFO)
    metrics_logger.addHandler(handler)
    call = {"use_off_policy_tokens": False, "ttt_steps": cfg.train.ttt_steps,
            "ttt_step_loss_decay": 1.0}
    trainer = Trainer(model, TrainerConfig(
        lr=cfg.train.lr, num_epochs=cfg.train.epochs, save_path=str(save_dir),
        resume_from_checkpoint=True, is_distributed=distributed,
        local_rank=local_rank,  # type: ignore[arg-type]
        train_call_kwargs=call, val_call_kwargs=call,
    ), train_loader, val_loader)
    saves = resume.Saves(cfg.train.epochs)
    own_save = trainer.save_checkpoint

    def whole_save(epoch: int) -> None:
        info = {"epoch": epoch, "local_step": 0, "global_step": (epoch + 1) * per_epoch,
                "steps_per_epoch": per_epoch, "epochs": cfg.train.epochs}
        saves.around(trainer.checkpointer, rank, epoch, lambda: own_save(epoch), info)

    trainer.save_checkpoint = whole_save  # type: ignore[method-assign]
    try:
        trainer.run_training()
    finally:
        metrics_logger.removeHandler(handler)
        if distributed:
            from speculators.train.utils import maybe_destroy_distributed

            maybe_destroy_distributed()
    progress.update(progress.done, force=True)
    return {"steps": progress.done, "final": handler.last,
            **resume.summary(got, progress.done)}


def load_trained(cfg: PipelineConfig, checkpoint: Path, vocab_dir: Path, device: str) -> Any:
    """The head from a checkpoint directory, built as in training (dense attention)."""
    from safetensors.torch import load_file

    d2t, t2d = load_vocab(vocab_dir)
    model = build_draft(cfg, d2t, t2d, dense=True)
    state = load_file(str(checkpoint / "model.safetensors"))
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    return model.to(device).float().eval()


def untrained(cfg: PipelineConfig, vocab_dir: Path, device: str) -> Any:
    import torch

    torch.manual_seed(cfg.train.seed)
    d2t, t2d = load_vocab(vocab_dir)
    return build_draft(cfg, d2t, t2d, dense=True).to(device).float().eval()


def draft_tokens(model: Any, hidden: Any, input_ids: Any, k: int) -> list[int]:
    """k greedy draft tokens (target vocabulary) after the last position, from the model's own
    forward: hidden [L, 3H] (target states for positions 0..L-1), input_ids [L] (tokens 1..L)."""
    import torch

    with torch.no_grad():
        out = model(hidden_states=hidden[None].float(), input_ids=input_ids[None], ttt_steps=k)
    ids = [int(t[0, -1]) for t in out]
    d2t = model.d2t
    return [i + int(d2t[i]) for i in ids]
