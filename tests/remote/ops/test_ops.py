"""The operations layer (remote/ops/): what the CLI and the TUI both call."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from console.tui.controller import LiveController
from remote.errors import Refused
from remote.link.hosts import Config, default_local
from remote.link.transport import LocalTransport
from remote.ops import patch as ops
from remote.patcher.runner import Patcher
from remote.spine import event_types as et
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests.patchbox import WORKER, make_site_packages, sha256


def _patcher(tmp_path: Path, sp: Path, bus: EventBus, **kw: object) -> Patcher:
    host = default_local(str(tmp_path / "box"))
    return ops.patcher(LocalTransport(), host, bus, site_packages=str(sp), **kw)


async def test_apply_refuses_when_the_plan_shown_in_the_tui_went_stale(tmp_path: Path) -> None:
    """The TUI's apply has the CLI's check: the plan it showed (its patch.planned events) must
    still be what a fresh plan would write."""
    sp = make_site_packages(tmp_path)
    worker = sp / WORKER
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)
    await ops.plan(_patcher(tmp_path, sp, bus))
    shown = [e.data() for e in seen if e.kind == ev.PATCH_PLANNED]
    assert shown and all(isinstance(s, et.PatchPlanned) for s in shown)
    # someone else patched one recipe after the plan was shown
    await ops.apply(_patcher(tmp_path, sp, EventBus(), recipes=["embed-input-ids"]))
    changed = sha256(worker)
    with pytest.raises(Refused, match="changed on local since the plan was shown"):
        await ops.apply(_patcher(tmp_path, sp, bus), shown=shown)  # type: ignore[arg-type]
    assert sha256(worker) == changed
    # planned again, shown again: now it applies
    seen.clear()
    await ops.plan(_patcher(tmp_path, sp, bus))
    fresh = [e.data() for e in seen if e.kind == ev.PATCH_PLANNED]
    await ops.apply(_patcher(tmp_path, sp, bus), shown=fresh)  # type: ignore[arg-type]
    assert sha256(worker) != changed
    applied = [e.data() for e in seen if e.kind == ev.PATCH_APPLIED]
    assert applied and all(isinstance(a, et.PatchApplied) for a in applied)


async def test_the_live_controller_applies_only_what_its_screen_showed(tmp_path: Path) -> None:
    """Through the TUI's own controller: apply without a plan shown is refused."""
    sp = make_site_packages(tmp_path)
    bus = EventBus()
    host = default_local(str(tmp_path / "box"))
    controller = LiveController(Config(hosts={"local": host}, path=None), bus)
    seen: list[Event] = []
    bus.add_callback(seen.append)

    # the operations' patcher with this test's site-packages (the box has none installed)
    original = ops.patcher
    ops.patcher = functools.partial(original, site_packages=str(sp))  # type: ignore[assignment]
    try:
        with pytest.raises(Refused, match="since the plan was shown"):
            await controller.apply_patch("local", str(sp / WORKER))
        await controller.plan_patch("local")
        await controller.apply_patch("local", str(sp / WORKER))
    finally:
        ops.patcher = original  # type: ignore[assignment]
        await controller.aclose()
    assert [e.kind for e in seen if e.kind.startswith("patch.")][-1] == ev.PATCH_APPLIED
