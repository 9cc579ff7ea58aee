"""What the compatibility rules read: the probes' results flattened to `Facts`, the checks the
rule table (rules.toml) names, and what the box itself showed for a rule that fired.

A check returns the reason its rule fires, or None. It reads only `Facts`, so the same check
serves several rows of the table (two rules about SupportsEagle3 share one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remote.compat.versions import version_in

# Which hidden state a layer id names, per producer (docs/design.md). Checked in the wheels:
# 0.3.0 custom_worker.py appends the state after `layer(...)` runs (the layer's output); 0.9.0
# models/utils.py uses vLLM's default ids and accepts id N as the final state (input of layer L).
SPECULATORS_LAYER_ID_MEANS = (
    (">=0.3,<0.4", "output_of_layer"),
    (">=0.9,<1.0", "input_of_layer"),
)


@dataclass(frozen=True, slots=True)
class Facts:
    """What the probes found, flattened to what rules ask about."""

    versions: Mapping[str, str | None]
    model: Mapping[str, Any]

    @classmethod
    def from_probes(cls, env: Mapping[str, Any] | None, model: Mapping[str, Any] | None) -> Facts:
        versions: dict[str, str | None] = dict((env or {}).get("packages") or {})
        model = dict(model or {})
        if not versions.get("vllm") and model.get("vllm_version"):
            versions["vllm"] = model["vllm_version"]  # the source the model probe read
        return cls(versions=versions, model=model)

    def version(self, package: str) -> str | None:
        return self.versions.get(package)


Check = Callable[[Facts], str | None]  # a reason the rule fires, or None


def worker_cannot_hook(f: Facts) -> str | None:
    m = f.model
    if m.get("status") != "resolved":
        return None
    problems = []
    if m.get("supports_eagle3") is False:
        problems.append(f"{m.get('architecture')} does not implement SupportsEagle3 in vLLM {m.get('vllm_version')}")
    if m.get("has_model_attr") is False:
        problems.append(f"its decoder layers are at `{m.get('layers_path')}`, not `model.layers`")
    return "; ".join(problems) or None


def needs_remote_code(f: Facts) -> str | None:
    auto = f.model.get("hf_auto_map")
    if auto:
        return f"config.json has auto_map ({', '.join(auto)}): its tokenizer/config code ships with the checkpoint"
    return None


def scheduler_requires_flag(f: Facts) -> str | None:
    check = (f.model.get("vllm_checks") or {}).get("scheduler_is_encoder_decoder") or {}
    if check.get("known"):
        if check.get("required"):
            return f"SchedulerConfig.is_encoder_decoder is a required InitVar ({check.get('file')})"
        return None
    # No source evidence from the box: fall back to the version range the rule declares.
    return "vLLM >= 0.16 requires SchedulerConfig(is_encoder_decoder=...)"


def owner_lacks_get_input_embeddings(f: Facts) -> str | None:
    methods = f.model.get("layers_owner_methods") or {}
    if methods and not methods.get("get_input_embeddings"):
        owner = ((f.model.get("hops") or [{}])[-1]).get("class")
        alt = " (it has embed_input_ids)" if methods.get("embed_input_ids") else ""
        return (f"{owner} has no get_input_embeddings{alt}: the patched forward fails whenever vLLM calls it "
                "with input_ids and no inputs_embeds (text-only models; multimodal wrappers pass inputs_embeds)")
    return None


def remote_code_not_trusted(f: Facts) -> str | None:
    m = f.model
    if m.get("hf_auto_map") and m.get("pipeline_trust_remote_code") is False:
        return (f"config.json has auto_map ({', '.join(m['hf_auto_map'])}): transformers asks "
                "[y/N] on a terminal and fails with EOFError in a detached stage")
    return None


def verifier_not_plain(f: Facts) -> str | None:
    m = f.model
    why = []
    if m.get("hf_auto_map"):
        why.append("its config needs remote code (AutoConfig is called without trust_remote_code)")
    if m.get("hidden_size_in_text_config_only"):
        why.append("hidden_size is only in text_config (read at the top level)")
    prefix = m.get("text_weights_prefix")
    if prefix:
        why.append(f"its embeddings are under `{prefix}` (loaded as model.embed_tokens.weight)")
    return "; ".join(why) or None


def config_gate_refuses(f: Facts) -> str | None:
    gate = f.model.get("eagle3_config_gate") or {}
    if gate.get("present") and gate.get("allows") is False:
        return (f"text model_type {gate.get('model_type')!r} is not among {gate.get('model_types')} "
                f"({gate.get('file')})")
    return None


def no_eagle3_in_vllm(f: Facts) -> str | None:
    m = f.model
    if m.get("status") == "resolved" and m.get("supports_eagle3") is False:
        hops = m.get("hops") or [{}]
        return str(hops[0].get("eagle3_evidence") or "no SupportsEagle3")
    return None


def layer_id_convention_mismatch(f: Facts) -> str | None:
    spec = f.version("speculators")
    trained = next((means for rng, means in SPECULATORS_LAYER_ID_MEANS if version_in(spec, rng)), None)
    served = ((f.model.get("aux_capture") or {}).get("id_means"))
    if trained and served and trained != served:
        where = (f.model.get("aux_capture") or {}).get("evidence")
        return (f"speculators {spec} records layer id L as the {trained.replace('_', ' ')}; vLLM "
                f"{f.version('vllm')} feeds id L as the {served.replace('_', ' ')} ({where})")
    return None


CHECKS: dict[str, Check] = {fn.__name__: fn for fn in (
    worker_cannot_hook, needs_remote_code, scheduler_requires_flag, owner_lacks_get_input_embeddings,
    remote_code_not_trusted, verifier_not_plain, config_gate_refuses, no_eagle3_in_vllm,
    layer_id_convention_mismatch)}


# -- what the box itself showed, next to the table's reference evidence --------------------------
def _box(f: Facts, where: Any, **note: Any) -> dict[str, Any]:
    return {"package": "vllm", "version": f.version("vllm") or "", "where": where, "on_box": True, **note}


def _config_gate(f: Facts) -> dict[str, Any] | None:
    return _box(f, (f.model.get("eagle3_config_gate") or {}).get("file"))


def _top_hop(f: Facts) -> dict[str, Any] | None:
    if not f.model.get("hops"):
        return None
    top = f.model["hops"][0]
    return _box(f, top.get("file"), note=top.get("eagle3_evidence"))


def _scheduler(f: Facts) -> dict[str, Any] | None:
    check = (f.model.get("vllm_checks") or {}).get("scheduler_is_encoder_decoder") or {}
    return _box(f, check["file"]) if check.get("file") else None


def _layers_owner(f: Facts) -> dict[str, Any] | None:
    if not f.model.get("hops"):
        return None
    last = f.model["hops"][-1]
    return _box(f, last.get("file"), note=f"{last.get('class')} methods: {f.model.get('layers_owner_methods')}")


def _aux_capture(f: Facts) -> dict[str, Any] | None:
    cap = f.model.get("aux_capture") or {}
    return _box(f, cap["evidence"]) if cap.get("evidence") else None


ON_BOX: dict[str, Callable[[Facts], dict[str, Any] | None]] = {
    "config_gate": _config_gate, "top_hop": _top_hop, "scheduler": _scheduler,
    "layers_owner": _layers_owner, "aux_capture": _aux_capture}


def config_facts(hf_config: Mapping[str, Any], weight_names: list[str] | None = None, *,
                 trust_remote_code: bool | None = None) -> dict[str, Any]:
    """Model facts from config.json (and the tensor names) alone, for the rules that need no
    vLLM: they run where vLLM is not installed (the training box, the laptop)."""
    text = hf_config.get("text_config") or {}
    embeds = [n for n in weight_names or [] if n.endswith("embed_tokens.weight")
              and not any(v in n for v in ("vision", "visual"))]
    embed = min(embeds, key=len) if embeds else None
    prefix = embed[: -len("embed_tokens.weight")] if embed else None
    return {
        "status": "config",
        "architecture": (hf_config.get("architectures") or [None])[0],
        "model_type": hf_config.get("model_type"),
        "text_model_type": text.get("model_type"),
        "hf_auto_map": sorted(hf_config.get("auto_map") or {}),
        "hidden_size_in_text_config_only": "hidden_size" not in hf_config and "hidden_size" in text,
        "text_weights_prefix": prefix if prefix not in (None, "model.") else None,
        "pipeline_trust_remote_code": trust_remote_code,
    }
