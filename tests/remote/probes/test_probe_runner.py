"""Probes uploaded and run through a real Transport (local, and the loopback sshd), and what the
console makes of broken probe output: one probe.error event and a RemoteError, never a traceback.

The broken probes are test doubles: small scripts standing in for a probe that is killed mid-line,
prints garbage, crashes or prints nothing, uploaded and run exactly like the real ones.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remote import probe_runner
from remote.errors import ProbeFailed, RemoteError
from remote.link.transport import LocalTransport, Transport
from remote.probe_runner import parse_probe_output, run_probe
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests import vllm_sources as vs

REPO = Path(__file__).resolve().parents[3]


class Collect:
    def __init__(self, bus: EventBus) -> None:
        self.events: list[Event] = []
        bus.add_callback(self.events.append)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]


BROKEN = {
    # killed by the OOM killer / the operator halfway through writing its result line
    "killed": (
        "import os, signal, sys\n"
        "sys.stdout.write('{\"kind\": \"result\", \"probe\": \"env\", \"result\": {\"python\": ')\n"
        "sys.stdout.flush()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    ),
    "garbage": "print('Segmentation fault (core dumped)')\nprint('{\"kind\": \"result\", \"result\": {}}')\n",
    "crash": "import sys\nsys.stderr.write('Traceback ...\\nImportError: libcuda.so.1: cannot open\\n')\nsys.exit(3)\n",
    "silent": "pass\n",
    "reported": "print('{\"kind\": \"error\", \"probe\": \"env\", \"message\": \"cannot read HF config\"}')\n"
                "raise SystemExit(1)\n",
    "not-a-message": "print('[1, 2, 3]')\n",
}
EXPECTED = {
    "killed": "probe env was killed by signal 9: its last line is cut short",
    "garbage": "probe env: line 1 of its output is not JSON: 'Segmentation fault (core dumped)'",
    "crash": "probe env exited 3: ImportError: libcuda.so.1: cannot open",
    "silent": "probe env printed no result",
    "reported": "probe env: cannot read HF config",
    "not-a-message": "probe env: line 1 is not a probe message",
}


def broken_probes_dir(tmp_path: Path, which: str) -> Path:
    d = tmp_path / f"probes-{which}"
    d.mkdir()
    (d / "env_probe.py").write_text(BROKEN[which])
    return d


async def _env_probe(t: Transport, workdir: str, python: str, bus: EventBus, host: str) -> list[dict[str, Any]]:
    return await run_probe(t, "env", ["--workdir", workdir], workdir=workdir, python=python, bus=bus, host=host,
                           timeout=120)


async def test_env_probe_locally_uploads_once_and_emits_result(local_workdir: Path) -> None:
    bus = EventBus()
    seen = Collect(bus)
    async with LocalTransport() as t:
        (res,) = await _env_probe(t, str(local_workdir), sys.executable, bus, "local")
        await _env_probe(t, str(local_workdir), sys.executable, bus, "local")
    assert (local_workdir / "probes" / "env_probe.py").read_bytes() == (
        REPO / "remote/probes/env_probe.py").read_bytes()
    # Sent once each, the probe and the module it imports; the second run found the same content.
    sent = sorted(Path(e.payload["path"]).name for e in seen.of(ev.UPLOAD_PROGRESS))
    assert sorted(sent) == ["container_id.py", "env_probe.py", "find_package.py", "gpu_query.py"]
    results = seen.of(ev.PROBE_RESULT)
    assert len(results) == 2 and results[0].payload["probe"] == "env"
    assert results[0].payload["result"] == res
    assert res["python"]["executable"] == sys.executable
    assert res["host"]["workdir"]["path"] == str(local_workdir)
    assert "no NVIDIA GPU" in results[0].payload["summary"]
    json.loads(results[0].to_json())  # the payload survives the session format


async def test_tilde_workdir_is_expanded_on_the_box(tmp_path: Path) -> None:
    async with LocalTransport() as t:
        wd = await probe_runner.box_workdir(t, "~/eagle3-x", sys.executable)
    assert wd == os.path.expanduser("~/eagle3-x") and wd.startswith("/")


async def test_model_probe_locally_on_real_vllm_source(local_workdir: Path) -> None:
    cfg = local_workdir / "kimi"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps(vs.KIMI_K25_CONFIG))
    bus = EventBus()
    seen = Collect(bus)
    async with LocalTransport() as t:
        (res,) = await run_probe(t, "model", ["--model", str(cfg), "--vllm-root", str(vs.vllm_root("0.16.0"))],
                                 workdir=str(local_workdir), python=sys.executable, bus=bus, host="local")
    assert res["layers_path"] == "language_model.model.layers"
    (event,) = seen.of(ev.PROBE_RESULT)
    assert event.payload["summary"].startswith(
        "KimiK25ForConditionalGeneration: language_model.model.layers (61 layers), SupportsEagle3: no")


@pytest.mark.parametrize("which", sorted(BROKEN))
async def test_broken_probe_output_becomes_one_error_event(
    which: str, tmp_path: Path, local_workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probe_runner, "PROBES_DIR", broken_probes_dir(tmp_path, which))
    bus = EventBus()
    seen = Collect(bus)
    async with LocalTransport() as t:
        with pytest.raises(ProbeFailed) as info:
            await _env_probe(t, str(local_workdir), sys.executable, bus, "local")
    assert isinstance(info.value, RemoteError) and info.value.exit_code == 1
    assert str(info.value).startswith(EXPECTED[which])
    assert "\n" not in str(info.value)
    assert seen.of(ev.PROBE_RESULT) == []
    (err,) = seen.of(ev.PROBE_ERROR)
    assert err.payload == {"probe": "env", "message": str(info.value), "summary": str(info.value)}


def _running_with(arg: str) -> list[int]:
    """PIDs (not zombies) whose command line mentions `arg`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if arg.encode() in cmd and state != "Z":
            pids.append(int(proc.name))
    return pids


async def test_timed_out_probe_ends_itself_on_the_box(local_workdir: Path) -> None:
    """The console stops waiting after `timeout`; the probe (a real sweep of vLLM 0.33.0, which
    takes far longer) must not linger: it ends itself at its deadline."""
    bus = EventBus()
    seen = Collect(bus)
    script = str(local_workdir / "probes" / "model_probe.py")
    async with LocalTransport() as t:
        with pytest.raises(ProbeFailed, match="did not finish within 1 s"):
            await run_probe(t, "model", ["--all", "--vllm-root", str(vs.vllm_root("0.33.0"))],
                            workdir=str(local_workdir), python=sys.executable, bus=bus, host="local", timeout=1)
    assert len(seen.of(ev.PROBE_ERROR)) == 1
    for _ in range(100):  # deadline = timeout + 5 s
        if not _running_with(script):
            break
        await asyncio.sleep(0.2)
    assert _running_with(script) == []


def test_parse_probe_output_keeps_valid_results_in_order() -> None:
    lines = [json.dumps({"kind": "result", "probe": "model", "result": {"architecture": a}}) for a in "AB"]
    assert parse_probe_output("model", ["", *lines, ""], [], 0) == [{"architecture": "A"}, {"architecture": "B"}]
    with pytest.raises(ProbeFailed, match="exited 2: after 2 result line"):
        parse_probe_output("model", lines, [], 2)


async def test_unknown_probe_is_a_usage_error(local_workdir: Path) -> None:
    async with LocalTransport() as t:
        with pytest.raises(RemoteError) as info:
            await run_probe(t, "gpu-magic", workdir=str(local_workdir))
    assert info.value.exit_code == 2


# -- over the loopback sshd ---------------------------------------------------------------------
@pytest.mark.ssh
async def test_probes_over_ssh(sshd: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from remote.link.connect import make_transport

    host = sshd.host_config("box")
    bus = EventBus()
    seen = Collect(bus)
    t = make_transport(host, bus=bus)
    await t.connect()
    try:
        (res,) = await _env_probe(t, host.workdir, host.python, bus, host.name)
        assert res["python"]["executable"]
        (model,) = await run_probe(t, "model", ["--arch", "LlamaForCausalLM", "--vllm-root",
                                                str(vs.vllm_root("0.33.0"))],
                                   workdir=host.workdir, python=host.python, bus=bus, host=host.name)
        assert model["layers_path"] == "model.layers" and model["supports_eagle3"] is True
        monkeypatch.setattr(probe_runner, "PROBES_DIR", broken_probes_dir(tmp_path, "killed"))
        with pytest.raises(ProbeFailed, match="killed by signal 9"):
            await _env_probe(t, host.workdir, host.python, bus, host.name)
    finally:
        await t.close()
    assert [e.payload["probe"] for e in seen.of(ev.PROBE_RESULT)] == ["env", "model"]
    assert len(seen.of(ev.PROBE_ERROR)) == 1
    assert all(e.host == "box" for e in seen.of(ev.PROBE_RESULT))


# -- the CLI as a user runs it ------------------------------------------------------------------
def console(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "console.toml"
    if not cfg.exists():
        cfg.write_text(f'[hosts.local]\nworkdir = "{tmp_path / "box"}"\n')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "console", "probe", *args, "--config", str(cfg), "--no-record"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def test_cli_probe_env_json(tmp_path: Path) -> None:
    res = console(tmp_path, "env", "--host", "local", "--json")
    assert res.returncode == 0, res.stderr
    events = [Event.from_json(line) for line in res.stdout.splitlines()]
    (result,) = [e for e in events if e.kind == ev.PROBE_RESULT]
    assert result.payload["probe"] == "env" and result.host == "local"
    assert result.payload["result"]["gpu"]["source"] == "none"


def test_cli_probe_compat_for_kimi_on_016_exits_4(tmp_path: Path) -> None:
    """This venv has speculators 0.3.0 installed (the reference box's version), no vLLM: the model
    probe reads the real vLLM 0.16.0 source given by --vllm-root."""
    cfg = tmp_path / "kimi"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps(vs.KIMI_K25_CONFIG))
    res = console(tmp_path, "compat", "--model", str(cfg), "--vllm-root", str(vs.vllm_root("0.16.0")), "--json")
    assert res.returncode == 4, res.stderr
    events = [Event.from_json(line) for line in res.stdout.splitlines()]
    compat_results = [e for e in events if e.kind == ev.PROBE_RESULT and e.payload["probe"] == "compat"]
    (c,) = compat_results
    rules = {f["rule"] for f in c.payload["result"]["findings"]}
    assert {"speculators-0.3-worker-hook", "speculators-0.3-tokenizer-remote-code",
            "speculators-0.3-scheduler-encoder-decoder"} <= rules
    assert sum(e.kind == ev.CONSOLE_ERROR for e in events) == 5
    assert sum(e.kind == ev.CONSOLE_WARNING for e in events) == 2


def test_cli_probe_source_and_model_human_lines(tmp_path: Path) -> None:
    root = str(vs.vllm_root("0.33.0"))
    res = console(tmp_path, "model", "--arch", "DeepseekV3ForCausalLM", "--vllm-root", root)
    assert res.returncode == 0, res.stderr
    assert "DeepseekV3ForCausalLM: model.layers, SupportsEagle3: yes (vLLM 0.33.0)" in res.stdout
    res = console(tmp_path, "source", "--family", "kimi", "--vllm-root", root)
    assert res.returncode == 0, res.stderr
    assert "KimiK25ForConditionalGeneration" in res.stdout


def test_cli_usage_errors_exit_2(tmp_path: Path) -> None:
    for args in (["model"], ["compat"], ["source"], ["env", "--all"]):
        res = console(tmp_path, *args)
        assert res.returncode == 2, args
        assert res.stderr.startswith("error: "), args


def test_cli_probe_without_vllm_is_a_clean_error(tmp_path: Path) -> None:
    res = console(tmp_path, "model", "--arch", "LlamaForCausalLM")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr + res.stdout
    assert "error: probe model: vLLM is not installed" in res.stderr
