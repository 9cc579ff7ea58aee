"""Recipes against the real speculators 0.3.0 files: anchors, composition, conditions, refusals."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from typing import Any

import pytest

from remote.patcher.plan import (
    compose,
    in_effect_set,
    plan_file,
    recipes_for,
    rollback_target,
    sha256_text,
)
from remote.patcher.recipes import CUSTOM_WORKER, GENERATOR, RECIPES
from remote.probes import patch_helper
from tests.patchbox import sha256, wheel_file
from tests.wheels import unpacked


def _original(rel: str) -> str:
    return wheel_file(f"speculators/{rel}").read_text(encoding="utf-8")


def _box(state: str = "required", version: str = "0.3.0") -> dict[str, Any]:
    return {"version": version, "vllm": {"found": True, "version": "0.16.0",
                                         "scheduler_is_encoder_decoder": {"state": state}}}


def _entry(current: str, backup: str | None = None) -> dict[str, Any]:
    return {"path": "/sp/x.py", "current": current.encode(),
            "backup": backup.encode() if backup is not None else None}


def test_known_originals_are_the_wheel_files() -> None:
    for recipe in RECIPES:
        path = wheel_file(f"speculators/{recipe.file}")
        assert recipe.known_originals == {"0.3.0": sha256(path)}, recipe.name


def test_every_subset_composes_compiles_and_is_recognised() -> None:
    for rel, recipes in recipes_for("speculators").items():
        original = _original(rel)
        for k in range(len(recipes) + 1):
            for subset in itertools.combinations(recipes, k):
                text = compose(original, subset)
                compile(text, rel, "exec")
                assert in_effect_set(original, text, recipes) == {r.name for r in subset}
                # Order of the request does not matter.
                assert compose(original, reversed(subset)) == text


def test_scheduler_condition_read_from_real_vllm_016_source() -> None:
    vllm_dir = unpacked("vllm", "0.16.0", ["vllm/config/scheduler.py",
                                           "vllm-0.16.0.dist-info/METADATA"]) / "vllm"
    info = patch_helper.scheduler_is_encoder_decoder(str(vllm_dir))
    assert info["state"] == "required"
    assert info["source"].endswith("config/scheduler.py")


@pytest.mark.parametrize(
    ("body", "state"),
    [
        ("    is_encoder_decoder: bool = False\n", "optional"),
        ("    max_model_len: int = 8192\n", "absent"),
        ("    is_encoder_decoder: InitVar[bool]\n", "required"),
    ],
)
def test_scheduler_condition_states(tmp_path: Path, body: str, state: str) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "scheduler.py").write_text(
        "from dataclasses import InitVar\n\nclass SchedulerConfig:\n" + body)
    assert patch_helper.scheduler_is_encoder_decoder(str(tmp_path))["state"] == state


@pytest.mark.parametrize(("state", "applies"), [("required", True), ("optional", False),
                                                ("absent", False), ("unknown", False)])
def test_encoder_decoder_recipe_follows_installed_vllm(state: str, applies: bool) -> None:
    original = _original(GENERATOR)
    recipes = recipes_for("speculators")[GENERATOR]
    plan = plan_file(GENERATOR, _entry(original), _box(state), recipes, None)
    decision = {d.name: d for d in plan.decisions}["scheduler-is-encoder-decoder"]
    assert decision.applies is applies
    assert ("is_encoder_decoder=False" in plan.target) is applies
    assert {d.name: d for d in plan.decisions}["tokenizer-trust-remote-code"].applies


def test_plan_of_known_original_applies_everything_and_diff_shows_it() -> None:
    original = _original(CUSTOM_WORKER)
    plan = plan_file(CUSTOM_WORKER, _entry(original), _box(), recipes_for("speculators")[
        CUSTOM_WORKER], None)
    assert plan.refused is None and plan.original_known
    assert [d.applies for d in plan.decisions] == [True, True]
    assert "-        if not supports_eagle3(model):" in plan.diff
    assert "+        base_model = _resolve_text_decoder(model)" in plan.diff


def test_unknown_original_is_refused_with_diff_and_force_needs_matching_anchors() -> None:
    recipes = recipes_for("speculators")[CUSTOM_WORKER]
    edited = _original(CUSTOM_WORKER).replace('"""Custom worker', '"""Locally edited worker')
    plan = plan_file(CUSTOM_WORKER, _entry(edited), _box(), recipes, None)
    assert plan.refused and "not a known original" in plan.refused
    assert plan.forceable and "+        base_model = _resolve_text_decoder(model)" in plan.diff
    forced = plan_file(CUSTOM_WORKER, _entry(edited), _box(), recipes, None, force=True)
    assert forced.refused is None and forced.target != edited

    broken = edited.replace("base_model = model.model", "base_model = model.inner")
    plan = plan_file(CUSTOM_WORKER, _entry(broken), _box(), recipes, None, force=True)
    assert plan.refused and "refused even with --force" in plan.refused
    assert not plan.forceable


def test_hand_edited_patched_file_is_refused_and_rollback_targets_backup() -> None:
    recipes = recipes_for("speculators")[CUSTOM_WORKER]
    original = _original(CUSTOM_WORKER)
    patched = compose(original, recipes) + "# hand edit\n"
    plan = plan_file(CUSTOM_WORKER, _entry(patched, backup=original), _box(), recipes, None)
    assert plan.in_effect is None and plan.refused and "changed by something else" in plan.refused
    content, remaining = rollback_target(plan, None)
    assert sha256_text(content) == sha256(wheel_file(f"speculators/{CUSTOM_WORKER}"))
    assert remaining == frozenset()


def test_selected_recipe_only_and_partial_rollback() -> None:
    recipes = recipes_for("speculators")[CUSTOM_WORKER]
    original = _original(CUSTOM_WORKER)
    plan = plan_file(CUSTOM_WORKER, _entry(original), _box(), recipes, {"resolve-text-decoder"})
    assert [(d.name, d.applies) for d in plan.decisions] == [
        ("resolve-text-decoder", True), ("embed-input-ids", False)]
    both = compose(original, recipes)
    plan = plan_file(CUSTOM_WORKER, _entry(both, backup=original), _box(), recipes, None)
    content, remaining = rollback_target(plan, {"embed-input-ids"})
    assert remaining == {"resolve-text-decoder"}
    assert content == compose(original, [recipes[0]])


def _required_fields(scheduler_source: str) -> set[str]:
    """Fields / InitVars of vLLM's SchedulerConfig with no default (the constructor needs them)."""
    tree = ast.parse(scheduler_source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SchedulerConfig")
    return {item.target.id for item in cls.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            and item.value is None and "ClassVar" not in ast.unparse(item.annotation)}


def _scheduler_call_keywords(generator_source: str) -> set[str]:
    calls = [n for n in ast.walk(ast.parse(generator_source)) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "SchedulerConfig"]
    assert len(calls) == 1
    return {k.arg for k in calls[0].keywords if k.arg}


def test_patched_generator_passes_every_argument_vllm_016_requires() -> None:
    scheduler = unpacked("vllm", "0.16.0", ["vllm/config/scheduler.py",
                                            "vllm-0.16.0.dist-info/METADATA"])
    required = _required_fields((scheduler / "vllm/config/scheduler.py").read_text())
    assert required == {"max_model_len", "is_encoder_decoder"}
    original = _original(GENERATOR)
    assert required - _scheduler_call_keywords(original) == {"is_encoder_decoder"}
    patched = compose(original, recipes_for("speculators")[GENERATOR])
    assert required <= _scheduler_call_keywords(patched)
    tokenizer_calls = [n for n in ast.walk(ast.parse(patched)) if isinstance(n, ast.Call)
                       and ast.unparse(n.func) == "AutoTokenizer.from_pretrained"]
    assert [ast.unparse(k) for c in tokenizer_calls for k in c.keywords] == [
        "trust_remote_code=True"]
