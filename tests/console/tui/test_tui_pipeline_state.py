"""How the console folds what the box says about the pipeline outside a stage's own progress:
stage manifests (a run this console did not watch), stages the box runner did not reach, the
runner it follows; the Pipeline screen's cells for them; the [console] auto_reattach setting and
the laptop's memory of pipeline runs. No terminal, no box."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.tui.model import ConsoleState
from console.tui.widgets.stage_cells import stage_cells
from remote.errors import ConfigError
from remote.jobs.remembered import RememberedRuns
from remote.link.hosts import HostConfig, parse_config
from remote.spine import events as ev
from remote.spine.events import Event

HOST = "box"


def _emit(console: ConsoleState, kind: str, **payload: object) -> set[str]:
    assert ev.validate(kind, dict(payload)) is not None  # what producers must send
    return console.apply(Event(kind, HOST, dict(payload)))


def _manifest(stage: str, complete: bool = True, **over: object) -> dict[str, object]:
    facts: dict[str, object] = {"seconds": 12.5, "bytes": 3 << 20, "outputs": 4,
                                "completed": "2026-12-04T18:41:35Z"} if complete else {}
    return {"stage": stage, "complete": complete,
            "reason": "manifest matches (4 outputs)" if complete else "no manifest",
            **facts, **over}


def test_manifests_show_finished_stages_done_with_time_and_size() -> None:
    state = ConsoleState([HOST])
    assert _emit(state, ev.STAGE_MANIFEST, **_manifest("extract")) == {"stages"}
    _emit(state, ev.STAGE_MANIFEST, **_manifest("train", complete=False))
    st = state.host(HOST).stages["extract"]
    assert (st.status, st.seconds, st.bytes, st.outputs_count, st.completed) == (
        "done", 12.5, 3 << 20, 4, "2026-12-04T18:41:35Z")
    status, _bar, detail, seconds = stage_cells(st)
    assert (str(status), detail, seconds) == ("done", "3.0 MiB in 4 outputs", "12.5s")
    pending = state.host(HOST).stages["train"]
    status, _bar, detail, seconds = stage_cells(pending)
    assert (str(status), detail, seconds) == ("pending", "no manifest", "-")


def test_a_manifest_never_overrides_a_running_failed_or_not_run_stage() -> None:
    state = ConsoleState([HOST])
    _emit(state, ev.STAGE_START, stage="train", run_id="r1")
    assert _emit(state, ev.STAGE_MANIFEST, **_manifest("train", complete=False)) == set()
    assert state.host(HOST).stages["train"].status == "running"
    _emit(state, ev.STAGE_END, stage="train", ok=False, run_id="r1", error="train exited 1")
    _emit(state, ev.STAGE_NOT_RUN, stage="evaluate", reason="train failed (exit 1)",
          run_id="r1")
    for stage in ("train", "evaluate"):
        _emit(state, ev.STAGE_MANIFEST, **_manifest(stage, complete=False))
    h = state.host(HOST)
    assert h.stages["train"].status == "failed"
    ev_state = h.stages["evaluate"]
    assert (ev_state.status, ev_state.reason) == ("not run", "train failed (exit 1)")
    status, _bar, detail, _seconds = stage_cells(ev_state)
    assert (str(status), detail) == ("not run", "train failed (exit 1)")
    # a later run that finishes it: its manifest says done again
    _emit(state, ev.STAGE_MANIFEST, **_manifest("evaluate"))
    assert h.stages["evaluate"].status == "done"


def test_a_skip_carries_the_manifests_facts_and_a_new_start_clears_them() -> None:
    state = ConsoleState([HOST])
    _emit(state, ev.STAGE_SKIPPED, stage="vocab", reason="manifest matches (2 outputs)",
          seconds=3.0, bytes=1100, outputs=2, completed="2026-12-04T18:41:58Z")
    st = state.host(HOST).stages["vocab"]
    status, _bar, detail, seconds = stage_cells(st)
    assert (str(status), detail, seconds) == (
        "skipped", "manifest matches (2 outputs)  1.1 KiB in 2 outputs", "3.0s")
    _emit(state, ev.STAGE_START, stage="vocab", run_id="r2")
    assert (st.status, st.bytes, st.completed, st.seconds) == ("running", None, "", None)


def test_the_followed_runner_is_kept_per_host() -> None:
    state = ConsoleState([HOST])
    _emit(state, ev.PIPELINE_RUN, run_id="20261204T184017Z-pipeline-92e9cb", how="reattached",
          state="running", config="/w/pipeline.toml", started="2026-12-04T18:40:17.000Z")
    assert state.host(HOST).pipeline_run["how"] == "reattached"
    # a damaged payload is a note, not an exception
    state.apply(Event(ev.PIPELINE_RUN, HOST, {"how": 3}))
    assert "malformed pipeline.run" in state.host(HOST).notes[-1].text


def test_console_settings_in_console_toml() -> None:
    assert parse_config("", "c.toml").auto_reattach is True
    cfg = parse_config("[console]\nauto_reattach = false\n", "c.toml")
    assert cfg.auto_reattach is False
    with pytest.raises(ConfigError, match=r"console\.auto_reattach: must be true or false"):
        parse_config('[console]\nauto_reattach = "no"\n', "c.toml")
    with pytest.raises(ConfigError, match=r"console\.reattach: unknown key"):
        parse_config("[console]\nreattach = true\n", "c.toml")
    with pytest.raises(ConfigError, match="console: must be a table"):
        parse_config('console = "x"\n', "c.toml")


def test_remembered_runs_are_per_host_and_workdir(tmp_path: Path) -> None:
    memory = RememberedRuns(tmp_path / "state")
    a = HostConfig(name="local", workdir=str(tmp_path / "a"))
    b = HostConfig(name="local", workdir=str(tmp_path / "b"))
    assert memory.recall(a) is None
    memory.remember(a, "20261204T184017Z-pipeline-92e9cb", config="/a/pipeline.toml")
    got = memory.recall(a)
    assert got is not None and got["run_id"] == "20261204T184017Z-pipeline-92e9cb"
    assert got["config"] == "/a/pipeline.toml"
    assert memory.recall(b) is None  # another workdir is another box
    assert oct(memory.path(a).stat().st_mode & 0o777) == "0o600"
    memory.path(a).write_text("{not json")
    assert memory.recall(a) is None
