"""The compatibility advisor on real model-probe results (real vLLM 0.16.0 / 0.33.0 sources).

The env side is the env probe's result shape with the versions of the box in question (the
reference box: speculators 0.3.0 with vLLM 0.16.0); the model side is the model probe run on the
real source of that vLLM release. The evidence the table cites is checked against the real
speculators 0.3.0 and vLLM 0.16.0 files.
"""

from __future__ import annotations

from typing import Any

import pytest

from remote import compat
from remote.probes import model_probe
from tests import vllm_sources as vs

SPEC03_PROBLEMS = {
    "speculators-0.3-worker-hook",
    "speculators-0.3-tokenizer-remote-code",
    "speculators-0.3-scheduler-encoder-decoder",
}


def env(vllm: str, speculators: str | None) -> dict[str, Any]:
    return {"packages": {"vllm": vllm, "speculators": speculators, "transformers": "4.57.6", "torch": "2.9.1"}}


def model(version: str, arch: str, hf: dict[str, Any]) -> dict[str, Any]:
    return model_probe.describe(vs.source(version), arch, hf)


def rules_fired(findings: list[compat.Finding]) -> set[str]:
    return {f.rule for f in findings}


def test_kimi_k25_on_the_reference_box_flags_the_three_speculators_problems_and_serving() -> None:
    m = model("0.16.0", "KimiK25ForConditionalGeneration", vs.KIMI_K25_CONFIG)
    findings = compat.advise(env("0.16.0", "0.3.0"), m)
    fired = rules_fired(findings)
    assert fired >= SPEC03_PROBLEMS
    # serving the head: refused at config time, and no SupportsEagle3 on Kimi/DeepSeek before 0.18
    assert {"vllm-eagle3-model-type-gate", "vllm-no-eagle3-for-deepseek-kimi"} <= fired
    assert "vllm-model-no-eagle3" not in fired  # the specific rule made the generic one redundant
    # speculators 0.3 records the output of layer L; vLLM feeds the input of layer L
    assert "layer-id-convention" in fired
    by = {f.rule: f for f in findings}
    worker = by["speculators-0.3-worker-hook"]
    assert "does not implement SupportsEagle3" in worker.detail
    assert "language_model.model.layers" in worker.detail
    assert worker.fix["kind"] == "patch" and worker.fix["recipe"] == "resolve-text-decoder"
    assert by["speculators-0.3-tokenizer-remote-code"].fix["recipe"] == "tokenizer-trust-remote-code"
    sched = by["speculators-0.3-scheduler-encoder-decoder"]
    assert any(e.get("on_box") and e["where"] == "vllm/config/scheduler.py:35" for e in sched.evidence)
    gate = by["vllm-eagle3-model-type-gate"]
    assert "deepseek_v3" in gate.detail and gate.fix["kind"] == "upgrade"
    assert all(f.severity in compat.SEVERITIES for f in findings)
    # the patched forward's embedding call: Kimi's DeepseekV2Model only has embed_input_ids
    emb = by["speculators-0.3-forward-embeddings"]
    assert emb.severity == "warning" and "DeepseekV2Model has no get_input_embeddings" in emb.detail
    assert compat.summarize(findings).startswith("5 errors, 2 warnings")


def test_llama_on_the_same_box_has_only_the_version_problem() -> None:
    """Llama implements SupportsEagle3 with model.model and needs no remote code: of the three
    speculators 0.3 problems only the SchedulerConfig one (a vLLM 0.16 API change) applies, plus
    the renamed embedding method the patched forward calls."""
    m = model("0.16.0", "LlamaForCausalLM", vs.LLAMA_CONFIG)
    fired = rules_fired(compat.advise(env("0.16.0", "0.3.0"), m))
    assert fired & SPEC03_PROBLEMS == {"speculators-0.3-scheduler-encoder-decoder"}
    assert "speculators-0.3-forward-embeddings" in fired
    assert "vllm-eagle3-model-type-gate" not in fired
    assert "vllm-no-eagle3-for-deepseek-kimi" not in fired and "vllm-model-no-eagle3" not in fired


def test_kimi_with_speculators_09_has_none_of_the_speculators_03_problems() -> None:
    m = model("0.33.0", "KimiK25ForConditionalGeneration", vs.KIMI_K25_CONFIG)
    fired = rules_fired(compat.advise(env("0.33.0", "0.9.0"), m))
    assert fired == set()  # 0.33 serves eagle3 for Kimi; 0.9 and vLLM agree on layer ids


def test_kimi_on_033_with_speculators_03_still_needs_the_worker_patch() -> None:
    """0.33 implements SupportsEagle3 for Kimi, but the layers are still not at model.layers."""
    m = model("0.33.0", "KimiK25ForConditionalGeneration", vs.KIMI_K25_CONFIG)
    findings = compat.advise(env("0.33.0", "0.3.0"), m)
    fired = rules_fired(findings)
    assert fired >= SPEC03_PROBLEMS
    worker = next(f for f in findings if f.rule == "speculators-0.3-worker-hook")
    assert "SupportsEagle3" not in worker.detail and "language_model.model.layers" in worker.detail
    assert not fired & {"vllm-eagle3-model-type-gate", "vllm-no-eagle3-for-deepseek-kimi", "vllm-model-no-eagle3"}


def test_scheduler_rule_follows_the_source_on_the_box_not_only_the_version() -> None:
    m = model("0.16.0", "LlamaForCausalLM", vs.LLAMA_CONFIG)
    m["vllm_checks"] = {"scheduler_is_encoder_decoder": {"known": True, "field": True, "required": False,
                                                         "file": "vllm/config/scheduler.py:35"}}
    assert "speculators-0.3-scheduler-encoder-decoder" not in rules_fired(compat.advise(env("0.16.0", "0.3.0"), m))
    # An older vLLM is outside the rule's version range whatever the source says.
    m2 = model("0.16.0", "LlamaForCausalLM", vs.LLAMA_CONFIG)
    assert "speculators-0.3-scheduler-encoder-decoder" not in rules_fired(compat.advise(env("0.15.1", "0.3.0"), m2))


def test_nothing_fires_without_the_packages() -> None:
    assert compat.advise({"packages": {}}, {}) == []
    assert compat.summarize([]) == "no known incompatibilities"


@pytest.mark.parametrize(("version", "spec", "ok"), [
    ("0.16.0", ">=0.16", True), ("0.16.0", "<0.17", True), ("0.17.0", "<0.17", False),
    ("0.3.0", ">=0.3,<0.4", True), ("0.9.0", ">=0.3,<0.4", False), ("0.16.0rc2.dev5+gabc", "==0.16", True),
    ("0.18.1+cu129", ">=0.18", True), (None, "", False), ("2.9.1", "", True),
])
def test_version_in(version: str | None, spec: str, ok: bool) -> None:
    assert compat.version_in(version, spec) is ok


def test_bad_version_spec_is_an_error() -> None:
    with pytest.raises(ValueError):
        compat.version_in("0.16.0", "~0.16")


def test_rule_table_evidence_matches_the_real_files() -> None:
    """Every file:line the table cites holds the quoted text in that real release."""
    roots = {
        ("speculators", "0.3.0"): vs.speculators_root("0.3.0").parent,
        ("speculators", "0.9.0"): vs.speculators_root("0.9.0").parent,
        ("vllm", "0.16.0"): vs.vllm_root("0.16.0").parent,
    }
    checked = 0
    for rule in compat.RULES:
        assert rule.severity in compat.SEVERITIES
        for e in rule.evidence:
            root = roots[(e.package, e.version)]
            lines = (root / e.file).read_text().splitlines()
            assert e.line is not None and e.quote is not None
            assert lines[e.line - 1].strip() == e.quote, (rule.id, e.file, e.line)
            checked += 1
    assert checked >= 10


def test_rule_ids_are_unique_and_unless_refers_to_real_rules() -> None:
    ids = [r.id for r in compat.RULES]
    assert len(ids) == len(set(ids))
    for r in compat.RULES:
        assert set(r.unless) <= set(ids)
        assert ids.index(r.id) > max((ids.index(u) for u in r.unless), default=-1)


def test_every_fix_recipe_is_a_patcher_recipe() -> None:
    """The advisor's fixes name recipes the patcher really has, so `console patch apply
    --recipe NAME` works for each finding that offers a patch."""
    from remote.compat import RULES
    from remote.patcher.recipes import RECIPES

    known = {r.name for r in RECIPES}
    named = {rule.fix.recipe for rule in RULES if rule.fix is not None and rule.fix.recipe}
    assert named and named <= known, named - known
