"""The adapters to speculators' trainers, and the one place that picks between them.

speculators changed its training API between the two releases the pipeline supports:
- 0.3.x has a library `Trainer` over its `Eagle3DraftModel` (library.py): the pipeline builds the
  draft model, the data loaders and the trainer itself;
- 0.9.x has the `speculators train` command (cli.py): the pipeline runs its `main` in this
  process with the argv it would take.
Which one runs is `for_config(cfg)`, from `train.speculators` or the installed release
(pipeline.formats.speculators_path): the extract format follows the same switch.

Each adapter has the same four entry points (`Trainer`): `train` (the train stage: one process,
or, with several ranks, every rank under torchrun calls it: pipeline/ranks.py),
`load_trained` and `untrained` (the heads evaluate compares) and `draft_tokens` (a head's greedy
proposal). Both make speculators run on CPU without editing it; what that takes is in each
module's docstring.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol, cast

from pipeline.config_types import PipelineConfig
from pipeline.formats import speculators_path

ADAPTERS = {"0.3": "pipeline.trainers.library", "0.9": "pipeline.trainers.cli"}


class Trainer(Protocol):
    def train(self, cfg: PipelineConfig, extract_dir: Path, vocab_dir: Path, save_dir: Path,
              device: str) -> dict[str, Any]:
        """Train a head from extract's output into save_dir/<epoch>/; {"steps", "final"}."""
        ...

    def load_trained(self, cfg: PipelineConfig, checkpoint: Path, vocab_dir: Path, device: str) -> Any:
        ...

    def untrained(self, cfg: PipelineConfig, vocab_dir: Path, device: str) -> Any:
        ...

    def draft_tokens(self, model: Any, hidden: Any, input_ids: Any, k: int) -> list[int]:
        ...


def for_config(cfg: PipelineConfig) -> Trainer:
    """The adapter for the speculators release this pipeline trains with (imported only now:
    each imports its speculators lazily, but the choice itself must not)."""
    return cast(Trainer, importlib.import_module(ADAPTERS[speculators_path(cfg)]))
