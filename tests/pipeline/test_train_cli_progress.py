"""The 0.9 adapter's progress (pipeline/trainers/cli.py), fed the metric records speculators 0.9's
trainer logs (a dict per step on `speculators.metrics`, {"train": ..., "global_step": ...}; one
per epoch after its validation, {"val": ..., "epoch": ...}; their shapes in
speculators/train/trainer.py). The real trainer under torchrun: tests/e2e/test_train_ranks.py.

Checked: each epoch's end is a record of its own with the validation loss, the first one fixes
the step total, the last marks the end of training (before speculators' teardown: the window
benchmarks/train_scaling.py measures); and the step dicts no longer reach speculators' console
handler while its epoch dicts and other lines still do."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from pipeline import progress
from pipeline.trainers import cli


def _record(msg: Any, name: str = "speculators.metrics") -> logging.LogRecord:
    return logging.LogRecord(name, logging.INFO, __file__, 1, msg, None, None)


def _step(step: int, epoch: int) -> logging.LogRecord:
    return _record({"train": {"loss": 5.0 - step / 10, "full_acc_0": 0.1},
                    "profile": {"step_ms": 90.0}, "epoch": epoch, "lr": 0.003,
                    "global_step": step})


def test_epoch_ends_are_records_the_first_fixes_the_total_the_last_marks_training_done(
        capsys: pytest.CaptureFixture[str]) -> None:
    prog = progress.Progress("train", 36, "steps")  # the estimate: every token, no val share
    handler = cli._MetricsToProgress(prog, epochs=2)
    capsys.readouterr()
    for step in range(8):
        handler.handle(_step(step, 0))
    handler.handle(_record({"val": {"loss_epoch": 4.25, "full_acc_0_epoch": 0.2}, "epoch": 0}))
    for step in range(8, 16):
        handler.handle(_step(step, 1))
    handler.handle(_record({"val": {"loss_epoch": 3.5}, "epoch": 1}))
    recs = [r for r in map(progress.parse, capsys.readouterr().out.splitlines()) if r]
    ends = [r for r in recs if "val_loss" in r]
    assert [(r["done"], r["total"], r["epoch"], r["val_loss"], r["trained"]) for r in ends] == [
        (8, 16, 0, 4.25, False), (16, 16, 1, 3.5, True)]
    assert recs[-1] is ends[-1]  # nothing after the end of training but the stage's own end
    assert [r for r in recs if r.get("trained")] == [ends[-1]]
    assert handler.val == {"loss_epoch": 3.5} and handler.last["loss"] == 3.5  # 5.0 - 15/10
    assert "loss" not in ends[0]  # the loss chart folds step losses, not epoch ends


class _AsText(logging.Filter):
    """What speculators' FormatDictFilter does on its console handler: the dict becomes text
    in place (so a filter after it could no longer tell a step's dict from any line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, Mapping):
            record.msg = ", ".join(f"{k}={v}" for k, v in record.msg.items())
        return True


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_step_dicts_skip_the_console_handler_epoch_dicts_and_lines_do_not() -> None:
    console = _Keep()
    console.addFilter(_AsText())
    console.filters.insert(0, cli._NoStepDicts())  # where train_with puts it
    console.handle(_step(3, 0))
    console.handle(_record({"val": {"loss_epoch": 4.0}, "epoch": 0}))
    console.handle(_record("Saving checkpoint to out/train/checkpoints/0",
                           name="speculators.train.trainer"))
    console.handle(_record({"train": "not speculators' metrics"}, name="someone.else"))
    assert console.lines == ["val={'loss_epoch': 4.0}, epoch=0",
                             "Saving checkpoint to out/train/checkpoints/0",
                             "train=not speculators' metrics"]
