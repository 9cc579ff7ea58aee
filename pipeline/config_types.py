"""The pipeline config's shape: its sections as frozen dataclasses, and what a stage's key hashes.

Apart from pipeline/config.py (which loads and checks a config, asking the modules that know:
the dataset, the disk, the trainers), so that every module that only reads a config depends on
this one, not on the checks: the import graph has no cycle (tests/project/test_import_cycles.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.regen_config import REGENERATE_HOW, REGENERATE_KEYS

# Where a stage ran and how often it saved are not what it produced: left out of its key (a
# sharded extraction equals the one-box one).
NOT_IN_KEY = {"extract": ("hosts", "addresses", "copy_port"),
              "train": ("addresses", "rdzv_port", "join_timeout", "checkpoint_every_steps",
                        "checkpoint_every_minutes")}


def resolve(config_path: Path, value: str) -> Path:
    """A path from the config: `~` expanded, relative to the config file's directory."""
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else (config_path.parent / p)


@dataclass(frozen=True)
class TargetConfig:
    model: str
    trust_remote_code: bool = False


@dataclass(frozen=True)
class DataConfig:
    dataset: str
    max_seq_len: int = 2048
    samples: int = 0
    eval_samples: int = 8
    regenerate: bool = False
    regenerate_max_new_tokens: int = 256
    seed: int = 0
    # Regeneration through vLLM: pipeline/regen_config.py says what each key is
    regenerate_temperature: float = 0.0
    regenerate_top_p: float = 1.0
    regenerate_seed: int = 0
    regenerate_concurrency: int = 16
    regenerate_timeout: float = 600.0
    regenerate_keep_thinking: bool = True
    regenerate_reasoning_parser: str = ""
    vllm_url: str = ""


@dataclass(frozen=True)
class ExtractConfig:
    backend: str = "hf"
    layer_ids: tuple[int, ...] = ()
    device: str = "auto"
    dtype: str = "bfloat16"
    tensor_parallel_size: int = 1
    reserve_bytes: int = 1 << 30  # leave this much free on the output disk
    max_num_batched_tokens: int = 0  # backend vllm: the engine's prefill chunk; 0: vLLM's default
    # console.toml host names: extraction sharded across these boxes, gathered on the box that
    # runs the pipeline (docs/pipeline.md "Sharded extraction"); empty: extract runs here
    hosts: tuple[str, ...] = ()
    # A shard box that does not share the output storage copies its shard straight to the
    # training box (pipeline/shard_copy.py): the address the training box reaches each host at
    # (default: the one its sshd was reached on), the port its one-shot server listens on (0: any)
    addresses: tuple[str, ...] = ()
    copy_port: int = 0


@dataclass(frozen=True)
class VocabConfig:
    draft_vocab_size: int = 32000


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 10
    lr: float = 1e-4
    num_layers: int = 1
    ttt_steps: int = 3
    total_seq_len: int = 8192
    device: str = "auto"
    speculators: str = "auto"
    seed: int = 0
    noise_std: float = 0.05
    # Train across these hosts (torchrun c10d on the first); addresses: how boxes reach each other
    hosts: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    rdzv_port: int = 29400
    join_timeout: int = 900  # seconds the first box waits for the others to join
    mode: str = "offline"  # online: a live vLLM server makes the states (trainers/online.py)
    nproc_per_node: int = 0  # ranks (torchrun processes) per box; 0: one per GPU, 1 on CPU
    data: str = "gathered"  # or local-shards: each box on its own (trainers/shard_sampler.py)
    # Resumable checkpoints (pipeline/trainers/resume.py): every N optimizer steps (0: off), and
    # every M minutes of training (0: off); each epoch's end always. Neither is in the key.
    checkpoint_every_steps: int = 0
    checkpoint_every_minutes: float = 30.0


@dataclass(frozen=True)
class EvaluateConfig:
    num_speculative_tokens: int = 3
    max_new_tokens: int = 64
    device: str = "auto"
    draft_tensor_parallel_size: int = 1
    baseline: bool = False  # also measure an untrained head on the same prompts
    # A vLLM server serving the target with the trained head (the serve step's URL): evaluate
    # measures there (live /metrics counters) instead of loading the target with transformers.
    served_url: str = ""
    served_concurrency: int = 4


@dataclass(frozen=True)
class PipelineConfig:
    path: Path
    output_dir: Path
    target: TargetConfig
    data: DataConfig
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    cpu_threads: int = 0  # torch threads for CPU work; 0 = torch's default
    num_layers: int = 0  # the target's decoder layers, read from its config.json
    hidden_size: int = 0
    vocab_size: int = 0

    @property
    def model_path(self) -> Path:
        return resolve(self.path, self.target.model)

    def dataset_path(self) -> Path | None:
        """The local dataset file, or None when data.dataset names a hub dataset."""
        p = resolve(self.path, self.data.dataset)
        return p if p.exists() else None

    @property
    def aux_layer_ids(self) -> list[int]:
        return list(self.extract.layer_ids)

    @property
    def all_layer_ids(self) -> list[int]:
        """The aux ids plus N (the last layer's pre-norm output): what extract stores."""
        return [*self.extract.layer_ids, self.num_layers]

    def section_digest(self, *sections: str) -> str:
        """Hash of the config sections a stage's outputs depend on (manifest matching)."""
        data = {s: asdict(getattr(self, s)) for s in sections}  # json writes tuples as lists
        for sec in sections:
            for key in NOT_IN_KEY.get(sec, ()):
                data[sec].pop(key, None)
        # Paths as resolved, not as written: the same files reached from a config elsewhere
        # (uploaded to the box, relative or absolute) are the same inputs.
        if "target" in sections:
            data["target"]["model"] = str(self.model_path.resolve())
        if "data" in sections:
            ds = self.dataset_path()
            data["data"]["dataset"] = str(ds.resolve()) if ds else self.data.dataset
            # Where and how fast answers are regenerated is not what they are; without
            # regenerate the sampling keys mean nothing (and earlier keys stay as they were).
            for key in REGENERATE_KEYS if not self.data.regenerate else REGENERATE_HOW:
                data["data"].pop(key, None)
        if "train" in sections and data["train"].get("data") == "gathered":
            data["train"].pop("data")  # the default keeps earlier keys
        blob = json.dumps(data, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()
