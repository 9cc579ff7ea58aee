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

import json
import os
import shutil
import struct
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline import torch_zip
from pipeline.config_types import PipelineConfig
from pipeline.errors import ConfigInvalid
from pipeline.writev import IOV, writev_all


def installed(package: str = "speculators") -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def speculators_path(cfg: PipelineConfig) -> str:
    """'0.3' or '0.9': the training path (and so the extract format) for this environment."""
    if cfg.train.speculators != "auto":
        return cfg.train.speculators
    v = installed()
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
        sample = {"input_ids": input_ids.to(torch.long).cpu(),
                  "hidden_states": [s.to(torch.bfloat16).cpu().contiguous() for s in states],
                  "loss_mask": loss_mask.to(torch.long).cpu()}
        # torch.save's file without its slow CRC (pipeline/torch_zip.py, issue #54)
        if not torch_zip.save(sample, tmp):
            torch.save(sample, tmp)
    elif not _write_safetensors_rows(tmp, input_ids, states, dtype):
        from safetensors.torch import save_file

        save_file({"token_ids": input_ids.to(torch.long).cpu().contiguous(),
                   "hidden_states": torch.stack(states, dim=1).to(dtype).cpu()
                   .contiguous()}, str(tmp))
    os.replace(tmp, path)


# Row buffers per writev call in the 0.9 writer, under CPython's 700 allocations between young
# collections: a batch's memoryviews are freed before the collector runs, so none is promoted.
# At 1,024 (IOV) a sample's 8,192 row views ran ~7 young collections and promoted ~1,000 views
# to the old generation, which set off a full collection of the process's ~167k objects
# (140-220 ms) every ~60 samples: ~5 % of the writer's CPU (docs/measurements.md, issue #54).
ROWS_IOV = IOV // 2
_SAFETENSORS_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def _write_safetensors_rows(tmp: Path, input_ids: Any, states: list[Any], dtype: Any) -> bool:
    """The 0.9 file written straight from the layer tensors, row by row with writev: the same
    bytes as safetensors' save_file of the stacked [seq, 4, H] tensor (tests/pipeline/
    test_formats_writer.py compares them), without the stack, a second full copy of every
    sample (at Kimi-K2.5's width 117 MB per 2,048 tokens; docs/measurements.md, the extract
    writer). False, and nothing written, where the states are not CPU tensors of `dtype`, one
    contiguous [seq, H] each: save_file's path then."""
    import torch

    name = _SAFETENSORS_DTYPES.get(str(dtype).removeprefix("torch."))
    if (name is None or not hasattr(os, "writev") or not states or input_ids.dim() != 1
            or any(s.dtype != dtype or s.device.type != "cpu" or s.dim() != 2
                   or not s.is_contiguous() or s.shape != states[0].shape for s in states)):
        return False
    seq, hidden = states[0].shape
    ids = input_ids.to(torch.long).cpu().contiguous()
    if ids.numel() != seq:
        return False
    row = hidden * states[0].element_size()
    n_ids = ids.numel() * 8
    # safetensors orders tensors by alignment, then name: the int64 ids first
    header = json.dumps({
        "token_ids": {"dtype": "I64", "shape": [seq], "data_offsets": [0, n_ids]},
        "hidden_states": {"dtype": name, "shape": [seq, len(states), hidden],
                          "data_offsets": [n_ids, n_ids + seq * len(states) * row]},
    }, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    views = [memoryview(s.reshape(-1).view(torch.uint8).numpy()).cast("B") for s in states]
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        head = [memoryview(struct.pack("<Q", len(header)) + header),
                memoryview(ids.view(torch.uint8).numpy()).cast("B")]
        writev_all(fd, head, 8 + len(header) + n_ids)
        step = ROWS_IOV // len(states)
        for r0 in range(0, seq, step):
            r1 = min(seq, r0 + step)
            writev_all(fd, [v[r * row:(r + 1) * row] for r in range(r0, r1) for v in views],
                        (r1 - r0) * len(views) * row)
    finally:
        os.close(fd)
    return True


def write_arrow_dataset(workdir: Path, samples: list[dict[str, list[int]]]) -> list[Path]:
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
        dest.unlink(missing_ok=True)
        child.rename(dest)
        files.append(dest)
    tmp.rmdir()
    return files
