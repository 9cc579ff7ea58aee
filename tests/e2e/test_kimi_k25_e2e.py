"""Kimi-K2.5's shape end to end on vLLM 0.32 CPU, driven through the console as a user drives a
box (issue #13 point 4): a tiny checkpoint of vLLM's own KimiK25ForConditionalGeneration
(tests/tiny_targets.py build_kimi_k25: hub config schema and tensor names, DeepSeek-V3 MLA + MoE
text model under `language_model`, a MoonViT tower, remote code for transformers 4).

On the session's engine box (sshd, the vllm032 box environment; its server stopped first, one
engine at a time): probe model + compat, then `console run` with the `vllm` extract backend
(our worker hooks in vLLM 0.32: engine 1) and speculators 0.9 training, then `console serve
start` with the trained EAGLE-3 head (engine 2) and `console bench run` against it.

The target is untrained (random weights: building a trained one costs minutes on these
cores), so acceptance figures say nothing about quality here; the test checks that every step
runs on the real engine and that the served counters are vLLM's own. The speculators 0.3 path
and a trained target were run by hand (docs/measurements.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remote.spine import events as ev
from tests.engine_fixture import EngineBox, events
from tests.tiny_targets import KIMI_LAYERS, build_kimi_pipeline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # two engine starts, shared cores

STAGES = ("prepare", "extract", "vocab", "train", "evaluate")


@pytest.fixture(scope="module")
def kimi_pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Small everywhere but in the engines (their start is most of this test's time).
    return build_kimi_pipeline(tmp_path_factory.mktemp("kimi"), samples=24, eval_samples=2,
                               epochs=1, max_new_tokens=8, backend="vllm", target_steps=0)


def _errors(evs: list[ev.Event]) -> list[str]:
    return [str(e.payload.get("message")) for e in evs if e.kind == ev.CONSOLE_ERROR]


def test_tiny_kimi_k25_probe_extract_train_serve_bench(engine_box: EngineBox, kimi_pipeline: Path,
                                                        tmp_path: Path) -> None:
    engine_box.release()  # one engine at a time
    root = kimi_pipeline.parent
    target = root / "target"

    # probe + compat: where vLLM 0.32 keeps Kimi's layers, and nothing known to break.
    s = tmp_path / "probe.jsonl"
    assert engine_box.cli("probe", "compat", "--model", str(target), session=s) == 0, \
        _errors(events(s))
    results = [e.payload for e in events(s) if e.kind == ev.PROBE_RESULT]
    model = next(r["result"] for r in results if r.get("probe") == "model")
    assert model["layers_path"] == "language_model.model.layers"
    assert model["supports_eagle3"] is True
    assert model["num_layers"] == KIMI_LAYERS

    # the pipeline: vLLM extraction (engine 1), speculators 0.9 training, offline evaluate.
    s = tmp_path / "run.jsonl"
    rc = engine_box.cli("run", "--pipeline", str(kimi_pipeline), session=s)
    evs = events(s)
    assert rc == 0, _errors(evs)
    ends = {e.payload["stage"]: e.payload for e in evs if e.kind == ev.STAGE_END}
    assert all(ends[st]["ok"] for st in STAGES), ends
    infos = " ".join(str(e.payload.get("message", "")) for e in evs if e.kind == ev.CONSOLE_INFO)
    # where the hooks went, said in the log: the wrapper's language model, not a vision block
    assert "at the outputs of get_language_model().model.layers[id-1] (4 layers;" in infos
    # text only: Kimi's one modality (vision_chunk) at 0, so vLLM built no MoonViT tower
    assert "not built (text only): vision_tower, mm_projector" in infos, infos
    out = root / "out"
    meta = json.loads((out / "extract" / "meta.json").read_text())
    assert (meta["backend"], meta["format"], meta["layer_ids"]) == ("vllm", "0.9", [1, 2, 3, 4])
    from safetensors.torch import load_file

    hs = load_file(str(out / "extract" / "hidden_states" / "hs_0.safetensors"))["hidden_states"]
    assert hs.shape[1:] == (4, 64) and hs.float().abs().max() > 0.01
    head = json.loads((out / "train" / "checkpoint" / "config.json").read_text())
    assert head["eagle3_console"]["speculators"] == "0.9.0"
    assert head["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]

    # serve the target with the trained head (engine 2), bench it, stop it.
    s = tmp_path / "serve.jsonl"
    rc = engine_box.cli("serve", "start", "--pipeline", str(kimi_pipeline),
                        "--vllm-args=--enforce-eager --max-model-len 256", session=s)
    assert rc == 0, _errors(events(s))
    try:
        s = tmp_path / "bench.jsonl"
        rc = engine_box.cli("bench", "run", "--max-tokens", "8", "--concurrency", "1,2",
                            "--prompts", str(out / "prepare" / "eval.jsonl"),
                            "--offline", str(out / "evaluate" / "acceptance.json"), session=s)
        evs = events(s)
        assert rc == 0, _errors(evs)
    finally:
        assert engine_box.cli("serve", "stop") == 0
    points = [e.payload for e in evs if e.kind == ev.BENCH_POINT]
    assert [p["concurrency"] for p in points] == [1, 2]
    for p in points:  # vLLM's own spec-decode counters over each point's window
        acc = p["acceptance"]
        assert p["failed"] == 0 and acc["drafts"] > 0, p  # the head drafted on the Kimi target
        assert acc["mean_length"] == pytest.approx(1 + acc["accepted"] / acc["drafts"])
    final = [str(e.payload.get("message")) for e in evs if e.kind == ev.CONSOLE_INFO][-1]
    assert final.startswith("mean acceptance length: offline ") and " drafts)" in final, final
