"""The on-disk formats each speculators version trains from, and which one is installed.

0.3.x: `hidden_states/data_{i}.pt`, a torch.save'd dict: input_ids int64 [seq], hidden_states a
list of 4 bf16 [seq, H] tensors (3 auxiliary layers, then the last layer before the final norm),
loss_mask int64 [seq]. Its trainer globs every file ending in "pt" under the directory, so
partial files are named `*.part` and nothing else lives there.

0.9.x: `hidden_states/hs_{row}.safetensors`: token_ids int64 [seq], hidden_states bf16
[seq, 4, H] (same order); loss masks live in the prepared dataset (`data.jsonl`, one row per
sample with input_ids and loss_mask, the rows `speculators prepare-data` passes through).
"""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.errors import ConfigInvalid


def installed_speculators() -> str | None:
    try:
        return metadata.version("speculators")
    except metadata.PackageNotFoundError:
        return None


def speculators_path(cfg: PipelineConfig) -> str:
    """'0.3' or '0.9': the training path (and so the extract format) for this environment."""
    if cfg.train.speculators != "auto":
        return cfg.train.speculators
    v = installed_speculators()
    if v is None:
        raise ConfigInvalid(str(cfg.path), "speculators is not installed in this python "
                            "(0.3.x or 0.9.x is needed for extract and train)")
    if v.startswith("0.3."):
        return "0.3"
    if v.startswith("0.9."):
        return "0.9"
    raise ConfigInvalid(str(cfg.path), f"speculators {v} is neither 0.3.x nor 0.9.x; set "
                        "train.speculators to the format it reads if you know it")


def sample_name(fmt: str, index: int) -> str:
    return f"data_{index}.pt" if fmt == "0.3" else f"hs_{index}.safetensors"


def write_sample(fmt: str, path: Path, input_ids: Any, loss_mask: Any,
                 states: list[Any], dtype: Any = None) -> None:
    """Write one sample atomically: a partial file never has the final name. States are
    stored as bf16 unless `dtype` says otherwise (0.9 only: vLLM's connector writes the
    engine's dtype, and 0.9's loader casts to its --hidden-states-dtype)."""
    import torch

    dtype = dtype or torch.bfloat16

    tmp = path.with_name(path.name + ".part")
    if fmt == "0.3":
        torch.save({"input_ids": input_ids.to(torch.long).cpu(),
                    "hidden_states": [s.to(torch.bfloat16).cpu().contiguous() for s in states],
                    "loss_mask": loss_mask.to(torch.long).cpu()}, tmp)
    else:
        from safetensors.torch import save_file

        save_file({"token_ids": input_ids.to(torch.long).cpu().contiguous(),
                   "hidden_states": torch.stack(states, dim=1).to(dtype).cpu()
                   .contiguous()}, str(tmp))
    os.replace(tmp, path)


def read_sample(fmt: str, path: Path) -> dict[str, Any]:
    import torch

    if fmt == "0.3":
        d = torch.load(path, weights_only=True, map_location="cpu")
        return {"input_ids": d["input_ids"], "states": list(d["hidden_states"])}
    from safetensors.torch import load_file

    d = load_file(str(path))
    return {"input_ids": d["token_ids"], "states": list(d["hidden_states"].unbind(1))}
