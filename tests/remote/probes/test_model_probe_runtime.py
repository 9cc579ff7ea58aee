"""Static answer = runtime answer, on the real vLLM 0.32 CPU box environment.

For every registered architecture that transformers knows a config for, the box's python builds
a tiny model from config the way vLLM's loader does (tests/runtime_model_tree.py: same
`initialize_model(vllm_config=...)`, on the meta device); the probe reads the same vLLM's source
with the same config.json. Agreement: the probe's layers path names a ModuleList/ModuleDict of the
built model holding exactly the text decoder's layers, and its SupportsEagle3 answer equals
`supports_eagle3(model)`. One real engine (load_format="dummy") checks that the meta build is
the tree the engine serves.

Cost, measured on the 2-core reference machine under load: both tests 292 s (one engine start,
then 180 tiny configs in one process, 88 of which build on CPU; 80 s of building).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remote.probes import model_probe
from tests.box_env import ensure

HERE = Path(__file__).resolve().parents[2]
RUNTIME = HERE / "runtime_model_tree.py"
TEXT_LAYERS = 3  # what runtime_model_tree.py gives the text decoder (other nested configs: 2)


def box_env() -> dict[str, str]:
    return {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def box_package_root(python: Path, name: str) -> str:
    out = subprocess.run([str(python), "-c", "import importlib.util as u;"
                          f"print(next(iter(u.find_spec({name!r}).submodule_search_locations)))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip()


def json_lines(text: str) -> list[dict[str, Any]]:
    """vLLM logs to stdout too: keep the result lines."""
    return [json.loads(x) for x in text.splitlines() if x.startswith("{")]


def compare(src: Any, row: dict[str, Any]) -> dict[str, Any]:
    """One built model against the probe's static answer for the same config."""
    static = model_probe.describe(src, row["arch"], row["config"])
    lists = row["layer_lists"]
    path = static.get("layers_path")
    path_ok = static["status"] == "resolved" and lists.get(path) == TEXT_LAYERS
    eagle_ok = static.get("supports_eagle3") == row["supports_eagle3"]
    return {"arch": row["arch"], "agree": path_ok and eagle_ok, "static_status": static["status"],
            "static_path": path, "static_reason": static.get("reason"),
            "runtime_lists": sorted(p for p, n in lists.items() if n == TEXT_LAYERS),
            "static_eagle3": static.get("supports_eagle3"), "runtime_eagle3": row["supports_eagle3"]}


@pytest.fixture(scope="session")
def box_python() -> Path:
    return ensure("vllm032")


@pytest.mark.slow
def test_meta_build_is_the_tree_the_engine_serves(box_python: Path, tmp_path: Path) -> None:
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": TEXT_LAYERS,
           "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 32, "vocab_size": 512, "max_position_embeddings": 512}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    proc = subprocess.run([str(box_python), str(RUNTIME), "--engine", str(tmp_path / "cfg.json")],
                          capture_output=True, text=True, env=box_env(), timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (got,) = json_lines(proc.stdout)
    assert got["engine_tree"] == got["meta_tree"]
    assert ["model.layers", "ModuleList"] in got["engine_tree"]
    assert got["engine_supports_eagle3"] is got["meta_supports_eagle3"] is True


@pytest.mark.slow
def test_static_answer_equals_runtime_answer(box_python: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.run([str(box_python), str(RUNTIME), "--registry"], capture_output=True, text=True,
                          env=box_env(), timeout=1800, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json_lines(proc.stdout)
    src = model_probe.Source(box_package_root(box_python, "vllm"), box_package_root(box_python, "transformers"))
    loaded = [r for r in rows if r["loaded"]]
    results = [compare(src, r) for r in loaded]
    agree = [r for r in results if r["agree"]]
    ratio = len(agree) / len(results) if results else 0.0
    with capsys.disabled():
        print(f"\nvLLM {src.version}: {len(rows)} architectures tried, {len(loaded)} built on CPU, "
              f"{len(agree)} agree ({100 * ratio:.1f} %), {sum(r['seconds'] for r in rows):.0f} s building")
        print("checked: " + ", ".join(r["arch"] for r in results))
        for r in results:
            if not r["agree"]:
                print(f"  disagree {r['arch']}: static {r['static_status']} {r['static_path']} "
                      f"eagle3={r['static_eagle3']} ({r['static_reason']}); runtime {r['runtime_lists']} "
                      f"eagle3={r['runtime_eagle3']}", file=sys.stdout)
    assert len(loaded) >= 20, [r.get("error") for r in rows][:20]
    # Every SupportsEagle3 answer must match; the layers path may miss only where the probe says
    # it could not settle (never a wrong path).
    assert all(r["static_eagle3"] == r["runtime_eagle3"] for r in results if r["static_status"] == "resolved")
    wrong = [r for r in results if r["static_status"] == "resolved" and not r["agree"]]
    assert not wrong, wrong
    assert ratio >= 0.9
