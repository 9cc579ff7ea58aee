"""`[train] mode = "online"` (pipeline/trainers/online.py; issue #39 point 2), what this machine
allows: the argv as the installed speculators 0.9 parses it, the refusal in one line on both box
environments before anything starts, and the extraction server's lifecycle beside training,
stopped on every exit path with nothing of it left.

The real server needs CUDA (vLLM's ExampleHiddenStatesConnector), so the lifecycle runs the test
double tests/doubles/extraction_server.py (a readiness endpoint, a worker process, SIGTERM
handling as vLLM's server has); the CUDA route itself is scripts/gpu_check.py's `online` check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from pipeline import config as pconfig
from pipeline.errors import PipelineError
from pipeline.ranks import free_port
from pipeline.regen_client import api_url, model_id
from pipeline.stages import extract_server
from pipeline.stages.extract_server import vllm_09_server_argv
from pipeline.trainers import cli, online
from tests import box_env
from tests.processes import alive, wait_gone
from tests.tiny_pipeline import tiny_pipeline

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "extraction_server.py"


def _pipeline(root: Path, mode: str = "online", speculators: str = "auto") -> Path:
    return tiny_pipeline(root, f'mode = "{mode}"\nspeculators = "{speculators}"\n')


def _processes_naming(text: str) -> list[int]:
    """Every live process whose command line contains `text` (a path only this test uses)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes() and alive(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        except (OSError, ValueError):
            continue
    return found


def _double(tmp_path: Path, *extra: str) -> tuple[list[str], str, Path]:
    port = free_port()
    pidfile = tmp_path / "server.pids"
    return ([sys.executable, str(DOUBLE), str(port), str(pidfile), *extra],
            f"http://127.0.0.1:{port}/v1", pidfile)


def _pids(pidfile: Path) -> list[int]:
    return [int(x) for x in pidfile.read_text().split()]


def test_the_argv_is_what_speculators_09_parses(tmp_path: Path) -> None:
    """The server is the offline route's (extract_hidden_states + the connector writing to the
    staging directory); training asks it for missing samples. The installed speculators 0.9
    (the vLLM 0.32 box environment) parses the argv into on_missing=generate and the endpoint."""
    cfg = pconfig.load(_pipeline(tmp_path, "offline", "0.9"), check_disk=False)
    staging = tmp_path / "states"
    server = vllm_09_server_argv(cfg, staging, 8123)
    spec = json.loads(server[server.index("--speculative_config") + 1])
    assert spec["method"] == "extract_hidden_states"
    assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == \
        [2, 4, 5, 8]
    kv = json.loads(server[server.index("--kv_transfer_config") + 1])
    assert kv["kv_connector"] == "ExampleHiddenStatesConnector"
    assert kv["kv_connector_extra_config"]["shared_storage_path"] == str(staging)
    base = cli.train_argv(cfg, tmp_path / "extract", tmp_path / "vocab", tmp_path / "ck", "cpu")
    argv = online.train_argv(base, "http://127.0.0.1:8123/v1")
    assert argv[argv.index("--on-missing") + 1] == "generate"
    assert argv[-2:] == ["--vllm-endpoint", "http://127.0.0.1:8123/v1"]
    assert base[base.index("--on-missing") + 1] == "raise"  # offline's own argv untouched
    python = str(box_env.ensure("vllm032"))
    code = ("import json, sys; from speculators.train.config import TrainConfig; "
            "a = TrainConfig.resolve(json.loads(sys.argv[1])).flatten(); "
            "print(json.dumps([a['on_missing'], a['vllm_endpoint'], a['data_path']]))")
    done = subprocess.run([python, "-c", code, json.dumps(argv)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == \
        ["generate", "http://127.0.0.1:8123/v1", str(tmp_path / "extract")]


@pytest.mark.parametrize(("stack", "why"), [
    ("vllm016", r'train\.mode = "online" needs speculators >= 0\.5 .*this python has '
                r"speculators 0\.3\.\d+, which trains offline only"),
    ("vllm032", r'train\.mode = "online" needs the extraction server .*runs only on CUDA; '
                r"this box has no CUDA GPU"),
])
def test_online_is_refused_in_one_line_before_anything_starts(tmp_path: Path, stack: str,
                                                             why: str) -> None:
    """On each box environment of this machine: `validate` (what the console runs before any
    stage) and `run` (the box runner) exit 2 with one line saying why; no stage ran, no
    output was written, and no process of it is left."""
    import re

    cfg = _pipeline(tmp_path)
    python = str(box_env.ensure(stack))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for command in ("validate", "run"):
        proc = subprocess.Popen([python, "-m", "pipeline", command, "--config", str(cfg)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, (command, out[-2000:], err[-2000:])
        if command == "validate":
            lines = [ln for ln in err.splitlines() if ln.strip()]
        else:  # the box runner says it in its records: one error, then every stage not run
            records = [json.loads(ln.removeprefix("@@eagle3 ")) for ln in out.splitlines()
                       if ln.startswith("@@eagle3 ")]
            lines = [f"error: {r['message']}" for r in records if r["type"] == "error"]
            assert [r["stage"] for r in records if r["type"] == "not_run"] == \
                ["prepare", "extract", "vocab", "train", "evaluate"]
        assert len(lines) == 1 and re.search(why, lines[0]), (command, out, err)
        assert lines[0].startswith(f"error: {cfg}: ")
        assert not _processes_naming(str(tmp_path))  # nothing it started lives on
    assert not (tmp_path / "out" / "prepare").exists()
    assert not list((tmp_path / "out").rglob("online*")) if (tmp_path / "out").exists() else True


def test_online_with_extract_hosts_is_refused(tmp_path: Path) -> None:
    """Nothing to shard: the states are made while training."""
    from pipeline.errors import ConfigInvalid

    text = _pipeline(tmp_path).read_text().replace("reserve_bytes = 0\n",
                                                   'reserve_bytes = 0\nhosts = ["a", "b"]\n')
    (tmp_path / "sharded.toml").write_text(text)
    with pytest.raises(ConfigInvalid, match=r'train\.mode = "online" .* nothing to extract '
                       r"across extract\.hosts"):
        pconfig.load(tmp_path / "sharded.toml", check_disk=False)


@pytest.mark.parametrize("train_lines", ["nproc_per_node = 2\n", 'hosts = ["a", "b"]\n'])
def test_online_with_ranks_is_refused(tmp_path: Path, train_lines: str) -> None:
    """Online trains as one process beside its server: ranks are refused, not ignored."""
    from pipeline.errors import ConfigInvalid

    (tmp_path / "ranks.toml").write_text(tiny_pipeline(
        tmp_path, f'mode = "online"\n{train_lines}').read_text())
    with pytest.raises(ConfigInvalid, match=r'train\.mode = "online" trains as one process .*'
                       r"nproc_per_node = 1 and no train\.hosts"):
        pconfig.load(tmp_path / "ranks.toml", check_disk=False)


def test_online_train_refuses_before_starting_a_server(tmp_path: Path) -> None:
    """The stage's own check (a config loaded elsewhere): here, on CPU without vLLM, the line,
    and the server double never started."""
    cfg = pconfig.load(_pipeline(tmp_path, "offline", "0.9"), check_disk=False)
    started: list[Path] = []

    def argv(staging: Path, port: int) -> list[str]:
        started.append(staging)
        return _double(tmp_path)[0]

    with pytest.raises(PipelineError, match=r'train\.mode = "online" needs vLLM >= 0\.18'):
        online.train(cfg, tmp_path / "extract", tmp_path / "vocab", tmp_path / "t" / "ck",
                     "cpu", server_argv=argv)
    assert not started and not (tmp_path / "server.pids").exists()


def test_the_server_stops_when_training_ends_or_fails(tmp_path: Path) -> None:
    """Beside a training that returns, and one that raises: the server answered while it ran,
    and afterwards neither it nor its worker is left; the failure is the training's own."""
    argv, endpoint, pidfile = _double(tmp_path)
    with extract_server.server_beside(argv, endpoint, tmp_path / "server.log") as proc:
        with urllib.request.urlopen(endpoint + "/models", timeout=5) as r:
            assert json.loads(r.read())["data"][0]["id"] == "double"
        pids = _pids(pidfile)
        assert pids[0] == proc.pid and all(alive(p) for p in pids)
    assert not wait_gone(pids)

    argv, endpoint, pidfile = _double(tmp_path)
    with (pytest.raises(RuntimeError, match="training failed"),
          extract_server.server_beside(argv, endpoint, tmp_path / "server.log")):
        pids = _pids(pidfile)
        raise RuntimeError("training failed")
    assert not wait_gone(pids)


def test_a_loopback_server_gives_its_base_url_and_its_api_answers_under_it(
        tmp_path: Path) -> None:
    """One place owns a server's URL form (pipeline/regen_client.py): loopback_server (the
    extraction, online and regeneration servers) yields the base URL, its readiness was asked at
    the API's root, and a client reaches the API from the base URL or from the /v1 form a user
    may write, with or without a trailing slash."""
    pidfile, ports = tmp_path / "server.pids", []

    def argv(port: int) -> list[str]:
        ports.append(port)
        return [sys.executable, str(DOUBLE), str(port), str(pidfile)]

    with extract_server.loopback_server(argv, tmp_path / "server.log", "prepare",
                                        "starting the double") as url:
        assert url == f"http://127.0.0.1:{ports[0]}"
        assert api_url(url) == url + "/v1"
        for written in (url, url + "/", url + "/v1", url + "/v1/"):
            assert model_id(written) == "double", written
        pids = _pids(pidfile)
    assert not wait_gone(pids)


def test_a_server_that_cannot_start_is_one_error(tmp_path: Path) -> None:
    argv, endpoint, _ = _double(tmp_path, "--exit-at-once")
    with (pytest.raises(PipelineError, match=r"the extraction server exited 3 before it answered"),
          extract_server.server_beside(argv, endpoint, tmp_path / "server.log")):
        raise AssertionError("the body must not run")


def test_sigterm_of_the_stage_stops_the_server(tmp_path: Path) -> None:
    """A cancel: SIGTERM to the stage while it trains. The stage exits 143 and takes the server
    and its worker with it."""
    argv, endpoint, pidfile = _double(tmp_path)
    script = ("import json, sys, time\n"
              "from pathlib import Path\n"
              "from pipeline.stages.extract_server import server_beside\n"
              "with server_beside(json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3])):\n"
              "    print('training', flush=True)\n"
              "    time.sleep(600)\n")
    stage = subprocess.Popen([sys.executable, "-c", script, json.dumps(argv), endpoint,
                              str(tmp_path / "server.log")], cwd=REPO, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert stage.stdout is not None
        assert stage.stdout.readline().strip() == "training"
        pids = _pids(pidfile)
        assert all(alive(p) for p in pids)
        stage.terminate()
        assert stage.wait(timeout=60) == 143
    finally:
        if stage.poll() is None:
            stage.kill()
            stage.wait()
    assert not wait_gone(pids)
