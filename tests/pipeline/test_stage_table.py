"""Issue 40, one fact once: a stage is a module plus one row of pipeline/stages' table.

A dummy stage (its `run` below) goes in as one row after vocab, and nothing else changes: the box
(`python -m pipeline dummy` in a real detached job on the local host) runs it with the shared
rules (its input's manifest first, its own manifest last, skipped when that matches), the
console's box runner follows it and counts it, the headless printer prints it, a recorded session
replays it, and the TUI's model puts it between vocab and train.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline import config as pconfig
from pipeline import manifest
from pipeline import stages as stage_table
from pipeline.runner import StageContext
from tests.tiny_pipeline import tiny_pipeline

REPO = Path(__file__).resolve().parents[2]
DUMMY = stage_table.Stage("dummy", sections=("vocab",), inputs=("prepare",), module=__name__)


def run(ctx: StageContext) -> tuple[list[Path], dict[str, Any]]:
    """The dummy stage's work: one file from its input stage's output."""
    rows = (ctx.input_dir("prepare") / "rows.txt").read_text().split()
    out = ctx.workdir / "dummy.txt"
    out.write_text(f"{len(rows)} rows\n")
    return [out], {"rows": len(rows)}


def with_dummy() -> tuple[stage_table.Stage, ...]:
    """The table with the dummy's row after vocab."""
    rows = list(stage_table.TABLE)
    rows.insert(stage_table.names().index("vocab") + 1, DUMMY)
    return tuple(rows)


@pytest.fixture
def dummy_table(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(stage_table, "TABLE", with_dummy())
    yield


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return tiny_pipeline(tmp_path)


def _prepare_done(cfg_path: Path) -> None:
    """prepare's outputs and manifest as the stage leaves them (the dummy's input)."""
    cfg = pconfig.load(cfg_path, check_disk=False)
    out = manifest.stage_dir(cfg, "prepare")
    out.mkdir(parents=True)
    (out / "rows.txt").write_text("a b c\n")
    key = manifest.stage_key(cfg, "prepare")
    assert key is not None
    manifest.write(cfg, "prepare", [out / "rows.txt"], key=key, summary={}, seconds=0.1)


def test_the_table_is_the_one_stage_list() -> None:
    names = stage_table.names()
    assert names[0] == "prepare" and names[-1] == "evaluate" and len(set(names)) == len(names)
    for row in stage_table.TABLE:  # every input is an earlier stage: a run can carry them
        assert all(names.index(up) < names.index(row.name) for up in row.inputs), row
    assert stage_table.after("extract") == "vocab" and stage_table.after("evaluate") is None
    with pytest.raises(ValueError, match=r"unknown stage 'nope' \(stages: prepare, extract"):
        stage_table.get("nope")


def test_a_stage_is_one_row_in_the_box_side_pipeline(dummy_table: None, config: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline.__main__ import main

    assert main(["plan", "--config", str(config)]) == 0
    plan = [json.loads(ln)["stage"] for ln in capsys.readouterr().out.splitlines()]
    assert plan == ["prepare", "extract", "vocab", "dummy", "train", "evaluate"]
    # Its inputs come from its row: without prepare's manifest it refuses, naming it.
    assert main(["dummy", "--config", str(config)]) == 1
    assert "dummy: input stage(s) prepare not complete" in capsys.readouterr().err


def test_a_dummy_stage_runs_prints_replays_and_shows_in_the_tui(
        dummy_table: None, config: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from console.cli import main as console_main
    from console.printer import Printer
    from console.tui.model import ConsoleState
    from remote.link.hosts import HostConfig
    from remote.link.transport import LocalTransport
    from remote.pipeline_runner import RUN_NAME, PipelineRunner, RunOutcome
    from remote.spine import events as ev
    from remote.spine.bus import EventBus
    from tests.tui_sessions import write_session

    _prepare_done(config)
    bus = EventBus()
    seen: list[ev.Event] = []
    bus.add_callback(seen.append)
    printed = io.StringIO()
    bus.add_callback(Printer(out=printed))
    host = HostConfig(name="local", python=sys.executable, workdir=str(tmp_path / "box"))
    # The box: the stage in a detached job, with the same one row added to its table.
    box = (f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
           "from pipeline import stages\n"
           "from tests.pipeline.test_stage_table import with_dummy\n"
           "stages.TABLE = with_dummy()\n"
           "from pipeline.__main__ import main\n"
           "raise SystemExit(main(sys.argv[1:]))\n")

    async def follow_the_box() -> list[RunOutcome]:
        transport = LocalTransport("local")
        await transport.connect()
        try:
            runner = PipelineRunner(transport, host, bus, in_place=True)
            outcomes = []
            for _ in range(2):  # the second time its manifest matches: skipped
                info = await runner.jobs.launch([sys.executable, "-c", box, "dummy", "--config",
                                                 str(config)], name=RUN_NAME, cwd=str(REPO))
                outcomes.append(await runner.follow(info.run_id))
            return outcomes
        finally:
            await transport.close()

    outcomes = asyncio.run(follow_the_box())
    assert [o.stages["dummy"].status for o in outcomes] == ["done", "skipped"]
    assert outcomes[0].stages["dummy"].result == {"rows": 3}
    cfg = pconfig.load(config, check_disk=False)
    made = manifest.read(cfg, "dummy")
    assert made is not None and made["inputs"] == {"prepare": manifest.read(cfg, "prepare")["digest"]}
    assert (manifest.stage_dir(cfg, "dummy") / "dummy.txt").read_text() == "3 rows\n"

    lines = [ln.split(" ", 1)[1] for ln in printed.getvalue().splitlines()
             if "stage." in ln and "dummy" in ln]
    assert [ln.split(":")[0] for ln in lines] == ["[local] stage.start", "[local] stage.end",
                                                  "[local] stage.skipped"]
    assert "dummy done in" in lines[1] and "dummy skipped: up to date" in lines[2]

    session = write_session(tmp_path / "s.jsonl", seen, hosts=("local",))
    capsys.readouterr()
    assert console_main(["replay", str(session), "--print"]) == 0
    replayed = [ln.split(" ", 1)[1] for ln in capsys.readouterr().out.splitlines()
                if "stage." in ln and "dummy" in ln]
    assert replayed == lines

    # The TUI's model: the box ran the dummy alone, so the runner's follow said the others did
    # not run; every stage shows, the dummy at its row's place.
    state = ConsoleState(["local"])
    for e in seen:
        state.apply(e)
    shown = state.host("local").ordered_stages()
    assert [s.name for s in shown] == ["prepare", "extract", "vocab", "dummy", "train", "evaluate"]
    assert shown[3].status == "skipped" and shown[2].status == "not run"
