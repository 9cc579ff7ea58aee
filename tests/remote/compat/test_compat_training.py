"""The advisor's config-only rules (training stage; no vLLM needed) and its fixes for failed
stages' errors, on the config shapes of the founding case."""

from __future__ import annotations

from remote.compat import advise, config_facts, fix_for_error, pipeline_blockers, shorten

KIMI = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config"},
        "text_config": {"model_type": "deepseek_v3", "hidden_size": 7168, "vocab_size": 163840}}
KIMI_NAMES = ["language_model.model.embed_tokens.weight",
              "vision_tower.encoder.embed_tokens.weight"]
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "vocab_size": 100}
SPEC03 = {"packages": {"speculators": "0.3.0"}}


def _rules(env: dict, facts: dict) -> dict[str, str]:
    return {f.rule: f.severity for f in advise(env, facts)}


def test_remote_code_untrusted_is_an_error_before_any_stage() -> None:
    facts = config_facts(KIMI, KIMI_NAMES, trust_remote_code=False)
    found = {f.rule: f for f in advise(SPEC03, facts)}
    err = found["target-remote-code-not-trusted"]
    assert err.severity == "error" and "trust_remote_code = true" in err.fix["text"]
    trusted = _rules(SPEC03, config_facts(KIMI, KIMI_NAMES, trust_remote_code=True))
    assert "target-remote-code-not-trusted" not in trusted


def test_wrapped_verifier_is_named_for_speculators_03_only() -> None:
    facts = config_facts(KIMI, KIMI_NAMES, trust_remote_code=True)
    assert facts["text_weights_prefix"] == "language_model.model."
    found = {f.rule: f for f in advise(SPEC03, facts)}
    info = found["speculators-0.3-train-wrapped-verifier"]
    assert info.severity == "info"
    assert "text_config" in info.detail and "language_model.model." in info.detail
    assert "speculators-0.3-train-wrapped-verifier" not in _rules(
        {"packages": {"speculators": "0.9.0"}}, facts)
    plain = config_facts(LLAMA, ["model.embed_tokens.weight"], trust_remote_code=False)
    assert _rules(SPEC03, plain) == {}


def test_known_stage_errors_get_their_fix_and_a_readable_length() -> None:
    long = ("ValueError: Unrecognized configuration class <class 'transformers.models.llava_next."
            "configuration_llava_next.LlavaNextConfig'> for this kind of AutoModel: "
            "AutoModelForCausalLM.\nModel type should be one of " + ", ".join(
                f"Config{i}" for i in range(300)))
    assert len(long) > 2000
    short = shorten(long)
    assert len(short) <= 400 and "\n" not in short
    assert short.startswith("ValueError: Unrecognized") and short.endswith("Config299")
    assert fix_for_error(long) is not None
    hook = fix_for_error("ValueError: Model LlavaNextForConditionalGeneration does not support "
                         "hidden state extraction")
    assert hook is not None and "resolve-text-decoder" in hook.fix
    assert fix_for_error("something nobody has seen") is None


def test_a_failed_stage_error_record_becomes_one_short_line_with_the_fix() -> None:
    from remote.jobs.stage_records import stage_event
    from remote.spine import events as ev

    message = ("extract failed: Exception: Call to collective_rpc method failed: Model "
               "LlavaNextForConditionalGeneration does not support hidden state extraction "
               + "x" * 3000)
    kind, payload = stage_event({"type": "error", "stage": "extract", "message": message},
                                "run-1", "extract")  # type: ignore[misc]
    assert kind == ev.CONSOLE_ERROR
    text = str(payload["message"])
    assert text.startswith("extract: extract failed: Exception: Call to collective_rpc")
    assert "resolve-text-decoder" in text and len(text) < 600


def test_a_generator_only_rule_is_shown_but_does_not_stop_the_pipeline() -> None:
    """Kimi's auto_map fires the 0.3 tokenizer rule: it is about speculators' own generator,
    which the pipeline never runs, so `console run` goes on (it was refused before any stage);
    an untrusted remote-code target still stops it."""
    trusted = advise(SPEC03, config_facts(KIMI, KIMI_NAMES, trust_remote_code=True))
    assert "speculators-0.3-tokenizer-remote-code" in {f.rule for f in trusted}
    assert pipeline_blockers(trusted) == []
    untrusted = advise(SPEC03, config_facts(KIMI, KIMI_NAMES, trust_remote_code=False))
    assert [f.rule for f in pipeline_blockers(untrusted)] == ["target-remote-code-not-trusted"]
