"""Device and dtype choices shared by the stages (torch imported lazily by callers)."""

from __future__ import annotations

from typing import Any


def pick_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        from pipeline.errors import ConfigInvalid

        raise ConfigInvalid("device", "cuda requested but torch sees no GPU")
    return name


def torch_dtype(name: str, device: str) -> Any:
    import torch

    if device == "cpu" and name == "float16":
        return torch.float32  # fp16 matmuls on CPU are slow or missing
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]
