"""The model-structure probe against the real source of vLLM 0.16.0 and 0.33.0 (wheels, not mocks).

Ground truth (read by hand from the same files, docs/design.md §2): Kimi-K2.5 keeps its decoder at
`language_model.model.layers`, has no top-level `.model`, and implements SupportsEagle3 only from
0.18 on; Llama is `model.layers` and implements it in both; DeepSeek-V3 is `model.layers` and
implements it only in the newer release.
"""

from __future__ import annotations

import ast
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote.probes import model_probe
from tests import vllm_sources as vs
from tests.local_box import local_console_toml
from tests.old_python import python38

PROBE = Path(model_probe.__file__)


def hop_classes(res: dict) -> list[tuple[str, str | None, bool]]:
    return [(h["class"], h.get("attr"), h["supports_eagle3"]) for h in res["hops"]]


@pytest.mark.parametrize(("version", "eagle3"), [("0.16.0", False), ("0.33.0", True)])
def test_kimi_k25_layers_are_under_its_language_model(version: str, eagle3: bool) -> None:
    """The wrapper holds no `model`: the walk goes through `language_model`; SupportsEagle3 on
    the wrapper and the causal LM from 0.33 on, never on the inner model."""
    res = model_probe.describe(vs.source(version), "KimiK25ForConditionalGeneration", vs.KIMI_K25_CONFIG)
    assert res["vllm_version"] == version
    assert res["status"] == "resolved", res.get("reason")
    assert res["layers_path"] == "language_model.model.layers"
    assert hop_classes(res) == [
        ("KimiK25ForConditionalGeneration", "language_model", eagle3),
        ("DeepseekV2ForCausalLM", "model", eagle3),
        ("DeepseekV2Model", None, False),
    ]
    assert res["has_model_attr"] is False
    assert res["supports_eagle3"] is eagle3


def test_kimi_k25_on_016_has_no_eagle3_and_no_top_level_model() -> None:
    res = model_probe.describe(vs.source("0.16.0"), "KimiK25ForConditionalGeneration", vs.KIMI_K25_CONFIG)
    assert res["num_layers"] == 61 and res["num_layers_from"] == "text_config.num_hidden_layers"
    assert res["default_aux_layers"] is None
    assert "does not implement SupportsEagle3" in res["default_aux_layers_from"]
    # The language model is chosen in kimi_k25.py by an explicit architectures=[...] list.
    assert res["hops"][0]["attr_file"].startswith("vllm/model_executor/models/kimi_k25.py:")
    assert res["hops"][-1]["layers_built_by"] == "make_layers"
    # vLLM 0.16 refuses eagle3 for the deepseek_v3 text model at config time.
    gate = res["eagle3_config_gate"]
    assert gate["present"] is True and gate["allows"] is False
    assert "llama" in gate["model_types"] and gate["file"].startswith("vllm/config/speculative.py:")


def test_kimi_k25_on_033_implements_eagle3_with_default_aux_layers() -> None:
    res = model_probe.describe(vs.source("0.33.0"), "KimiK25ForConditionalGeneration", vs.KIMI_K25_CONFIG)
    assert res["default_aux_layers"] == [2, 30, 58]
    assert "interfaces.py" in res["default_aux_layers_from"]
    assert res["aux_capture"]["id_means"] == "input_of_layer"
    assert res["eagle3_config_gate"]["present"] is False


@pytest.mark.parametrize("version", ["0.16.0", "0.33.0"])
def test_llama_resolves_to_model_layers_and_implements_eagle3(version: str) -> None:
    res = model_probe.describe(vs.source(version), "LlamaForCausalLM", vs.LLAMA_CONFIG)
    assert res["status"] == "resolved", res.get("reason")
    assert res["layers_path"] == "model.layers"
    assert hop_classes(res) == [("LlamaForCausalLM", "model", True), ("LlamaModel", None, False)]
    assert res["has_model_attr"] is True
    assert res["default_aux_layers"] == [2, 16, 29]
    assert res["aux_capture"]["id_means"] == "input_of_layer"
    assert res["aux_capture"]["evidence"].startswith("vllm/model_executor/models/llama.py:")
    assert res["eagle3_config_gate"]["allows"] is True
    # 0.18+ (here 0.33): the inner model records aux states through EagleModelMixin
    assert res["hops"][-1]["eagle_model_mixin"] is (version == "0.33.0")
    # vLLM 0.16+ renamed the embedding method a replacement forward must call
    assert res["layers_owner_methods"] == {"get_input_embeddings": False, "embed_input_ids": True, "forward": True}


@pytest.mark.parametrize(("version", "eagle3"), [("0.16.0", False), ("0.33.0", True)])
def test_deepseek_v3(version: str, eagle3: bool) -> None:
    res = model_probe.describe(vs.source(version), "DeepseekV3ForCausalLM", vs.DEEPSEEK_V3_CONFIG)
    assert res["status"] == "resolved", res.get("reason")
    assert res["layers_path"] == "model.layers"
    assert hop_classes(res) == [("DeepseekV3ForCausalLM", "model", eagle3), ("DeepseekV2Model", None, False)]
    if eagle3:  # inherited from DeepseekV2ForCausalLM, which names SupportsEagle3 in its bases
        assert "through DeepseekV2ForCausalLM" in res["hops"][0]["eagle3_evidence"]
        assert res["default_aux_layers"] == [2, 30, 58]
    else:
        assert res["default_aux_layers"] is None


def test_hf_config_settles_a_wrapper_whose_text_model_comes_from_the_config() -> None:
    """Llava builds its language model from hf_config.text_config: without a config the probe
    says so (needs_config) with the line; with one it follows text_config.architectures."""
    src = vs.source("0.16.0")
    bare = model_probe.describe(src, "LlavaForConditionalGeneration")
    assert bare["status"] == "needs_config"
    assert bare["stopped_at"].startswith("vllm/model_executor/models/llava.py:")
    cfg = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
           "text_config": {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                           "num_hidden_layers": 32}}
    res = model_probe.describe(src, "LlavaForConditionalGeneration", cfg)
    assert res["status"] == "resolved", res.get("reason")
    assert res["layers_path"] == "language_model.model.layers"
    assert [h["class"] for h in res["hops"]] == ["LlavaForConditionalGeneration", "LlamaForCausalLM", "LlamaModel"]


def test_unknown_architecture_is_reported_not_guessed() -> None:
    res = model_probe.describe(vs.source("0.16.0"), "NoSuchModelForCausalLM")
    assert res["status"] == "unresolved"
    assert "not in this vLLM's model registry" in res["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.16.0", "0.33.0"])
def test_registry_sweep_resolves_the_large_majority(version: str, capsys: pytest.CaptureFixture[str]) -> None:
    results = vs.sweep(version)
    counts = collections.Counter(r["status"] for r in results)
    total = len(results)
    with capsys.disabled():
        print(f"\nvLLM {version}: {total} registered architectures: {dict(counts)}")
    assert total > 200
    assert counts["resolved"] + counts["needs_config"] + counts["unresolved"] == total
    # Fully resolved without any HF config: over three quarters. The rest but a few need the
    # model's config.json (the text model or model_type is named there), and say which key.
    assert counts["resolved"] / total > 0.75
    assert (counts["resolved"] + counts["needs_config"]) / total > 0.95
    for r in results:
        assert not r.get("reason", "").startswith("probe error"), (r["architecture"], r["reason"], r["stopped_at"])
        if r["status"] != "resolved":
            assert r["reason"], r["architecture"]
            assert r["stopped_at"] and ".py" in r["stopped_at"], r["architecture"]
        else:
            last = r["layers_path"].split(".")[-1]
            assert last in model_probe.LAYER_ATTRS or last.endswith("_layers"), r["layers_path"]
    by_arch = {r["architecture"]: r for r in results}
    # The Transformers backend builds its layers from the config's model_type: it says so.
    tf = by_arch["TransformersForCausalLM"]
    assert tf["status"] == "needs_config" and tf["config_key"] == "model_type"
    assert "AutoModel.from_config" in tf["reason"]
    for r in results:
        if r["status"] == "needs_config":
            assert r["config_key"], r["architecture"]
    # A constructor parameter's class comes from what the subclass passes up, else its default.
    assert by_arch["InternLM2ForCausalLM"]["layers_path"] == "model.layers"
    assert by_arch["ChatGLMModel"]["layers_path"] == "transformer.encoder.layers"


def test_probe_cli_prints_json_lines(tmp_path: Path) -> None:
    cfg = tmp_path / "kimi"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps(vs.KIMI_K25_CONFIG))
    proc = subprocess.run(
        [sys.executable, str(PROBE), "--model", str(cfg), "--vllm-root", str(vs.vllm_root("0.16.0"))],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [(x["kind"], x["probe"]) for x in lines] == [("result", "model")]
    assert lines[0]["result"]["layers_path"] == "language_model.model.layers"


def test_probe_cli_without_vllm_says_so(tmp_path: Path) -> None:
    """Run with an interpreter where vLLM is not installed (this venv has none)."""
    proc = subprocess.run([sys.executable, str(PROBE), "--arch", "LlamaForCausalLM"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    (line,) = [json.loads(x) for x in proc.stdout.splitlines()]
    assert line["kind"] == "error" and "vLLM is not installed" in line["message"]


def test_source_diagnostic_lists_kimi_files_classes_and_mentions() -> None:
    rep = model_probe.source_report(vs.source("0.16.0"), "kimi")
    files = {f["file"]: f for f in rep["files"]}
    k25 = files["vllm/model_executor/models/kimi_k25.py"]
    assert "KimiK25ForConditionalGeneration" in [c["name"] for c in k25["classes"]]
    assert any("self.language_model = init_vllm_registered_model(" in m["text"] for m in k25["mentions"])
    assert "KimiK25ForConditionalGeneration" in rep["architectures"]


def test_probes_are_python38_syntax() -> None:
    for path in sorted(PROBE.parent.glob("*.py")):
        ast.parse(path.read_text(), str(path), feature_version=(3, 8))


def test_every_probe_compiles_and_imports_under_python38() -> None:
    """Syntax alone misses a stdlib module or name that 3.8 lacks (graphlib, zoneinfo,
    functools.cache...): each probe's module-level imports, executed by a real 3.8 (a sibling's,
    `from . import x`, needs its package: the probe runs below, and each sibling is read here)."""
    check = (
        "import ast, sys\n"
        "for path in sys.argv[1:]:\n"
        "    tree = ast.parse(open(path).read(), path)\n"
        "    compile(tree, path, 'exec')\n"
        "    for node in tree.body:\n"
        "        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, 'level', 0):\n"
        "            exec(compile(ast.Module([node], []), path, 'exec'), {})\n"
        "print('ok', len(sys.argv) - 1)\n")
    probes = sorted(str(p) for p in PROBE.parent.glob("*.py"))
    proc = subprocess.run([str(python38()), "-I", "-c", check, *probes], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", str(len(probes))]


@pytest.mark.parametrize("version", ["0.16.0", "0.33.0"])
def test_probe_under_python38_matches(version: str, tmp_path: Path) -> None:
    """The box's python may be as old as 3.8: same answer as in-process, for real."""
    (tmp_path / "config.json").write_text(json.dumps(vs.KIMI_K25_CONFIG))
    proc = subprocess.run([str(python38()), str(PROBE), "--model", str(tmp_path),
                           "--vllm-root", str(vs.vllm_root(version))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    got = json.loads(line)["result"]
    want = model_probe.describe(vs.source(version), "KimiK25ForConditionalGeneration", vs.KIMI_K25_CONFIG)
    assert got == json.loads(json.dumps(want, sort_keys=True))


def test_unparsable_model_file_is_reported_with_its_line(tmp_path: Path) -> None:
    models = tmp_path / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    (models / "registry.py").write_text('_VLLM_MODELS = {"BrokenForCausalLM": ("broken", "BrokenForCausalLM")}\n')
    (models / "broken.py").write_text("class BrokenForCausalLM:\n    def __init__(self:\n        pass\n")
    res = model_probe.describe(model_probe.Source(str(tmp_path / "vllm")), "BrokenForCausalLM")
    assert res["status"] == "unresolved"
    assert res["reason"].startswith("vllm/model_executor/models/broken.py:2: cannot parse with Python")


def test_constructor_parameter_follows_what_the_subclass_passes() -> None:
    """InternLM2ForCausalLM builds `self.model = model_type(...)` with a parameter defaulting to
    InternLM2Model; InternLM2VEForCausalLM passes model_type=InternLM2VEModel up through super()."""
    src = vs.source("0.16.0")
    base = model_probe.describe(src, "InternLM2ForCausalLM")
    ve = model_probe.describe(src, "InternLM2VEForCausalLM")
    assert [h["class"] for h in base["hops"]] == ["InternLM2ForCausalLM", "InternLM2Model"]
    assert [h["class"] for h in ve["hops"]] == ["InternLM2VEForCausalLM", "InternLM2VEModel"]
    assert ve["layers_path"] == "model.layers"


# -- issue 16: following what vLLM builds at runtime ------------------------------------------

def transformers_root() -> str:
    """This venv's transformers source: what the probe reads for vLLM's Transformers backend."""
    root = model_probe.find_package_root("transformers")
    assert root, "transformers is part of this project's [ml] extra"
    return root


def test_class_argument_through_a_helper_is_followed() -> None:
    """Llama4 builds its text model with initialize_model(..., model_class=Llama4ForCausalLM)."""
    res = model_probe.describe(vs.source("0.33.0"), "Llama4ForConditionalGeneration")
    assert res["status"] == "resolved", res.get("reason")
    assert res["layers_path"] == "language_model.model.layers"
    assert [h["class"] for h in res["hops"]] == ["Llama4ForConditionalGeneration", "Llama4ForCausalLM", "Llama4Model"]


@pytest.mark.parametrize(("text_type", "inner"), [("gemma", "GemmaForCausalLM"), ("gemma2", "Gemma2ForCausalLM")])
def test_architecture_forced_in_code_from_text_model_type(text_type: str, inner: str) -> None:
    """PaliGemma sets text_config.architectures from text_config.model_type in its __init__: a
    config that names only the model_type settles it; without a config it names that key."""
    src = vs.source("0.33.0")
    bare = model_probe.describe(src, "PaliGemmaForConditionalGeneration")
    assert bare["status"] == "needs_config" and bare["config_key"] == "text_config.model_type"
    assert bare["stopped_at"].startswith("vllm/model_executor/models/paligemma.py:")
    cfg = {"architectures": ["PaliGemmaForConditionalGeneration"], "text_config": {"model_type": text_type}}
    res = model_probe.describe(src, "PaliGemmaForConditionalGeneration", cfg)
    assert res["status"] == "resolved", res.get("reason")
    assert [h["class"] for h in res["hops"]][:2] == ["PaliGemmaForConditionalGeneration", inner]
    assert res["layers_path"] == "language_model.model.layers"


def test_local_architecture_list_chosen_by_model_type() -> None:
    """GLM-4V: `architectures = [...]` under if/elif on config.model_type, passed by name."""
    src = vs.source("0.33.0")
    res = model_probe.describe(src, "Glm4vMoeForConditionalGeneration", {"model_type": "glm4v_moe"})
    assert res["status"] == "resolved", res.get("reason")
    assert res["hops"][1]["class"] == "Glm4MoeForCausalLM"


def test_config_key_vllm_renames_settles_the_wrapper() -> None:
    """InternVL checkpoints name their text model `llm_config`; vLLM renames it to text_config
    on load (_CONFIG_ATTRS_MAPPING), and so does the probe, saying so."""
    src = vs.source("0.33.0")
    cfg = {"architectures": ["InternVLChatModel"],
           "llm_config": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_hidden_layers": 24}}
    res = model_probe.describe(src, "InternVLChatModel", cfg)
    assert res["status"] == "resolved", res.get("reason")
    assert [h["class"] for h in res["hops"]] == ["InternVLChatModel", "Qwen2ForCausalLM", "Qwen2Model"]
    (renamed,) = res["config_renamed"]
    assert renamed["from"] == "llm_config" and renamed["to"] == "text_config"
    assert renamed["by"].startswith("vllm/transformers_utils/config.py:")
    assert res["num_layers"] == 24


def test_with_a_config_it_names_the_missing_key_and_never_asks_for_model() -> None:
    src = vs.source("0.33.0")
    res = model_probe.describe(src, "InternVLChatModel", {"architectures": ["InternVLChatModel"]})
    assert res["status"] == "needs_config"
    assert res["config_key"] == "text_config.architectures"
    assert "config.json has no text_config.architectures" in res["reason"]
    assert "--model" not in res["reason"]
    olmo = model_probe.describe(model_probe.Source(str(vs.vllm_root("0.33.0")), transformers_root()),
                                "Olmo2ForCausalLM", {"architectures": ["Olmo2ForCausalLM"]})
    assert olmo["status"] == "needs_config" and olmo["config_key"] == "model_type"
    assert "--model" not in olmo["reason"]


def test_transformers_backend_from_config_is_followed_into_transformers() -> None:
    """vLLM 0.33 serves Olmo2 through its Transformers backend: self.model =
    AutoModel.from_config(config) -> transformers' Olmo2Model, whose decoder is `layers`."""
    src = model_probe.Source(str(vs.vllm_root("0.33.0")), transformers_root())
    bare = model_probe.describe(src, "Olmo2ForCausalLM")
    assert bare["status"] == "needs_config" and bare["config_key"] == "model_type"
    res = model_probe.describe(src, "Olmo2ForCausalLM", {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2"})
    assert res["status"] == "resolved", res.get("reason")
    assert res["layers_path"] == "model.layers"
    assert [h["class"] for h in res["hops"]] == ["TransformersForCausalLM", "Olmo2Model"]
    assert res["hops"][-1]["file"].startswith("transformers/models/olmo2/modeling_olmo2.py:")
    assert res["supports_eagle3"] is True  # the vLLM wrapper class implements it


def test_mtp_layers_in_a_module_dict_are_the_layers() -> None:
    res = model_probe.describe(vs.source("0.33.0"), "DeepSeekMTPModel")
    assert res["status"] == "resolved", res.get("reason")
    assert res["layers_path"] == "model.layers"
    assert res["hops"][-1]["layers_built_by"] == "nn.ModuleDict"


def test_sub_model_under_another_name_is_followed_when_it_is_the_only_one() -> None:
    res = model_probe.describe(vs.source("0.33.0"), "BertForSequenceClassification")
    assert res["status"] == "resolved", res.get("reason")
    assert res["layers_path"] == "bert.encoder.layer"


def test_config_only_answer_without_vllm(tmp_path: Path) -> None:
    """This venv has no vLLM: with --model the probe answers from config.json and says so."""
    (tmp_path / "config.json").write_text(json.dumps(vs.KIMI_K25_CONFIG))
    proc = subprocess.run([sys.executable, str(PROBE), "--model", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (line,) = [json.loads(x) for x in proc.stdout.splitlines()]
    res = line["result"]
    assert res["status"] == "config_only" and res["config_only"] is True
    assert res["architecture"] == "KimiK25ForConditionalGeneration"
    assert res["num_layers"] == 61 and res["num_layers_from"] == "text_config.num_hidden_layers"
    text = next(e for e in res["config_nesting"] if e["key"] == "text_config")
    assert text["architectures"] == ["DeepseekV3ForCausalLM"] and text["model_type"] == "deepseek_v3"
    assert "config-only answer" in res["reason"] and "vLLM is not installed" in res["reason"]
    assert "layers_path" not in res and "supports_eagle3" not in res


def _console(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "console.toml"
    if not cfg.exists():
        local_console_toml(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(PROBE.parents[2])}
    return subprocess.run([sys.executable, "-m", "console", "probe", *args, "--config", str(cfg), "--no-record"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def test_console_probe_model_exit_codes(tmp_path: Path) -> None:
    """0 resolved; 1 unresolved or needs config, with the reason; 2 usage."""
    root = str(vs.vllm_root("0.33.0"))
    ok = _console(tmp_path, "model", "--arch", "LlamaForCausalLM", "--vllm-root", root)
    assert ok.returncode == 0, ok.stderr
    needs = _console(tmp_path, "model", "--arch", "PaliGemmaForConditionalGeneration", "--vllm-root", root)
    assert needs.returncode == 1
    out = needs.stdout + needs.stderr
    assert "needs_config" in out and "text_config.model_type" in out
    unresolved = _console(tmp_path, "model", "--arch", "NoSuchModelForCausalLM", "--vllm-root", root)
    assert unresolved.returncode == 1
    assert "not in this vLLM's model registry" in unresolved.stdout + unresolved.stderr
    assert _console(tmp_path, "model").returncode == 2


def test_console_probe_model_config_only_without_vllm(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(vs.KIMI_K25_CONFIG))
    res = _console(tmp_path, "model", "--model", str(tmp_path / "config.json"))
    assert res.returncode == 1  # an answer, but not a resolved one: a script can tell
    assert "KimiK25ForConditionalGeneration: config_only: config-only answer" in res.stdout + res.stderr
    assert "Traceback" not in res.stderr + res.stdout


def test_console_probe_compat_works_from_config_alone_without_vllm(tmp_path: Path) -> None:
    """compat used to refuse outright here; now the rules that need only config.json run."""
    (tmp_path / "config.json").write_text(json.dumps(vs.KIMI_K25_CONFIG))
    res = _console(tmp_path, "compat", "--model", str(tmp_path / "config.json"))
    out = res.stdout + res.stderr
    assert "KimiK25ForConditionalGeneration: config_only: config-only answer" in out
    assert "probe model: vLLM is not installed" not in out and "Traceback" not in out
    assert "KimiK25ForConditionalGeneration: " in out.split("config-only answer", 1)[1]  # the compat summary
