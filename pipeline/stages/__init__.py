"""The pipeline's stages: one module each (its `run(ctx) -> (outputs, summary)`, see
pipeline.runner) and the one table below, their order and inputs.

Every consumer reads this table, at call time, and nothing else: the stage runner and `python -m
pipeline` (pipeline/runner.py, __main__.py, sequence.py), the manifests' keys (manifest.py), the
console's box runner and sharded run (remote/pipeline_runner.py, console/sharded_run.py), the
TUI's and the report's stage order (console/tui/host_state.py). Adding a stage is its module here
plus one row; a row can name a module elsewhere (a test's dummy stage does).

Light on purpose: the console imports it for the names, the box for everything; a stage's module
(torch, transformers) is imported only when the stage runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.named_rows import row_named


@dataclass(frozen=True)
class Stage:
    name: str
    # The config sections whose digest is part of the stage's key: a change there re-runs it.
    sections: tuple[str, ...]
    # The stages whose outputs it reads; their manifests' digests are part of its key, and it
    # refuses to start until they are complete.
    inputs: tuple[str, ...] = ()
    # Writes straight into its final directory, one atomically renamed file per sample, so a
    # re-run keeps finished samples (see pipeline.runner).
    resumable: bool = False
    # Its key carries the dataset file's size and mtime (the stage that reads the dataset).
    reads_dataset: bool = False
    # Where its `run` lives; default pipeline.stages.<name>.
    module: str = ""

    @property
    def entry(self) -> str:
        return self.module or f"{__name__}.{self.name}"


TABLE: tuple[Stage, ...] = (
    Stage("prepare", sections=("target", "data"), reads_dataset=True),
    Stage("extract", sections=("target", "extract"), inputs=("prepare",), resumable=True),
    Stage("vocab", sections=("vocab",), inputs=("prepare",)),
    Stage("train", sections=("train",), inputs=("extract", "vocab")),
    Stage("evaluate", sections=("evaluate", "train"), inputs=("train", "prepare")),
)


def names() -> tuple[str, ...]:
    """Every stage, in the order a run carries them."""
    return tuple(s.name for s in TABLE)


def get(name: str) -> Stage:
    """The row of `name`; ValueError naming the stages for any other name."""
    return row_named(TABLE, name, "stage")


def after(name: str) -> str | None:
    """The stage a run carries on with after `name` (None after the last)."""
    order = names()
    i = order.index(get(name).name) + 1
    return order[i] if i < len(order) else None


def through(name: str) -> tuple[str, ...]:
    """`name` and every stage before it."""
    order = names()
    return order[:order.index(get(name).name) + 1]


# The rows other modules name for what that stage is (the checkpoint is train's, the acceptance
# evaluate's): written here only, so a renamed stage is one edit and a grep for a stage's name
# outside pipeline/stages/ finds nothing (tests/project/test_stage_names.py).
PREPARE, EXTRACT, VOCAB, TRAIN, EVALUATE = names()
