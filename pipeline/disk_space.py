"""Free-space checks before a stage writes: a stage that would fill the disk refuses at its
start with the figures (needed, reserve, free) instead of dying half-way through a shard file."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.errors import NotEnoughDisk

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig


def free_bytes(path: Path) -> int:
    probe = path
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_free_space(cfg: PipelineConfig, needed: int, *, what: str) -> None:
    free = free_bytes(cfg.output_dir)
    reserve = cfg.extract.reserve_bytes
    if needed + reserve > free:
        raise NotEnoughDisk(
            str(cfg.path),
            f"not enough disk under {cfg.output_dir}: {what} need {human(needed)} "
            f"({needed} bytes) + reserve {human(reserve)}, free {human(free)} ({free} bytes)")


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"
