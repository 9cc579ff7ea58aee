"""On connect with no log of the run that evaluated (runs removed, or older than the ones read),
evaluate's acceptance.json on the box still gives the Bench screen its offline acceptance
(issue 42, point 1; the logs themselves: tests/console/tui/test_tui_box_truth.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Group

from console.tui.model import ConsoleState
from console.tui.widgets.bench import offline_acceptance
from remote.link.hosts import HostConfig
from remote.link.transport import LocalTransport
from remote.ops.pipeline import reattach
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests.tiny_pipeline import tiny_pipeline


def _box(workdir: Path) -> None:
    """A box whose pipeline config is `<workdir>/pipeline.toml`, its evaluate result written,
    and no run directory left."""
    workdir.mkdir()
    tiny_pipeline(workdir)
    evaluate = workdir / "out" / "evaluate"
    evaluate.mkdir(parents=True)
    (evaluate / "acceptance.json").write_text(json.dumps({
        "prompts": 16, "max_new_tokens": 32,
        "heads": {"trained": {"mean_length": 1.2051282051282051, "rate": 0.06837606837606838,
                              "per_position": [0.15, 0.04, 0.01]}}}))


async def test_evaluate_result_read_from_the_box_without_a_log(tmp_path: Path) -> None:
    workdir = tmp_path / "box"
    _box(workdir)
    state, bus = ConsoleState(["local"]), EventBus()

    def fold(events: Sequence[Event]) -> None:
        state.apply_batch(events)

    bus.add_batch_callback(fold)
    ends: list[Event] = []
    bus.add_callback(lambda e: ends.append(e) if e.kind == ev.STAGE_END else None)
    transport = LocalTransport("local")
    await transport.connect()
    host, seen = HostConfig(name="local", ssh=None, python=sys.executable,
                            workdir=str(workdir)), set[str]()
    try:
        await reattach(transport, host, bus, seen=seen)
        await reattach(transport, host, bus, seen=seen)  # read once a session
    finally:
        await transport.close()
    assert len(ends) == 1 and ends[0].payload["stage"] == "evaluate"
    metrics = state.host("local").stages["evaluate"].metrics
    assert metrics["mean_length"] == 1.2051282051282051 and metrics["per_position"][0] == 0.15
    shown = offline_acceptance(state.host("local"))
    assert isinstance(shown, Group)  # the title and the per-position table
    assert "mean length 1.21, rate 6.84%" in str(shown.renderables[0])
