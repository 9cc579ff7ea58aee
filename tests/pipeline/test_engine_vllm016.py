"""The founding stack, live: vLLM 0.16 (CPU build) + speculators 0.3.0 in the `vllm016` box
environment, a tiny LlavaNext target (multimodal wrapper, no SupportsEagle3 in vLLM 0.16,
standard attention).

- unpatched, speculators 0.3's worker refuses the model exactly as in the founding report, and
  the compat advisor, fed the model probe's answer from the same environment, predicted it;
- `console patch apply` (on a copy of the installed speculators, put first on the engine's
  import path: the shared cached environment is never edited) fixes it;
- then extraction through the engine equals the `hf` backend's at the same layer ids for every
  sample, short ones and ones several prefill chunks long, in mixed order.

Engines: two starts (the refused one stops right after start-up). A missing environment fails
(tests/box_env.py builds it), never skips.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from console.cli import main as console_main
from remote.compat import advise
from remote.errors import EXIT_OK
from tests import box_env, tiny_targets
from tests.local_box import local_console_toml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
IDS = [1, 3, tiny_targets.NUM_LAYERS]  # our ids incl. N; worker indices 0, 2, 3
# fp32 on both sides; the CPU attention kernel and SDPA sum in different orders.
ATOL = 1e-4
RTOL = 1e-4


@pytest.fixture(scope="module")
def box() -> Path:
    return box_env.ensure("vllm016")


@pytest.fixture(scope="module")
def llava(box: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("llava") / "target"
    subprocess.run([str(box), "-c", "import sys; from pathlib import Path; "
                    "from tests.tiny_targets import build_llava_next; "
                    "build_llava_next(Path(sys.argv[1]))", str(d)],
                   check=True, env=box_env.run_env(), cwd=REPO, stdin=subprocess.DEVNULL)
    return d


@pytest.fixture(scope="module")
def overlay(box: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the environment's speculators package, imported before the original.
    Found without importing it (its import pulls in torch and transformers: seconds of CPU
    here; the engine runs below import it anyway)."""
    out = subprocess.run([str(box), "-c", "import importlib.util as u; "
                          "print(next(iter(u.find_spec('speculators').submodule_search_locations)))"],
                         check=True, capture_output=True, text=True)
    sp = tmp_path_factory.mktemp("overlay")
    shutil.copytree(out.stdout.strip(), sp / "speculators",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return sp


def _engine(box: Path, overlay: Path, tmp: Path, mode: str, model: Path,
            *extra: str) -> dict[str, Any]:
    out = tmp / f"{mode}.json"
    vocab = json.loads((model / "config.json").read_text())["text_config"]["vocab_size"]
    proc = subprocess.run(
        [str(box), "-m", "tests.engine_capture", mode, "--model", str(model),
         "--ids", ",".join(map(str, IDS)), "--num-layers", str(tiny_targets.NUM_LAYERS),
         "--vocab", str(vocab - 1), "--out", str(out), *extra],
        env=box_env.run_env(overlay), cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=900)
    assert proc.returncode == 0 and out.exists(), proc.stderr[-3000:]
    return json.loads(out.read_text())


def _probe(box: Path, model: Path) -> dict[str, Any]:
    proc = subprocess.run([str(box), str(REPO / "remote/probes/model_probe.py"), "--model",
                           str(model)], capture_output=True, text=True, check=True)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return next(r["result"] for r in results if r.get("kind") == "result")


def test_unpatched_worker_refuses_the_wrapper_and_the_advisor_said_so(
        box: Path, llava: Path, overlay: Path, tmp_path: Path) -> None:
    model = _probe(box, llava)
    assert model["architecture"] == "LlavaNextForConditionalGeneration"
    assert model["supports_eagle3"] is False
    findings = {f.rule: f for f in advise({"packages": {"vllm": "0.16.0",
                                                        "speculators": "0.3.0"}}, model)}
    hook = findings["speculators-0.3-worker-hook"]
    assert hook.fix["recipe"] == "resolve-text-decoder"
    assert "language_model" in hook.detail

    got = _engine(box, overlay, tmp_path, "setup", llava)
    assert got["ok"] is False
    # The worker's ValueError, as collective_rpc hands it back from the engine core.
    assert ("Model LlavaNextForConditionalGeneration does not support hidden state "
            "extraction") in got["error"]


def test_patch_apply_then_vllm_states_equal_hf_on_every_sample(
        box: Path, llava: Path, overlay: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    local_console_toml(tmp_path)
    common = ["--host", "local", "--site-packages", str(overlay), "--no-record", "--json"]
    assert console_main(["patch", "apply", "--yes", *common]) == EXIT_OK
    worker = (overlay / "speculators/data_generation/custom_worker.py").read_text()
    assert "_resolve_text_decoder(model)" in worker and "_embed_input_ids" in worker

    # 32-token prefill chunks: the 45-, 64-, 90- and 130-token samples take several steps.
    got = _engine(box, overlay, tmp_path, "compare", llava, "--max-batched", "32",
                  "--lengths", "7,45,130,3,64,90,33,1")
    assert got["ok"] is True, got.get("traceback")
    samples = got["samples"]
    assert [s["len"] for s in samples] == [7, 45, 130, 3, 64, 90, 33, 1]
    for s in samples:
        assert s["rows"] == [s["len"]] * len(IDS)
        for lid in map(str, IDS):
            assert s["max_abs"][lid] > 0.01  # a real state, not zeros (init std 0.02)
            assert s["max_abs_diff"][lid] <= ATOL + RTOL * s["max_abs"][lid], (s, lid)

    assert console_main(["patch", "rollback", *common]) == EXIT_OK
    assert "_resolve_text_decoder" not in (
        overlay / "speculators/data_generation/custom_worker.py").read_text()
