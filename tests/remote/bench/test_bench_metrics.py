"""Spec-decode counters: parsing vLLM's exposition and vLLM's acceptance formulas on known counts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from remote.bench import metrics as m
from remote.bench.client import VllmClient
from remote.errors import CountersReset, MetricsMalformed, ModelMismatch, NoSpeculation
from tests.vllm_double_fixture import vllm_double  # noqa: F401  (fixture)


def exposition(model: str, engines: dict[str, tuple[int, int, int, list[int]]],
               created: float = 1.7e9, old_style: bool = False) -> str:
    """Prometheus text as vLLM writes it, for given (drafts, draft_tokens, accepted, per_pos)
    per engine. old_style: the `# TYPE NAME counter` spelling of prometheus_client < 0.22."""
    lines = ["# HELP vllm:num_requests_running Number of requests running.",
             "# TYPE vllm:num_requests_running gauge",
             f'vllm:num_requests_running{{engine="0",model_name="{model}"}} 3.0']
    fields = {m.DRAFTS: 0, m.DRAFT_TOKENS: 1, m.ACCEPTED: 2}
    for name, idx in fields.items():
        lines.append(f"# TYPE {name}{'' if old_style else '_total'} counter")
        for eng, vals in engines.items():
            lab = f'engine="{eng}",model_name="{model}"'
            lines.append(f"{name}_total{{{lab}}} {float(vals[idx])}")
            lines.append(f"{name}_created{{{lab}}} {created}")
    lines.append(f"# TYPE {m.ACCEPTED_PER_POS}{'' if old_style else '_total'} counter")
    for eng, vals in engines.items():
        for pos, v in enumerate(vals[3]):
            lab = f'engine="{eng}",model_name="{model}",position="{pos}"'
            lines.append(f"{m.ACCEPTED_PER_POS}_total{{{lab}}} {float(v)}")
            lines.append(f"{m.ACCEPTED_PER_POS}_created{{{lab}}} {created}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("old_style", [False, True])
def test_acceptance_matches_vllm_formulas_by_hand(old_style: bool) -> None:
    # Two engines (data parallel): the console must sum them. Counts chosen by hand.
    before = exposition("kimi", {"0": (10, 30, 12, [7, 4, 1]), "1": (5, 15, 6, [4, 2, 0])},
                        old_style=old_style)
    after = exposition("kimi", {"0": (50, 150, 70, [38, 22, 10]), "1": (25, 75, 30, [17, 9, 4])},
                       old_style=old_style)
    b = m.parse_spec_counters(before).for_model("kimi")
    a = m.parse_spec_counters(after).for_model("kimi")
    acc = m.acceptance_between(b, a)
    # Window deltas, by hand: drafts (50-10)+(25-5)=60, draft tokens (150-30)+(75-15)=180,
    # accepted (70-12)+(30-6)=82, per position (31+13, 18+7, 9+4) = (44, 25, 13).
    assert (acc.drafts, acc.draft_tokens, acc.accepted) == (60, 180, 82)
    assert acc.accepted_per_pos == [44, 25, 13]
    assert acc.rate == pytest.approx(82 / 180)
    assert acc.mean_length == pytest.approx(1 + 82 / 60)
    assert acc.per_position == pytest.approx([44 / 60, 25 / 60, 13 / 60])
    assert sum(acc.accepted_per_pos) == acc.accepted  # vLLM's invariant holds on these counts


def test_other_models_are_filtered_out() -> None:
    text = exposition("kimi", {"0": (10, 30, 12, [7, 4, 1])}) + exposition(
        "other", {"0": (999, 999, 999, [9, 9, 9])}).split("\n", 3)[3]
    scrape = m.parse_spec_counters(text)
    assert scrape.models == ["kimi", "other"]
    kimi = scrape.for_model("kimi")
    assert (kimi.drafts, kimi.draft_tokens, kimi.accepted) == (10, 30, 12)
    with pytest.raises(ModelMismatch, match="several models"):
        scrape.for_model(None)


def test_no_counters_means_no_speculation() -> None:
    text = ('# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{engine="0",model_name="kimi"} 0.0\n')
    with pytest.raises(NoSpeculation, match="without --speculative-config") as info:
        m.parse_spec_counters(text, "http://box:8000").for_model("kimi", "http://box:8000")
    assert "\n" not in str(info.value)


def test_model_name_mismatch() -> None:
    scrape = m.parse_spec_counters(exposition("kimi", {"0": (1, 3, 1, [1, 0, 0])}))
    with pytest.raises(ModelMismatch, match="'kimi', not 'llama'"):
        scrape.for_model("llama")
    assert ModelMismatch.exit_code == 2


def test_counters_going_backwards_is_a_restart() -> None:
    b = m.parse_spec_counters(exposition("kimi", {"0": (50, 150, 70, [38, 22, 10])})).for_model(
        "kimi")
    a = m.parse_spec_counters(exposition("kimi", {"0": (4, 12, 5, [3, 2, 0])})).for_model("kimi")
    with pytest.raises(CountersReset, match="restarted"):
        m.acceptance_between(b, a)


def test_recreated_counters_are_a_restart_even_when_higher() -> None:
    # Restarted and already past the old values: only the _created series tells.
    b = m.parse_spec_counters(exposition("kimi", {"0": (5, 15, 6, [4, 2, 0])}, created=1.7e9))
    a = m.parse_spec_counters(exposition("kimi", {"0": (50, 150, 70, [38, 22, 10])},
                                         created=1.8e9))
    with pytest.raises(CountersReset):
        m.acceptance_between(b.for_model("kimi"), a.for_model("kimi"))


def test_window_without_drafts_has_no_figures() -> None:
    c = m.parse_spec_counters(exposition("kimi", {"0": (5, 15, 6, [4, 2, 0])})).for_model("kimi")
    acc = m.acceptance_between(c, c)
    assert acc.rate is None and acc.mean_length is None
    assert acc.per_position == [None, None, None]
    assert acc.short() == "no drafts in window"


def test_malformed_metrics_is_one_line_error() -> None:
    with pytest.raises(MetricsMalformed) as info:
        m.parse_spec_counters('vllm:spec_decode_num_drafts_total{engine="0" 5\n', "http://x")
    assert "\n" not in str(info.value)
    with pytest.raises(MetricsMalformed, match="position"):
        m.parse_spec_counters(
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="k",engine="0"} 1\n')


async def test_figures_from_the_double_equal_its_counts_by_hand(vllm_double) -> None:  # noqa: F811
    double = vllm_double(speculative=True, engines=2, num_speculative_tokens=4,
                         other_model="someone-else")
    double.set_counters(0, drafts=100, draft_tokens=400, accepted=250, per_pos=[90, 80, 50, 30])
    double.set_counters(1, drafts=40, draft_tokens=160, accepted=70, per_pos=[30, 20, 15, 5])
    async with VllmClient(double.url) as client:
        before = (await client.scrape()).for_model("double-model")
        double.set_counters(0, drafts=130, draft_tokens=520, accepted=310,
                            per_pos=[117, 98, 62, 33])
        double.set_counters(1, drafts=60, draft_tokens=240, accepted=101, per_pos=[44, 29, 21, 7])
        after = (await client.scrape()).for_model("double-model")
    acc = m.acceptance_between(before, after)
    # By hand: drafts 30+20=50, draft tokens 120+80=200, accepted 60+31=91,
    # per position (27+14, 18+9, 12+6, 3+2) = (41, 27, 18, 5).
    assert acc.rate == pytest.approx(91 / 200)
    assert acc.mean_length == pytest.approx(1 + 91 / 50)
    assert acc.per_position == pytest.approx([41 / 50, 27 / 50, 18 / 50, 5 / 50])
    assert after.engines == {"0", "1"}


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


@pytest.mark.slow
def test_counter_names_and_labels_are_vllms_own() -> None:
    """Against the real vLLM 0.16.0 sources: the names the console and the double use exist
    there as Counter names, with the labels model_name, engine and position."""
    from tests.wheels import unpacked

    root = unpacked("vllm", "0.16.0", ["vllm/v1/spec_decode/metrics.py",
                                       "vllm/v1/metrics/prometheus.py",
                                       "vllm/v1/metrics/loggers.py"])
    spec_src = root / "vllm" / "v1" / "spec_decode" / "metrics.py"
    consts = _string_constants(spec_src)
    for name in m.SPEC_COUNTERS:
        assert name in consts, name
    assert m.POSITION_LABEL in consts
    loggers = (root / "vllm" / "v1" / "metrics" / "loggers.py").read_text()
    assert f'labelnames = ["{m.MODEL_LABEL}", "{m.ENGINE_LABEL}"]' in loggers
    assert "prometheus_client.Counter" in spec_src.read_text()  # so the text has `_total`


@pytest.mark.slow
def test_figures_equal_vllms_own_log_for_the_same_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.16.0's real SpecDecodingProm writes the counters (through prometheus_client) and
    its real SpecDecodingLogging computes the figures it logs, from the same drafts; the console,
    reading only the /metrics text, must find the same numbers. Only vllm.config and vllm.logger
    are stood in for (the module imports them for a type and a logger)."""
    import functools
    import importlib.util
    import logging
    import sys
    import types

    import prometheus_client

    from tests.wheels import unpacked

    root = unpacked("vllm", "0.16.0", ["vllm/v1/spec_decode/metrics.py",
                                       "vllm/v1/metrics/prometheus.py",
                                       "vllm/v1/metrics/loggers.py"])
    config = types.ModuleType("vllm.config")
    config.SpeculativeConfig = object  # type: ignore[attr-defined]
    logger_mod = types.ModuleType("vllm.logger")
    logger_mod.init_logger = logging.getLogger  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.config", config)
    monkeypatch.setitem(sys.modules, "vllm.logger", logger_mod)
    spec = importlib.util.spec_from_file_location(
        "vllm_spec_decode_metrics_0_16", root / "vllm" / "v1" / "spec_decode" / "metrics.py")
    assert spec is not None and spec.loader is not None
    vm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vm)

    registry = prometheus_client.CollectorRegistry()

    class Prom(vm.SpecDecodingProm):  # type: ignore[misc,name-defined]
        _counter_cls = functools.partial(prometheus_client.Counter, registry=registry)

    k = 4
    prom = Prom(types.SimpleNamespace(num_speculative_tokens=k), ["model_name", "engine"],
                {0: ["kimi", "0"], 1: ["kimi", "1"]})
    logging_agg = vm.SpecDecodingLogging()

    def step(engine: int, accepted: list[int]) -> object:
        stats = vm.SpecDecodingStats.new(k)
        for a in accepted:
            stats.observe_draft(num_draft_tokens=k, num_accepted_tokens=a)
        prom.observe(stats, engine_idx=engine)
        return stats

    # Traffic before the window: counted by Prometheus, not part of the window.
    step(0, [4, 4, 1, 0])
    step(1, [2, 3])
    before = m.parse_spec_counters(prometheus_client.generate_latest(registry).decode())
    logging_agg.reset()
    for engine, accepted in [(0, [3, 1, 0, 4]), (1, [2, 2, 0]), (0, [1, 4, 3]), (1, [0])]:
        logging_agg.observe(step(engine, accepted))
    after = m.parse_spec_counters(prometheus_client.generate_latest(registry).decode())

    logged: list[object] = []
    logging_agg.log(log_fn=lambda fmt, *args: logged.extend(args))
    mean_len, _acc_tput, _draft_tput, accepted, drafted, rates_str, rate_pct = logged
    acc = m.acceptance_between(before.for_model("kimi"), after.for_model("kimi"))
    assert acc.accepted == accepted and acc.draft_tokens == drafted
    assert acc.mean_length == pytest.approx(float(mean_len))  # type: ignore[arg-type]
    assert acc.rate is not None and acc.rate * 100 == pytest.approx(float(rate_pct))  # type: ignore[arg-type]
    assert [f"{p:.3f}" for p in acc.per_position] == str(rates_str).split(", ")


def test_other_families_never_reach_the_parse() -> None:
    """Only the four families' lines are parsed (metrics._spec_lines): a family of another name,
    however malformed, a label value or a HELP text that mentions one of ours, changes nothing."""
    ours = exposition("kimi", {"0": (5, 15, 6, [4, 2, 0])})
    noise = ('# HELP other_total mentions vllm:spec_decode_num_drafts_total\n'
             'other_total{note="vllm:spec_decode_num_drafts_total 99"} 7\n'
             'vllm:num_requests_running{broken 3\n')
    mixed = m.parse_spec_counters(noise + ours + noise)
    alone = m.parse_spec_counters(ours)
    assert mixed == alone
    assert mixed.for_model("kimi").drafts == 5
