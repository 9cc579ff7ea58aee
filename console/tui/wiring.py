"""Adapters from the controller's action calls to the remote modules that do the work.

Each adapter imports its module when called, so the TUI builds and runs without it; a missing
module becomes FeatureUnavailable ("not available in this build"). Adapters take keyword
arguments transport=, host= (HostConfig), bus= and the action's own. No Textual here.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from console.tui.controller import FeatureUnavailable


def _module(name: str, label: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise FeatureUnavailable(f"{label} is not available in this build ({name}: {exc})") from None


def _patcher(transport: Any, host: Any, bus: Any) -> Any:
    runner = _module("remote.patcher.runner", "patcher")
    return runner.Patcher(transport, host, bus)


async def patch_plan(*, transport: Any, host: Any, bus: Any) -> None:
    await _patcher(transport, host, bus).plan()


async def patch_apply(*, transport: Any, host: Any, bus: Any, file: str) -> None:
    """The operator confirmed in the Patch screen; the patcher plans again and writes every
    file its recipes target (it works per package, not per file)."""
    await _patcher(transport, host, bus).apply(emit_plan=False)


async def patch_verify(*, transport: Any, host: Any, bus: Any, file: str) -> None:
    await _patcher(transport, host, bus).verify()


async def patch_rollback(*, transport: Any, host: Any, bus: Any, file: str) -> None:
    await _patcher(transport, host, bus).rollback()
