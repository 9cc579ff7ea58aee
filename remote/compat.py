"""The compatibility advisor: what will break, for this box's versions and this model, and the fix.

The knowledge lives in RULES, a table of data (the package versions a rule applies to, the fact
about the model or vLLM that triggers it, the evidence with file and line, and the fix the console
offers), evaluated on the env probe's and the model probe's results. Adding what we learn about a
new release is a new row, not a new branch of code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from remote.spine.traceback_fold import readable_message

SEVERITIES = ("error", "warning", "info")

# Which hidden state a layer id names, per producer (design.md §3). Checked in the wheels:
# 0.3.0 custom_worker.py appends the state after `layer(...)` runs (the layer's output); 0.9.0
# models/utils.py uses vLLM's default ids and accepts id N as the final state (input of layer L).
SPECULATORS_LAYER_ID_MEANS = (
    (">=0.3,<0.4", "output_of_layer"),
    (">=0.9,<1.0", "input_of_layer"),
)


# -- versions -------------------------------------------------------------------------------
def parse_version(text: str | None) -> tuple[int, ...] | None:
    """The release part of a version ("0.16.0rc1+cu129" -> (0, 16, 0)); None if absent."""
    if not text:
        return None
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def version_in(version: str | None, spec: str) -> bool:
    """`spec` is a PEP 440 specifier set like ">=0.3,<0.4" (packaging parses it); an empty spec
    matches anything installed. Only the release part of the installed version counts (a
    0.16.0rc2 build is 0.16 for these rules). A missing version never matches (a rule about a
    package needs the package)."""
    v = parse_version(version)
    if v is None:
        return False
    try:
        wanted = SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(f"bad version spec {spec!r}") from None
    if any(s.operator == "~=" or s.operator == "===" for s in wanted):
        raise ValueError(f"bad version spec {spec!r}: use >=, <=, ==, !=, > and <")
    return wanted.contains(Version(".".join(map(str, v))), prereleases=True)


# -- facts the rules read ----------------------------------------------------------------------
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


def _worker_cannot_hook(f: Facts) -> str | None:
    m = f.model
    if m.get("status") != "resolved":
        return None
    problems = []
    if m.get("supports_eagle3") is False:
        problems.append(f"{m.get('architecture')} does not implement SupportsEagle3 in vLLM {m.get('vllm_version')}")
    if m.get("has_model_attr") is False:
        problems.append(f"its decoder layers are at `{m.get('layers_path')}`, not `model.layers`")
    return "; ".join(problems) or None


def _needs_remote_code(f: Facts) -> str | None:
    auto = f.model.get("hf_auto_map")
    if auto:
        return f"config.json has auto_map ({', '.join(auto)}): its tokenizer/config code ships with the checkpoint"
    return None


def _scheduler_requires_flag(f: Facts) -> str | None:
    check = (f.model.get("vllm_checks") or {}).get("scheduler_is_encoder_decoder") or {}
    if check.get("known"):
        if check.get("required"):
            return f"SchedulerConfig.is_encoder_decoder is a required InitVar ({check.get('file')})"
        return None
    # No source evidence from the box: fall back to the version range the rule declares.
    return "vLLM >= 0.16 requires SchedulerConfig(is_encoder_decoder=...)"


def _owner_lacks_get_input_embeddings(f: Facts) -> str | None:
    methods = f.model.get("layers_owner_methods") or {}
    if methods and not methods.get("get_input_embeddings"):
        owner = ((f.model.get("hops") or [{}])[-1]).get("class")
        alt = " (it has embed_input_ids)" if methods.get("embed_input_ids") else ""
        return (f"{owner} has no get_input_embeddings{alt}: the patched forward fails whenever vLLM calls it "
                "with input_ids and no inputs_embeds (text-only models; multimodal wrappers pass inputs_embeds)")
    return None


def _remote_code_not_trusted(f: Facts) -> str | None:
    m = f.model
    if m.get("hf_auto_map") and m.get("pipeline_trust_remote_code") is False:
        return (f"config.json has auto_map ({', '.join(m['hf_auto_map'])}): transformers asks "
                "[y/N] on a terminal and fails with EOFError in a detached stage")
    return None


def _verifier_not_plain(f: Facts) -> str | None:
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


def _config_gate_refuses(f: Facts) -> str | None:
    gate = f.model.get("eagle3_config_gate") or {}
    if gate.get("present") and gate.get("allows") is False:
        return (f"text model_type {gate.get('model_type')!r} is not among {gate.get('model_types')} "
                f"({gate.get('file')})")
    return None


def _no_eagle3_in_vllm(f: Facts) -> str | None:
    m = f.model
    if m.get("status") == "resolved" and m.get("supports_eagle3") is False:
        hops = m.get("hops") or [{}]
        return str(hops[0].get("eagle3_evidence") or "no SupportsEagle3")
    return None


def _layer_id_convention_mismatch(f: Facts) -> str | None:
    spec = f.version("speculators")
    trained = next((means for rng, means in SPECULATORS_LAYER_ID_MEANS if version_in(spec, rng)), None)
    served = ((f.model.get("aux_capture") or {}).get("id_means"))
    if trained and served and trained != served:
        where = (f.model.get("aux_capture") or {}).get("evidence")
        return (f"speculators {spec} records layer id L as the {trained.replace('_', ' ')}; vLLM "
                f"{f.version('vllm')} feeds id L as the {served.replace('_', ' ')} ({where})")
    return None


@dataclass(frozen=True, slots=True)
class Evidence:
    package: str
    version: str
    file: str
    line: int | None = None
    quote: str | None = None  # the text at that line, so a reader can check it


@dataclass(frozen=True, slots=True)
class Fix:
    kind: str  # "patch" | "upgrade" | "config"
    text: str
    recipe: str | None = None  # the patcher's recipe name for kind == "patch"


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    title: str
    severity: str
    versions: Mapping[str, str]  # package -> version spec; every one must match
    check: Check
    evidence: tuple[Evidence, ...]
    fix: Fix
    stage: str  # what it breaks: "hidden-states" | "serving" | "training"
    unless: tuple[str, ...] = ()  # rule ids that, when they fire, make this one redundant
    # Substrings of the architecture / model_type / text model_type it is about; empty: any model.
    families: tuple[str, ...] = ()
    # Breaks only speculators 0.3's own vllm_hidden_states_generator, which the pipeline never
    # runs (its extract captures through transformers or its own worker extension): it stays
    # a finding for a user of that generator, but must not stop `console run`.
    generator_only: bool = False

    def about(self, facts: Facts) -> bool:
        if not self.families:
            return True
        m = facts.model
        names = " ".join(str(m.get(k) or "") for k in ("architecture", "model_type", "text_model_type")).lower()
        return any(f in names for f in self.families)


RULES: tuple[Rule, ...] = (
    Rule(
        id="speculators-0.3-worker-hook",
        title="speculators 0.3 hidden-state worker needs supports_eagle3(model) and model.model",
        severity="error",
        versions={"speculators": ">=0.3,<0.4"},
        check=_worker_cannot_hook,
        evidence=(
            Evidence("speculators", "0.3.0", "speculators/data_generation/custom_worker.py", 102,
                     "if not supports_eagle3(model):"),
            Evidence("speculators", "0.3.0", "speculators/data_generation/custom_worker.py", 107,
                     "base_model = model.model  # type: ignore[attr-defined]"),
        ),
        fix=Fix("patch", "patch the worker to skip the supports_eagle3 gate and hook the resolved layers path",
                recipe="resolve-text-decoder"),
        stage="hidden-states",
    ),
    Rule(
        id="speculators-0.3-tokenizer-remote-code",
        title="speculators 0.3 loads the tokenizer without trust_remote_code",
        severity="error",
        versions={"speculators": ">=0.3,<0.4"},
        check=_needs_remote_code,
        evidence=(
            Evidence("speculators", "0.3.0", "speculators/data_generation/vllm_hidden_states_generator.py", 84,
                     "self.tokenizer = AutoTokenizer.from_pretrained(model_path)"),
        ),
        fix=Fix("patch", "pass trust_remote_code=True to AutoTokenizer.from_pretrained",
                recipe="tokenizer-trust-remote-code"),
        stage="hidden-states",
        generator_only=True,
    ),
    Rule(
        id="speculators-0.3-scheduler-encoder-decoder",
        title="speculators 0.3 builds SchedulerConfig without is_encoder_decoder (required from vLLM 0.16)",
        severity="error",
        versions={"speculators": ">=0.3,<0.4", "vllm": ">=0.16"},
        check=_scheduler_requires_flag,
        evidence=(
            Evidence("speculators", "0.3.0", "speculators/data_generation/vllm_hidden_states_generator.py", 194,
                     "scheduler_config=SchedulerConfig("),
            Evidence("vllm", "0.16.0", "vllm/config/scheduler.py", 35, "is_encoder_decoder: InitVar[bool]"),
        ),
        fix=Fix("patch", "pass is_encoder_decoder=False to SchedulerConfig(...)",
                recipe="scheduler-is-encoder-decoder"),
        stage="hidden-states",
        generator_only=True,
    ),
    Rule(
        id="speculators-0.3-forward-embeddings",
        title="speculators 0.3's patched forward embeds with get_input_embeddings (embed_input_ids in vLLM 0.16+)",
        severity="warning",
        versions={"speculators": ">=0.3,<0.4"},
        check=_owner_lacks_get_input_embeddings,
        evidence=(
            Evidence("speculators", "0.3.0", "speculators/data_generation/custom_worker.py", 30,
                     "else self.get_input_embeddings(input_ids)"),
            Evidence("vllm", "0.16.0", "vllm/model_executor/models/llama.py", 398,
                     "def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:"),
        ),
        fix=Fix("patch", "call embed_input_ids when get_input_embeddings is absent", recipe="embed-input-ids"),
        stage="hidden-states",
    ),
    Rule(
        id="vllm-eagle3-model-type-gate",
        title="this vLLM refuses eagle3 for the target's model_type at config time",
        severity="error",
        versions={"vllm": "<0.17"},
        check=_config_gate_refuses,
        evidence=(
            Evidence("vllm", "0.16.0", "vllm/config/speculative.py", 689, "eagle3_target_supported = ["),
        ),
        fix=Fix("upgrade", "serve the trained head with vLLM >= 0.18 (the gate is gone in 0.17; DeepSeek/Kimi "
                "implement SupportsEagle3 from 0.18)"),
        stage="serving",
    ),
    Rule(
        id="vllm-no-eagle3-for-deepseek-kimi",
        title="vLLM < 0.18 has no SupportsEagle3 on DeepSeek-V2/V3 or Kimi-K2.5",
        severity="error",
        versions={"vllm": "<0.18"},
        check=_no_eagle3_in_vllm,
        evidence=(
            Evidence("vllm", "0.16.0", "vllm/model_executor/models/deepseek_v2.py", 1173,
                     "class DeepseekV2ForCausalLM("),
        ),
        fix=Fix("upgrade", "serve the trained head with vLLM >= 0.18"),
        stage="serving",
        families=("deepseek", "kimi"),
    ),
    Rule(
        id="vllm-model-no-eagle3",
        title="this vLLM has no SupportsEagle3 for the target model",
        severity="error",
        versions={"vllm": ""},
        check=_no_eagle3_in_vllm,
        evidence=(),
        fix=Fix("upgrade", "serve with a vLLM release whose model class implements SupportsEagle3 "
                "(run `console probe model` against it to check)"),
        stage="serving",
        unless=("vllm-no-eagle3-for-deepseek-kimi",),
    ),
    Rule(
        id="layer-id-convention",
        title="hidden-state layer ids mean different things to speculators and to vLLM",
        severity="warning",
        versions={"speculators": "", "vllm": ""},
        check=_layer_id_convention_mismatch,
        evidence=(
            Evidence("speculators", "0.3.0", "speculators/data_generation/custom_worker.py", 52,
                     "aux_hidden_states.append((hidden_states + residual).clone())"),
            Evidence("vllm", "0.16.0", "vllm/model_executor/models/llama.py", 424,
                     "if idx in self.aux_hidden_state_layers:"),
            Evidence("speculators", "0.9.0", "speculators/models/utils.py", 111,
                     "target_layer_ids = [2, num_layers // 2, num_layers - 3]"),
        ),
        fix=Fix("config", "shift the head's aux layer ids by one to vLLM's convention before serving"),
        stage="serving",
    ),
    Rule(
        id="target-remote-code-not-trusted",
        title="the checkpoint ships its own code but target.trust_remote_code is false",
        severity="error",
        versions={},
        check=_remote_code_not_trusted,
        evidence=(),
        fix=Fix("config", "set `trust_remote_code = true` under [target] in the pipeline config"),
        stage="training",
    ),
    Rule(
        id="speculators-0.3-train-wrapped-verifier",
        title="speculators 0.3's draft model reads the verifier as a plain text model",
        severity="info",
        versions={"speculators": ">=0.3,<0.4"},
        check=_verifier_not_plain,
        evidence=(
            Evidence("speculators", "0.3.0", "speculators/models/eagle3/core.py", 226,
                     "verifier_model_config = AutoConfig.from_pretrained(config.name_or_path)"),
            Evidence("speculators", "0.3.0", "speculators/models/eagle3/core.py", 255,
                     '"weight": verifier_weights["model.embed_tokens.weight"].to(default_dtype)'),
        ),
        fix=Fix("config", "nothing to do: the pipeline trains against a text-only view of the "
                "target (pipeline/verifier_view.py); speculators is not edited"),
        stage="training",
    ),
)


@dataclass(slots=True)
class Finding:
    rule: str
    title: str
    severity: str
    stage: str
    detail: str
    evidence: list[dict[str, Any]]
    fix: dict[str, Any]
    versions: dict[str, str | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _model_evidence(rule: Rule, facts: Facts) -> list[dict[str, Any]]:
    """What the box itself showed, next to the table's reference evidence."""
    m = facts.model
    out: list[dict[str, Any]] = []
    v = facts.version("vllm") or ""
    if rule.id == "vllm-eagle3-model-type-gate":
        gate = m.get("eagle3_config_gate") or {}
        out.append({"package": "vllm", "version": v, "where": gate.get("file"), "on_box": True})
    elif rule.id in ("vllm-no-eagle3-for-deepseek-kimi", "vllm-model-no-eagle3", "speculators-0.3-worker-hook") \
            and m.get("hops"):
        top = m["hops"][0]
        out.append({"package": "vllm", "version": v, "where": top.get("file"), "on_box": True,
                    "note": top.get("eagle3_evidence")})
    elif rule.id == "speculators-0.3-scheduler-encoder-decoder":
        check = (m.get("vllm_checks") or {}).get("scheduler_is_encoder_decoder") or {}
        if check.get("file"):
            out.append({"package": "vllm", "version": v, "where": check["file"], "on_box": True})
    elif rule.id == "speculators-0.3-forward-embeddings" and m.get("hops"):
        last = m["hops"][-1]
        out.append({"package": "vllm", "version": v, "where": last.get("file"), "on_box": True,
                    "note": f"{last.get('class')} methods: {m.get('layers_owner_methods')}"})
    elif rule.id == "layer-id-convention":
        cap = m.get("aux_capture") or {}
        if cap.get("evidence"):
            out.append({"package": "vllm", "version": v, "where": cap["evidence"], "on_box": True})
    return out


def advise(env: Mapping[str, Any] | None, model: Mapping[str, Any] | None,
           rules: tuple[Rule, ...] = RULES) -> list[Finding]:
    facts = Facts.from_probes(env, model)
    fired: dict[str, Finding] = {}
    for rule in rules:
        if any(u in fired for u in rule.unless):
            continue
        if not rule.about(facts):
            continue
        if not all(version_in(facts.version(pkg), spec) for pkg, spec in rule.versions.items()):
            continue
        reason = rule.check(facts)
        if reason is None:
            continue
        evidence = [asdict(e) for e in rule.evidence] + _model_evidence(rule, facts)
        fired[rule.id] = Finding(
            rule=rule.id, title=rule.title, severity=rule.severity, stage=rule.stage, detail=reason,
            evidence=evidence, fix=asdict(rule.fix),
            versions={pkg: facts.version(pkg) for pkg in rule.versions},
        )
    return list(fired.values())


GENERATOR_ONLY = frozenset(r.id for r in RULES if r.generator_only)


def pipeline_blockers(findings: list[Finding]) -> list[Finding]:
    """The error findings that stop the pipeline before its first stage: not those that only
    speculators' own generator would hit (Rule.generator_only)."""
    return [f for f in findings if f.severity == "error" and f.rule not in GENERATOR_ONLY]


def summarize(findings: list[Finding]) -> str:
    if not findings:
        return "no known incompatibilities"
    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}
    parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    return ", ".join(parts) + ": " + "; ".join(f.rule for f in findings)


# -- failed stages: the fix for an error message the advisor recognizes ---------------------------
@dataclass(frozen=True, slots=True)
class ErrorFix:
    """A stage error (regex on its message) the advisor knows, and what fixes it."""

    pattern: str
    rule: str  # the RULES id that predicts it, or a stage-level name
    fix: str


ERROR_FIXES: tuple[ErrorFix, ...] = (
    ErrorFix(r"does not support hidden state extraction",
             "speculators-0.3-worker-hook",
             "`console patch apply --recipe resolve-text-decoder` (the worker's SupportsEagle3 "
             "gate and model.model), then re-run extract"),
    ErrorFix(r"object has no attribute 'get_input_embeddings'",
             "speculators-0.3-forward-embeddings", "`console patch apply --recipe embed-input-ids`"),
    ErrorFix(r"contains custom code|trust_remote_code=True",
             "target-remote-code", "set `trust_remote_code = true` under [target] in the "
             "pipeline config"),
    ErrorFix(r"Unrecognized configuration class .* for this kind of AutoModel",
             "target-auto-class", "the pipeline loads wrappers through AutoModelForImageTextToText: "
             "update the pipeline sources on the box, or set `trust_remote_code = true` if the "
             "checkpoint ships its own model code"),
    ErrorFix(r"max_model_len \(\d+\) is greater than the derived max_model_len",
             "max-model-len",
             "set `max_seq_len` under [data] below the model's max_position_embeddings "
             "(extract starts vLLM with max_model_len = max_seq_len + 1); a server: lower "
             "`--max-model-len`"),
    ErrorFix(r"(CUDA out of memory|OutOfMemoryError)", "gpu-memory",
             "free the GPUs (`console stats` shows who holds them) or raise "
             "extract.tensor_parallel_size"),
)


def fix_for_error(message: str) -> ErrorFix | None:
    for known in ERROR_FIXES:
        if re.search(known.pattern, message):
            return known
    return None


def shorten(message: str, limit: int = 400) -> str:
    """One readable line: the same shortening as a folded traceback's message (whole sentences
    kept, library boilerplate dropped; remote/spine/traceback_fold.py says why)."""
    return readable_message(message, limit)
