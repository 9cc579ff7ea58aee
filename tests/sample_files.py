"""A sample file extract wrote, read back in either format: how the tests check
pipeline.formats' writers (the trainers read the files with speculators' own loaders)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def read_sample(fmt: str, path: Path) -> dict[str, Any]:
    import torch

    if fmt == "0.3":
        d = torch.load(path, weights_only=True, map_location="cpu")
        return {"input_ids": d["input_ids"], "states": list(d["hidden_states"])}
    from safetensors.torch import load_file

    d = load_file(str(path))
    return {"input_ids": d["token_ids"], "states": list(d["hidden_states"].unbind(1))}
