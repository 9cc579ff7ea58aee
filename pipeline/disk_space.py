"""Free-space checks before a stage writes: a stage that would fill the disk refuses at its
start with the figures (needed, reserve, free) instead of dying half-way through a shard file."""
from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from pipeline.diskfull import mount_point
from pipeline.errors import NotEnoughDisk
from pipeline.units import fmt_bytes

if TYPE_CHECKING:
    from pipeline.config_types import PipelineConfig


def check_free_space(cfg: PipelineConfig, needed: int, *, what: str) -> None:
    free = shutil.disk_usage(mount_point(cfg.output_dir)).free
    reserve = cfg.extract.reserve_bytes
    if needed + reserve > free:
        raise NotEnoughDisk(
            str(cfg.path),
            f"not enough disk under {cfg.output_dir}: {what} need {fmt_bytes(needed)} "
            f"({needed} bytes) + reserve {fmt_bytes(reserve)}, free {fmt_bytes(free)} ({free} bytes)")

