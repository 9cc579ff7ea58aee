"""pipeline/trainers: one switch picks the adapter to speculators' trainer, and both adapters
offer the same entry points with the same parameters (the train and evaluate stages call them
without knowing which release is installed)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline import trainers

ENTRY_POINTS = ("train", "load_trained", "untrained", "draft_tokens")


def _cfg(speculators: str) -> SimpleNamespace:
    # Only what the switch reads: train.speculators (and the path, for its error line).
    return SimpleNamespace(train=SimpleNamespace(speculators=speculators), path=Path("p.toml"))


@pytest.mark.parametrize(("release", "module"), [("0.3", "pipeline.trainers.library"),
                                                 ("0.9", "pipeline.trainers.cli")])
def test_the_switch_picks_the_adapter_of_the_configured_release(release: str, module: str) -> None:
    assert trainers.for_config(_cfg(release)) is importlib.import_module(module)  # type: ignore[arg-type]


def test_both_adapters_have_the_same_entry_points() -> None:
    signatures = {}
    for name in trainers.ADAPTERS.values():
        adapter = importlib.import_module(name)
        signatures[name] = {f: list(inspect.signature(getattr(adapter, f)).parameters) for f in ENTRY_POINTS}
    library, cli = signatures.values()
    assert library == cli
    assert library["train"] == ["cfg", "extract_dir", "vocab_dir", "save_dir", "device"]
    protocol = {f: list(inspect.signature(getattr(trainers.Trainer, f)).parameters)[1:] for f in ENTRY_POINTS}
    assert protocol == library

