"""plan / apply / verify / re-apply / rollback on a real wheel's files through LocalTransport."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from console.cli import main
from remote.errors import EXIT_OK, EXIT_REFUSED, Refused
from remote.link.hosts import default_local
from remote.link.transport import LocalTransport
from remote.patcher.runner import Patcher
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests.container_fixture import Box
from tests.local_box import local_console_toml
from tests.old_python import python38
from tests.patchbox import GENERATOR, WORKER, make_site_packages, sha256, wheel_file


def _patcher(tmp_path: Path, sp: Path, **kw: object) -> tuple[Patcher, list[Event]]:
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)
    host = default_local(str(tmp_path / "box"))
    return Patcher(LocalTransport(), host, bus, site_packages=str(sp), **kw), seen  # type: ignore[arg-type]


def _kinds(events: list[Event], kind: str) -> list[dict]:
    return [e.payload for e in events if e.kind == kind]


async def test_apply_verify_reapply_rollback(tmp_path: Path) -> None:
    sp = make_site_packages(tmp_path)
    worker, gen = sp / WORKER, sp / GENERATOR
    originals = {worker: sha256(worker), gen: sha256(gen)}
    worker.chmod(0o640)  # an unusual mode survives apply and rollback
    patcher, seen = _patcher(tmp_path, sp)

    plans = await patcher.plan()
    planned = _kinds(seen, ev.PATCH_PLANNED)
    assert [p["file"] for p in planned] == [str(worker), str(gen)]
    assert all(r["applies"] for p in planned for r in p["recipes"])
    assert all(p["diff"].startswith("--- a/") for p in planned)
    assert sha256(worker) == originals[worker]  # planning wrote nothing

    await patcher.apply()
    applied = _kinds(seen, ev.PATCH_APPLIED)
    assert {a["sha256"] for a in applied} == {sha256(worker), sha256(gen)}
    assert worker.read_text() == plans[0].target
    backups = sorted(p.name for p in worker.parent.glob("*.eagle3-orig-*"))
    assert backups == [f"custom_worker.py.eagle3-orig-{originals[worker]}",
                       f"vllm_hidden_states_generator.py.eagle3-orig-{originals[gen]}"]
    assert (worker.parent / "__pycache__").is_dir()  # compiled with the box python
    assert worker.stat().st_mode & 0o777 == 0o640

    seen.clear()
    await patcher.verify()
    verified = _kinds(seen, ev.PATCH_VERIFIED)
    assert all(r["in_effect"] for v in verified for r in v["recipes"])
    assert [v["consistent"] for v in verified] == [True, True]

    # Applying twice changes nothing, not even the file's mtime.
    before = (sha256(worker), worker.stat().st_mtime_ns)
    seen.clear()
    await patcher.apply()
    assert (sha256(worker), worker.stat().st_mtime_ns) == before
    assert [a["changed"] for a in _kinds(seen, ev.PATCH_APPLIED)] == [False, False]

    seen.clear()
    await patcher.rollback()
    assert sha256(worker) == originals[worker] == sha256(wheel_file(WORKER))
    assert sha256(gen) == originals[gen]
    assert worker.stat().st_mode & 0o777 == 0o640
    assert not list(worker.parent.glob("*.eagle3-orig-*"))
    rolled = _kinds(seen, ev.PATCH_ROLLED_BACK)
    assert [r["sha256"] for r in rolled] == [originals[worker], originals[gen]]
    assert not any(r["in_effect"] for x in rolled for r in x["recipes"])


async def test_one_recipe_at_a_time(tmp_path: Path) -> None:
    sp = make_site_packages(tmp_path)
    worker = sp / WORKER
    original = sha256(worker)
    one, _ = _patcher(tmp_path, sp, recipes=["resolve-text-decoder"])
    await one.apply()
    assert "_resolve_text_decoder(model)" in worker.read_text()
    assert "_embed_input_ids" not in worker.read_text()
    other, _ = _patcher(tmp_path, sp, recipes=["embed-input-ids"])
    await other.apply()
    assert "_embed_input_ids" in worker.read_text()
    await other.rollback()  # only that one comes off
    text = worker.read_text()
    assert "_resolve_text_decoder(model)" in text and "_embed_input_ids" not in text
    assert list(worker.parent.glob("custom_worker.py.eagle3-orig-*"))
    everything, _ = _patcher(tmp_path, sp)
    await everything.rollback()
    assert sha256(worker) == original


async def test_unknown_original_refused_then_forced(tmp_path: Path) -> None:
    sp = make_site_packages(tmp_path)
    worker = sp / WORKER
    worker.write_text(worker.read_text().replace('"""Custom worker', '"""Site-edited worker'))
    edited = sha256(worker)
    patcher, seen = _patcher(tmp_path, sp, recipes=["resolve-text-decoder"])
    with pytest.raises(Refused, match="not a known original") as info:
        await patcher.apply()
    assert info.value.exit_code == EXIT_REFUSED
    planned = _kinds(seen, ev.PATCH_PLANNED)[0]
    assert planned["refused"] and planned["forceable"]
    assert "+        base_model = _resolve_text_decoder(model)" in planned["diff"]
    assert sha256(worker) == edited

    await patcher.apply(force=True)
    assert "_resolve_text_decoder(model)" in worker.read_text()
    await patcher.rollback()
    assert sha256(worker) == edited  # the unknown original comes back byte for byte


async def test_file_changed_after_patching_is_refused_but_rollback_works(tmp_path: Path) -> None:
    sp = make_site_packages(tmp_path)
    worker = sp / WORKER
    patcher, _ = _patcher(tmp_path, sp)
    await patcher.apply()
    with worker.open("a") as fh:
        fh.write("# edited on the box\n")
    with pytest.raises(Refused, match="changed by something else"):
        await patcher.apply()
    with pytest.raises(Refused, match="differs from both its original and the patched text"):
        await patcher.rollback()  # would discard the edit
    await patcher.rollback(force=True)
    assert sha256(worker) == sha256(wheel_file(WORKER))


async def test_box_with_python_38(tmp_path: Path) -> None:
    """The helper is the only code that runs on the box: it must work with its oldest python."""
    sp = make_site_packages(tmp_path)
    worker = sp / WORKER
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)
    host = replace(default_local(str(tmp_path / "box")), python=str(python38()))
    patcher = Patcher(LocalTransport(), host, bus, site_packages=str(sp))
    plans = await patcher.plan()
    assert [d.applies for p in plans for d in p.decisions] == [True] * 4  # incl. vLLM's check
    assert [p.version for p in plans] == ["0.3.0", "0.3.0"]
    await patcher.apply()
    assert (worker.parent / "__pycache__" / "custom_worker.cpython-38.pyc").is_file()
    await patcher.rollback()
    assert sha256(worker) == sha256(wheel_file(WORKER))


async def test_missing_package_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty-sp"
    empty.mkdir()
    patcher, _ = _patcher(tmp_path, empty)
    with pytest.raises(Refused, match="speculators is not installed"):
        await patcher.plan()


def _local_console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The CLI run from tmp_path with a console.toml of one local host, over a site-packages
    holding the released speculators 0.3.0: (site-packages, its worker file)."""
    sp = make_site_packages(tmp_path)
    monkeypatch.chdir(tmp_path)
    local_console_toml(tmp_path)
    return sp, sp / WORKER


def test_cli_plan_apply_verify_rollback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    sp, worker = _local_console(tmp_path, monkeypatch)
    common = ["--host", "local", "--site-packages", str(sp), "--no-record", "--json"]

    assert main(["patch", "plan", *common]) == EXIT_OK
    events = [Event.from_json(line) for line in capsys.readouterr().out.splitlines()]
    planned = [e for e in events if e.kind == ev.PATCH_PLANNED]
    assert len(planned) == 2 and all(e.host == "local" for e in planned)

    assert main(["patch", "apply", *common]) == 2  # --json cannot ask: needs --yes
    capsys.readouterr()
    assert sha256(worker) == sha256(wheel_file(WORKER))
    assert main(["patch", "apply", "--yes", *common]) == EXIT_OK
    assert main(["patch", "verify", "--recipe", "resolve-text-decoder", *common]) == EXIT_OK
    out = capsys.readouterr().out.splitlines()
    verified = [json.loads(line) for line in out if '"patch.verified"' in line]
    assert [r["name"] for r in verified[0]["payload"]["recipes"]] == [
        "resolve-text-decoder", "embed-input-ids"]
    assert main(["patch", "rollback", *common]) == EXIT_OK
    assert sha256(worker) == sha256(wheel_file(WORKER))
    assert main(["patch", "plan", "--recipe", "no-such-recipe", *common]) == 2
    assert "unknown recipe no-such-recipe" in capsys.readouterr().out

    worker.write_text(worker.read_text() + "# local change\n")
    assert main(["patch", "plan", *common]) == EXIT_REFUSED
    planned = [json.loads(line)["payload"] for line in capsys.readouterr().out.splitlines()
               if '"patch.planned"' in line]
    assert "not a known original" in planned[0]["refused"] and planned[0]["diff"]
    assert main(["patch", "apply", "--yes", *common]) == EXIT_REFUSED
    assert main(["patch", "rollback", *common]) == EXIT_REFUSED
    assert "nothing to roll back to" in capsys.readouterr().out


async def test_through_container_exec(tmp_path: Path, container_box: Box) -> None:
    """Through ContainerTransport (podman exec -i / podman cp) into the session's real
    container, from a host without ssh: the helper is copied into the container and run with
    the container's python; the file changes inside the container only (its overlay)."""
    from remote.link.connect import make_transport

    sp = make_site_packages(tmp_path)  # made after the container started: seen through its lower
    worker = sp / WORKER
    host = replace(default_local(str(tmp_path / "box")), name="onbox", runtime="podman",
                   container=container_box.name)
    transport = make_transport(host)
    await transport.connect()
    try:
        patcher = Patcher(transport, host, EventBus(), site_packages=str(sp))
        await patcher.apply()
        assert "_resolve_text_decoder(model)" in container_box.read_inside(str(worker))
        assert sha256(worker) == sha256(wheel_file(WORKER))  # the host's copy: untouched
        await patcher.rollback()
        assert container_box.read_inside(str(worker)) == wheel_file(WORKER).read_text()
    finally:
        await transport.close()


def test_cli_apply_asks_on_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    sp, worker = _local_console(tmp_path, monkeypatch)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    answers = iter(["n", "y"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    common = ["--host", "local", "--site-packages", str(sp), "--no-record"]
    assert main(["patch", "apply", *common]) == EXIT_REFUSED  # operator said no
    assert "+        base_model = _resolve_text_decoder(model)" in capsys.readouterr().err
    assert sha256(worker) == sha256(wheel_file(WORKER))
    assert main(["patch", "apply", *common]) == EXIT_OK
    assert "_resolve_text_decoder(model)" in worker.read_text()


async def test_confirmed_plan_that_went_stale_is_refused(tmp_path: Path) -> None:
    sp = make_site_packages(tmp_path)
    worker = sp / WORKER
    patcher, _ = _patcher(tmp_path, sp)
    shown = await patcher.plan()
    meanwhile, _ = _patcher(tmp_path, sp, recipes=["embed-input-ids"])
    await meanwhile.apply()  # someone else patched one recipe after the plan was shown
    changed = sha256(worker)
    with pytest.raises(Refused, match="changed on local since the plan was shown"):
        await patcher.apply(confirmed=shown)
    assert sha256(worker) == changed


async def test_workdir_under_home_is_expanded_on_the_box(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sp = make_site_packages(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # a literal "~" directory would appear here
    host = replace(default_local(), workdir="~/eagle3")
    patcher = Patcher(LocalTransport(), host, EventBus(), site_packages=str(sp))
    await patcher.verify()
    assert (tmp_path / "home" / "eagle3" / "probes" / "patch_helper.py").is_file()
    assert not (tmp_path / "~").exists()


async def test_package_found_on_the_box_python_path(tmp_path: Path) -> None:
    """Without --site-packages the helper asks the box python where speculators lives
    (importlib.util.find_spec, without importing it: its __init__ would pull in vLLM)."""
    sp = make_site_packages(tmp_path)
    box_python = tmp_path / "box-python"
    box_python.write_text(f'#!/bin/sh\nPYTHONPATH="{sp}" exec "{sys.executable}" "$@"\n')
    box_python.chmod(0o755)
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)
    host = replace(default_local(str(tmp_path / "box")), python=str(box_python))
    patcher = Patcher(LocalTransport(), host, bus)
    plans = await patcher.plan()
    assert [p.path for p in plans] == [str(sp / WORKER), str(sp / GENERATOR)]
    assert plans[0].version == "0.3.0"
    assert all(d.applies for p in plans for d in p.decisions)  # vLLM found the same way


def test_malformed_helper_output_is_an_error_event_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    sp = make_site_packages(tmp_path)
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'Segmentation fault? not JSON'\n")
    broken.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    local_console_toml(tmp_path, python=str(broken))
    rc = main(["patch", "plan", "--host", "local", "--site-packages", str(sp), "--no-record",
               "--json"])
    out = capsys.readouterr()
    assert rc == 1 and "Traceback" not in out.err
    errors = [Event.from_json(line) for line in out.out.splitlines()]
    errors = [e for e in errors if e.kind == ev.CONSOLE_ERROR]
    assert len(errors) == 1
    # Either it printed garbage or it exited before its request was written: both are named.
    message = errors[0].payload["message"]
    assert ("printed no JSON answer" in message or "exited before reading" in message
            or "no usable answer" in message)
