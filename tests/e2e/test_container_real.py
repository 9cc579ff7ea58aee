"""Every box-side command through a real container (issue #28, points 1-4): podman on this
machine (tests/container_fixture.py), reached as `runtime = "podman"` from a host without ssh
(the console on the box itself) and as `runtime = "docker"` (podman-docker's /usr/bin/docker)
through the loopback sshd, as on a real box.

The container's root is an overlay over this machine's `/`: what the console writes inside
(a patched worker file, a probe, a job's log) is not on the host, which every test asserts.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from console.cli import main
from remote.errors import EXIT_CONNECTION, EXIT_OK, EXIT_REFUSED
from remote.jobs.client import Jobs
from remote.link.connect import make_transport
from remote.link.hosts import load_config
from tests.container_fixture import (
    PODMAN,
    RECORDS,
    Box,
    container_id,
    down,
    inside,
    sha256,
    up,
)
from tests.sshd_harness import Sshd

WORKER_FILES = ("data_generation/custom_worker.py", "data_generation/vllm_hidden_states_generator.py")


def ssh_keys(sshd: Sshd) -> dict[str, str]:
    return {"ssh": sshd.alias, "ssh_config": str(sshd.ssh_config),
            "known_hosts": str(sshd.known_hosts)}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, object]]]:
    capsys.readouterr()
    rc = main([*argv, "--json", "--no-record"])
    out = capsys.readouterr().out
    return rc, [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.fixture(params=["podman-here", "docker-ssh"])
def host_toml(request: pytest.FixtureRequest, container_box: Box, tmp_path: Path) -> Path:
    """The container as an operator on the box reaches it (podman, no ssh) and as the console
    on a laptop does (docker through sshd)."""
    wd = f"/tmp/eagle3-in-container-{tmp_path.name}"
    if request.param == "podman-here":
        return container_box.toml(tmp_path / "console.toml", "c", "podman", workdir=wd)
    sshd: Sshd = request.getfixturevalue("sshd")
    return container_box.toml(tmp_path / "console.toml", "c", "docker", ssh=ssh_keys(sshd),
                              workdir=wd)


def test_probe_env_says_which_container_it_ran_in(
        host_toml: Path, container_box: Box, capsys: pytest.CaptureFixture[str]) -> None:
    rc, events = cli(capsys, "probe", "env", "--host", "c", "--config", str(host_toml))
    assert rc == EXIT_OK
    (result,) = [e["payload"]["result"] for e in events if e["kind"] == "probe.result"]
    c = result["container"]
    assert c["in_container"] is True and "/run/.containerenv" in c["evidence"]
    assert c["runtime"]["name"] == container_box.name and c["matches"] is True
    assert c["id"] == container_id(container_box.name)  # seen from inside = the runtime's word
    assert c["runtime"]["rootfs"] and c["runtime"]["started_at"].startswith("20")
    assert result["packages"]["vllm"].startswith("0.16")  # the container's vLLM, not .venv's
    (summary,) = [e["payload"]["summary"] for e in events if e["kind"] == "probe.result"]
    assert f"in container {container_box.name} (id {c['id'][:12]}" in summary
    wd = load_config(host_toml).host("c").workdir
    assert container_box.exists_inside(f"{wd}/probes/env_probe.py")
    assert not Path(wd).exists()  # uploaded into the container only


def test_the_host_itself_is_not_a_container(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    """/.dockerenv exists on this machine outside any container: not evidence alone."""
    rc, events = cli(capsys, "probe", "env", "--host", "local")
    (result,) = [e["payload"]["result"] for e in events if e["kind"] == "probe.result"]
    assert rc == EXIT_OK and result["container"]["in_container"] is False
    assert result["host"]["in_container"] is False


def test_probe_model_answers_from_the_containers_vllm(
        container_box: Box, sshd: Sshd, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    toml = container_box.toml(tmp_path / "console.toml", "c", "podman", ssh=ssh_keys(sshd),
                              workdir=f"/tmp/eagle3-in-container-{tmp_path.name}")
    rc, events = cli(capsys, "probe", "model", "--arch", "LlamaForCausalLM", "--host", "c",
                     "--config", str(toml))
    (result,) = [e["payload"]["result"] for e in events if e["kind"] == "probe.result"]
    assert rc == EXIT_OK and result["status"] == "resolved"
    assert str(result["vllm_version"]).startswith("0.16"), result["vllm_version"]


def _speculators_dir(python: str) -> Path:
    lib = Path(python).parents[1] / "lib"
    (found,) = lib.glob("python3*/site-packages/speculators")
    return found


@pytest.mark.ssh
def test_patch_the_vllm016_worker_inside_the_container_through_sshd(
        sshd: Sshd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """apply / verify / rollback change the worker inside the container; the host's files stay
    byte-identical; recreating the container makes `patch verify` name it (the drift)."""
    name = f"eagle3-drift-{os.getpid()}"
    box = Box(name, up(name, "vllm016"))
    try:
        toml = box.toml(tmp_path / "console.toml", "c", "podman", ssh=ssh_keys(sshd),
                        workdir=f"/tmp/eagle3-in-container-{tmp_path.name}")
        host_files = [_speculators_dir(box.python) / rel for rel in WORKER_FILES]
        before = [sha256(f) for f in host_files]
        common = ("--host", "c", "--config", str(toml))
        rc, events = cli(capsys, "patch", "apply", *common, "--yes")
        assert rc == EXIT_OK
        applied = [e["payload"] for e in events if e["kind"] == "patch.applied"]
        assert len(applied) == 2 and all(p["changed"] for p in applied)
        assert "_resolve_text_decoder(model)" in box.read_inside(str(host_files[0]))
        assert [sha256(f) for f in host_files] == before
        record = json.loads((RECORDS / f"{name}.json").read_text())
        first_id = container_id(name)
        assert record["id"] == first_id and record["container"] == name
        rc, events = cli(capsys, "patch", "verify", *common)
        assert rc == EXIT_OK and all(e["payload"]["recipes"] and all(
            r["in_effect"] for r in e["payload"]["recipes"])
            for e in events if e["kind"] == "patch.verified")
        rc, _ = cli(capsys, "patch", "rollback", *common)
        assert rc == EXIT_OK and not (RECORDS / f"{name}.json").exists()
        assert "_resolve_text_decoder(model)" not in box.read_inside(str(host_files[0]))
        assert cli(capsys, "patch", "apply", *common, "--yes")[0] == EXIT_OK
        # the redeploy: same name, new container, a clean filesystem
        down_keep_record(name)
        up(name, "vllm016")
        second_id = container_id(name)
        assert second_id != first_id
        capsys.readouterr()
        rc = main(["patch", "verify", *common, "--no-record"])
        out = capsys.readouterr().out.splitlines()
        assert rc == EXIT_REFUSED
        (line,) = [ln for ln in out if "recreated" in ln]
        assert line.endswith(f"not applied: container {name} was recreated at "
                             f"{_created(name)} (was {first_id[:12]}, now {second_id[:12]}); "
                             "run patch apply")
        assert not [ln for ln in out if "patch.verified" in ln]  # said once, not per file
        assert [sha256(f) for f in host_files] == before
        tui_shows = asyncio.run(_tui_verify(toml))
        assert line.split("warning: ", 1)[1] in " ".join(tui_shows["recipes"].split())
        assert tui_shows["status"] == "drift" and "recreated" in tui_shows["overview"]
    finally:
        down(name)


async def _tui_verify(toml: Path) -> dict[str, str]:
    """The TUI on the same host: p (plan), v (verify) on the Patch screen, then the overview."""
    from textual.widgets import Static

    from console.tui.app import ConsoleApp
    from console.tui.controller import LiveSource
    from tests.tui_helpers import SIZE, plain, settle, wait_for

    app = ConsoleApp(LiveSource(load_config(toml)), start_screen="patch")
    async with app.run_test(size=SIZE) as pilot:
        app.current_host = "c"  # the host picked on the Hosts screen (`local` is listed first)
        h = app.state.host("c")
        await pilot.press("p")
        await wait_for(pilot, lambda: len(h.patches) == 2, timeout=60)
        await pilot.press("v")
        await wait_for(pilot, lambda: any(ps.status == "drift" for ps in h.patches.values()),
                       timeout=60)
        await settle(pilot)
        shown = {"recipes": plain(app.query_one("#recipes", Static)),
                 "status": next(ps.status for ps in h.patches.values() if ps.drift)}
        app.action_show("overview")
        await settle(pilot)
        shown["overview"] = plain(app.query_one("#notes", Static))
        await app.source.controller.aclose()
    return shown


def down_keep_record(name: str) -> None:
    import subprocess
    subprocess.run([*PODMAN, "rm", "-f", "-t", "0", name], capture_output=True, check=True)


def _created(name: str) -> str:
    import subprocess
    done = subprocess.run([*PODMAN, "inspect", "--type", "container", name],
                          capture_output=True, text=True, check=True)
    return str(json.loads(done.stdout)[0]["Created"])


@pytest.mark.ssh
async def test_a_job_detached_inside_the_container_survives_an_ssh_drop(
        container_box: Box, sshd: Sshd, tmp_path: Path) -> None:
    toml = container_box.toml(tmp_path / "console.toml", "c", "docker", ssh=ssh_keys(sshd),
                              workdir=f"/tmp/eagle3-in-container-{tmp_path.name}")
    host = load_config(toml).host("c")
    gate = f"/tmp/eagle3-gate-{tmp_path.name}"
    t = make_transport(host)
    await t.connect()
    jobs = Jobs(t, host.workdir, host=host.name, python=host.python)
    script = f'while [ ! -e {gate} ]; do sleep 0.1; done; echo "$1"; cat /proc/1/cmdline'
    info = await jobs.launch(["sh", "-c", script, "sh", "a; $(b)"], name="in container")
    assert sshd.drop_connections() >= 1
    await t.close()
    assert inside(container_box.name, "touch", gate).returncode == 0  # released after the drop
    t = make_transport(host)
    await t.connect()
    try:
        jobs = Jobs(t, host.workdir, host=host.name, python=host.python)
        done = await jobs.wait(info.run_id)
        assert done.returncode == 0
        lines = [x.text async for x in jobs.tail(info.run_id)]
        assert lines[0] == "a; $(b)" and lines[1].startswith("sleep")  # pid 1: the container's
    finally:
        await t.close()
    assert not Path(host.workdir).exists() and not Path(gate).exists()


@pytest.mark.parametrize("case", ["no such container", "stopped", "runtime missing"])
@pytest.mark.parametrize("how", ["here", "ssh"])
def test_bad_container_is_one_line_exit_3_and_nothing_written(
        case: str, how: str, container_box: Box, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest) -> None:
    wd = tmp_path / "wd"
    keys: dict[str, str] = {"workdir": str(wd)}
    stopped = f"eagle3-stopped-{os.getpid()}"
    box = container_box
    if case == "no such container":
        box = Box("eagle3-no-such-container", container_box.python)
    elif case == "stopped":
        box = Box(stopped, container_box.python)
        import subprocess
        subprocess.run([*PODMAN, "create", "--name", stopped, "--rootfs",
                        "/var/lib/eagle3-console/rootfs:O", "--ulimit", "nofile=1024:1024",
                        "sleep", "infinity"], capture_output=True)
    else:
        keys["runtime_bin"] = str(tmp_path / "no-runtime" / "docker")
    ssh = ssh_keys(request.getfixturevalue("sshd")) if how == "ssh" else None
    toml = box.toml(tmp_path / "console.toml", "c", "docker", ssh=ssh, **keys)
    try:
        capsys.readouterr()
        rc = main(["probe", "env", "--host", "c", "--config", str(toml), "--no-record"])
        cap = capsys.readouterr()
    finally:
        if case == "stopped":
            import subprocess
            subprocess.run([*PODMAN, "rm", "-f", stopped], capture_output=True)
    # through sshd the connection itself came up (its event line), then the one error line
    lines = [ln for ln in (cap.out + cap.err).splitlines()
             if ln.strip() and "connection.up" not in ln]
    assert rc == EXIT_CONNECTION, lines
    assert len(lines) == 1, lines
    expected = {"no such container": "container 'eagle3-no-such-container' not found on c",
                "stopped": f"container '{stopped}' on c is not running",
                "runtime missing": "container runtime docker ("}[case]
    assert expected in lines[0]
    assert not wd.exists() and not container_box.exists_inside(str(wd))


def test_a_host_without_ssh_and_without_runtime_runs_here(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "console.toml"
    toml.write_text(f'[hosts.onbox]\nworkdir = "{tmp_path / "wd"}"\npython = "{sys.executable}"\n')
    rc, events = cli(capsys, "probe", "env", "--host", "onbox", "--config", str(toml))
    (result,) = [e["payload"]["result"] for e in events if e["kind"] == "probe.result"]
    assert rc == EXIT_OK and result["container"]["in_container"] is False
    assert (tmp_path / "wd" / "probes" / "env_probe.py").exists()


@pytest.mark.ssh
def test_stats_sample_from_inside_the_container(
        container_box: Box, sshd: Sshd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wd = f"/tmp/eagle3-in-container-{tmp_path.name}"
    toml = container_box.toml(tmp_path / "console.toml", "c", "docker", ssh=ssh_keys(sshd),
                              workdir=wd)
    rc, events = cli(capsys, "stats", "--host", "c", "--count", "2", "--interval", "0.2",
                     "--source", "none", "--config", str(toml))
    samples = [e["payload"] for e in events if e["kind"] == "stats.sample"]
    assert rc == EXIT_OK and len(samples) == 2, events[-3:]
    assert all(s["host"]["mem_total"] for s in samples)
    assert container_box.exists_inside(f"{wd}/probes/sampler.py")  # the sampler ran in there
    assert not Path(wd).exists()
