"""What both trainer adapters share: the vocabulary mapping files and speculators' metric records
turned into stage progress."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pipeline.progress import Progress


def load_vocab(vocab_dir: Path) -> tuple[Any, Any]:
    """(d2t, t2d) as tensors, from the vocab stage's d2t.npy / t2d.npy."""
    import numpy as np
    import torch

    return (torch.from_numpy(np.load(vocab_dir / "d2t.npy")),
            torch.from_numpy(np.load(vocab_dir / "t2d.npy")))


METRICS_KEY = "train"  # not a stage: the key of speculators' per-step metrics dict


class MetricsToProgress(logging.Handler):
    """speculators logs a dict per step on the `speculators.metrics` logger ({METRICS_KEY:
    {...}, "epoch": ...}); each adapter says how one becomes progress (`report`), the last step's
    numbers are kept for the stage's result."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.INFO)
        self.progress = progress
        self.last: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg
        if isinstance(msg, dict) and METRICS_KEY in msg:
            self.last = {k: round(float(v), 5) for k, v in msg[METRICS_KEY].items()
                         if isinstance(v, (int, float))}
            self.report(msg)

    def report(self, msg: dict[str, Any]) -> None:
        raise NotImplementedError
