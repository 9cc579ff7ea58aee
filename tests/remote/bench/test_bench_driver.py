"""The load driver, prompt sets and the comparison, against the vLLM test double."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remote.bench.client import VllmClient
from remote.bench.compare import compare_runs, find_crossover
from remote.bench.driver import percentile, resolve_model, run_point, run_sweep
from remote.bench.matrix import parse_concurrency
from remote.bench.prompts import BUILTIN, load_prompts, parse_prompts
from remote.bench.results import BenchRun, Point, load_result, save_result
from remote.errors import BenchFailed, CountersReset, ModelMismatch, NoServer, NoSpeculation, UsageError
from tests.sshd_harness import free_port
from tests.vllm_double_fixture import vllm_double  # noqa: F401  (fixture)

FAST = {"step_base_s": 0.002, "step_per_seq_s": 0.0005}


def test_builtin_prompts_load_in_every_accepted_shape() -> None:
    prompts = load_prompts(BUILTIN)
    assert len(prompts) >= 20
    roles = {tuple(t["role"] for t in conv) for conv in prompts.conversations}
    assert ("user",) in roles and ("system", "user") in roles
    assert ("user", "assistant", "user") in roles  # the ShareGPT row keeps its history
    assert all(conv[-1]["role"] == "user" for conv in prompts.conversations)


def test_prompt_rows_of_other_datasets() -> None:
    data = "\n".join(json.dumps(r) for r in [
        "a bare string",
        {"text": "text row"},
        {"instruction": "Do it", "input": "with this"},
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
    ]).encode()
    ps = parse_prompts(data, "x.jsonl")
    assert [c[-1]["content"] for c in ps.conversations] == [
        "a bare string", "text row", "Do it\n\nwith this", "q", "hi"]
    assert ps.get(7) == ps.conversations[2]  # cycled


@pytest.mark.parametrize(("text", "message"), [
    ('{"prompt": "ok"}\nnot json\n', "x.jsonl:2: not JSON"),
    ('{"foo": 1}\n', "x.jsonl:1: expected a string or an object"),
    ('{"messages": [{"role": "assistant", "content": "a"}]}\n', "has no user turn"),
    ("\n\n", "no prompts"),
])
def test_bad_prompt_files_are_one_line_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        parse_prompts(text.encode(), "x.jsonl")
    assert "\n" not in str(info.value)


def test_missing_prompt_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="No such file"):
        load_prompts(tmp_path / "nope.jsonl")


def test_percentile_and_concurrency_parsing() -> None:
    assert percentile([], 50) is None
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert percentile(list(range(101)), 99) == pytest.approx(99)
    assert percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    assert parse_concurrency("16,1, 4,4") == [1, 4, 16]
    for bad in ("1,x", "0", ""):
        with pytest.raises(UsageError):
            parse_concurrency(bad)


def _run(label: str, speculative: bool, speeds: dict[int, float], **kw: object) -> BenchRun:
    run = BenchRun(label=label, url="http://x", model="m", speculative=speculative,
                   max_tokens=int(kw.get("max_tokens", 64)), rounds=2, prompts="p",
                   prompts_sha256=str(kw.get("sha", "abc")), started="t")
    for c, tok_s in speeds.items():
        run.points.append(Point(c, 2 * c, 0, 100, 1.0, tok_s, 1.0, 0.1, 0.2, 0.01, 0.02))
    return run


def test_crossover_from_speedups() -> None:
    base = _run("baseline", False, {1: 100.0, 4: 300.0, 16: 800.0, 64: 1600.0})
    spec = _run("eagle3", True, {1: 150.0, 4: 390.0, 16: 640.0, 64: 1000.0})
    cmp = compare_runs(base, spec)
    assert [r.speedup for r in cmp.rows] == pytest.approx([1.5, 1.3, 0.8, 0.625])
    assert (cmp.crossover, cmp.last_paying) == (16, 4)
    # Interpolated on log2: from 1.3 at 4 to 0.8 at 16, 1.0 is 0.6 of the way: 2**(2 + 0.6*2).
    assert cmp.crossover_estimate == pytest.approx(2 ** 3.2)
    assert not cmp.warnings
    assert "stops paying at c=16" in cmp.summary()
    assert find_crossover([(1, 0.9), (4, 0.8)]) == (1, None, None)
    assert find_crossover([(1, 1.2), (4, 1.1)]) == (None, None, None)


def test_compare_warns_about_different_workloads() -> None:
    base = _run("baseline", False, {1: 100.0, 4: 300.0}, max_tokens=64, sha="a")
    spec = _run("eagle3", True, {1: 150.0, 8: 390.0}, max_tokens=128, sha="b")
    cmp = compare_runs(base, spec)
    assert [r.concurrency for r in cmp.rows] == [1]
    text = " | ".join(cmp.warnings)
    assert "output lengths differ" in text and "prompt sets differ" in text
    assert "[4, 8]" in text


def test_result_file_round_trip_and_errors(tmp_path: Path) -> None:
    run = _run("eagle3", True, {1: 150.0})
    base = _run("baseline", False, {1: 100.0})
    path = save_result(tmp_path / "r.json", run, baseline=base)
    loaded = load_result(path)
    assert loaded.run == run and loaded.baseline == base
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    for name, message in [("bad.json", "not a bench result"), ("missing.json", "No such file")]:
        with pytest.raises(UsageError, match=message):
            load_result(tmp_path / name)


async def test_point_acceptance_equals_the_doubles_counts(vllm_double) -> None:  # noqa: F811
    double = vllm_double(speculative=True, engines=2, accept_pattern=[3, 0, 2, 1, 3],
                         num_speculative_tokens=3, **FAST)
    prompts = load_prompts(BUILTIN)
    async with VllmClient(double.url) as client:
        before = double.state()["counters"]
        point = await run_point(client, "double-model", prompts, 3, requests=6, max_tokens=12,
                                speculative=True)
        after = double.state()["counters"]
    # By hand, from the double's own counts (both engines summed).
    d = {k: sum(a[k] - b[k] for a, b in zip(after, before, strict=True))
         for k in ("drafts", "draft_tokens", "accepted")}
    per_pos = [sum(a["per_pos"][i] - b["per_pos"][i] for a, b in zip(after, before, strict=True))
               for i in range(3)]
    acc = point.acceptance
    assert acc is not None and d["drafts"] > 0
    assert acc["rate"] == pytest.approx(d["accepted"] / d["draft_tokens"])
    assert acc["mean_length"] == pytest.approx(1 + d["accepted"] / d["drafts"])
    assert acc["per_position"] == pytest.approx([p / d["drafts"] for p in per_pos])
    # Fixed output length: every request asked for it, and every token came back.
    bodies = double.state()["bodies"]
    assert bodies["max_tokens"] == [12] * 6 and all(bodies["ignore_eos"])
    assert point.requests == 6 and point.failed == 0 and point.output_tokens == 6 * 12
    assert point.ttft_p50 is not None and point.tpot_p50 is not None
    assert point.ttft_p50 <= point.ttft_p99  # type: ignore[operator]


async def test_sweep_points_and_request_counts(vllm_double) -> None:  # noqa: F811
    double = vllm_double(speculative=False, **FAST)
    seen: list[int] = []
    async with VllmClient(double.url) as client:
        run = await run_sweep(client, load_prompts(BUILTIN), [1, 3], label="baseline",
                              model=None, speculative=False, max_tokens=5, rounds=2, warmup=1,
                              on_point=lambda run, p: seen.append(p.concurrency))
    assert seen == [1, 3] and run.model == "double-model" and not run.speculative
    assert run.server_version == "0.16.0+test-double"
    assert [p.requests for p in run.points] == [2, 6]
    assert all(p.acceptance is None for p in run.points)
    assert double.state()["requests_seen"] == 1 + 2 + 6
    assert double.state()["generated"] == 5 * 9


async def test_no_server_at_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with VllmClient(url) as client:
        with pytest.raises(NoServer, match=f"no server at {url}") as info:
            await client.scrape()
    assert info.value.exit_code == 3 and "\n" not in str(info.value)


async def test_speculative_run_against_a_plain_server(vllm_double) -> None:  # noqa: F811
    double = vllm_double(speculative=False, **FAST)
    async with VllmClient(double.url) as client:
        with pytest.raises(NoSpeculation):
            await run_sweep(client, load_prompts(BUILTIN), [1], label="x", model=None,
                            speculative=True, max_tokens=4, rounds=1)
    assert double.state()["requests_seen"] == 0  # refused before any load


async def test_model_mismatch_against_the_server(vllm_double) -> None:  # noqa: F811
    double = vllm_double(speculative=True, **FAST)
    async with VllmClient(double.url) as client:
        with pytest.raises(ModelMismatch, match="serves 'double-model', not 'kimi'"):
            await resolve_model(client, "kimi")


async def test_restart_between_scrapes(vllm_double) -> None:  # noqa: F811
    double = vllm_double(speculative=True, **FAST)
    double.set_counters(0, drafts=100, draft_tokens=300, accepted=150, per_pos=[70, 50, 30])
    async with VllmClient(double.url) as client:
        before = (await client.scrape()).for_model(None)
        double.restart()
        double.set_counters(0, drafts=500, draft_tokens=1500, accepted=800,
                            per_pos=[350, 250, 200])
        after = (await client.scrape()).for_model(None)
    from remote.bench.metrics import acceptance_between

    with pytest.raises(CountersReset, match="restarted"):
        acceptance_between(before, after, double.url)


async def test_every_request_failing_is_a_bench_failure(vllm_double) -> None:  # noqa: F811
    double = vllm_double(speculative=False, **FAST)
    async with VllmClient(double.url) as client:
        with pytest.raises(BenchFailed, match=r"HTTP 404.*does not exist"):
            await run_point(client, "not-served", load_prompts(BUILTIN), 2, requests=2,
                            max_tokens=4, speculative=False)


async def test_concurrency_is_held_and_capacity_queues(vllm_double) -> None:  # noqa: F811
    # The driver keeps exactly `concurrency` requests in flight; the double runs at most
    # max_num_seqs of them and queues the rest (vLLM's scheduler limit).
    wide = vllm_double(speculative=False, **FAST)
    narrow = vllm_double(speculative=False, max_num_seqs=2, **FAST)
    for double, expected in ((wide, 4), (narrow, 2)):
        async with VllmClient(double.url) as client:
            point = await run_point(client, "double-model", load_prompts(BUILTIN), 4,
                                    requests=8, max_tokens=50, speculative=False)
        assert point.failed == 0 and point.output_tokens == 8 * 50
        assert double.state()["max_running"] == expected


async def test_loop_lag_monitor_sees_a_blocked_driver() -> None:
    import asyncio
    import time

    from remote.bench.driver import LAG_TICK_S, _loop_lag

    lags: list[float] = []
    monitor = asyncio.create_task(_loop_lag(lags))
    await asyncio.sleep(0.03)
    time.sleep(0.4)  # the driver busy parsing: the loop cannot wake anyone for 400 ms
    await asyncio.sleep(LAG_TICK_S + 0.03)
    monitor.cancel()
    assert lags and max(lags) >= 0.4 - LAG_TICK_S - 0.001  # a tick absorbs at most one tick


async def test_sampled_sweep_sends_temperature_and_a_seed_per_request(vllm_double) -> None:  # noqa: F811
    """T > 0: every measured request carries the temperature and its own seed (seed + its
    index in the sweep), so a rerun sends the same seeds; greedy requests carry no seed."""
    double = vllm_double(speculative=False, **FAST)
    async with VllmClient(double.url) as client:
        runs = [await run_sweep(client, load_prompts(BUILTIN), [1, 2], label="sampled",
                                model=None, speculative=False, max_tokens=4, rounds=2,
                                warmup=1, temperature=0.7, seed=100) for _ in range(2)]
    bodies = double.state()["bodies"]
    # per sweep: the warm-up (greedy, unseeded), then 2 + 4 measured requests
    one = [0.0] + [0.7] * 6
    assert bodies["temperature"] == one + one
    seeds = [None, 100, 101, 102, 103, 104, 105]
    assert bodies["seed"] == seeds + seeds
    assert runs[0].temperature == 0.7 and runs[0].seed == 100
    greedy = await _greedy_run(double.url)
    assert greedy.temperature == 0.0 and greedy.seed is None
    assert double.state()["bodies"]["seed"][-2:] == [None, None]


async def _greedy_run(url: str) -> BenchRun:
    async with VllmClient(url) as client:
        return await run_sweep(client, load_prompts(BUILTIN), [1], label="greedy", model=None,
                               speculative=False, max_tokens=4, rounds=1, warmup=1)


def test_compare_warns_when_sampling_differs() -> None:
    a = _run("base", False, {1: 10.0})
    b = _run("spec", True, {1: 12.0})
    b.temperature, b.seed = 0.7, 0
    assert any("sampling differs" in w for w in compare_runs(a, b).warnings)
    b.temperature, b.seed = 0.0, None
    assert not any("sampling differs" in w for w in compare_runs(a, b).warnings)


def _two_category_prompts() -> bytes:
    rows = [{"prompt": f"chat {i}", "category": "chat"} for i in range(3)] + \
           [{"prompt": f"code {i}", "category": "code"} for i in range(2)]
    return "\n".join(json.dumps(r) for r in rows).encode()


def test_prompt_categories_and_a_bad_one() -> None:
    ps = parse_prompts(_two_category_prompts(), "cats.jsonl")
    groups = ps.by_category()
    assert list(groups) == ["chat", "code"]
    assert [c[0]["content"] for c in groups["code"].conversations] == ["code 0", "code 1"]
    assert parse_prompts(b'{"prompt": "x"}', "p.jsonl").by_category() == {}
    with pytest.raises(UsageError, match=r'p\.jsonl:1: "category" must be a non-empty string'):
        parse_prompts(b'{"prompt": "x", "category": 3}', "p.jsonl")


async def test_acceptance_per_category_is_each_windows_own(vllm_double) -> None:  # noqa: F811
    """Two categories: one window each; each window's acceptance is the double's counts over
    that window alone, and the point's is the two together."""
    double = vllm_double(speculative=True, accept_pattern=[3, 1, 0, 2],
                         num_speculative_tokens=3, **FAST)
    prompts = parse_prompts(_two_category_prompts(), "cats.jsonl")
    async with VllmClient(double.url) as client:
        point = await run_point(client, "double-model", prompts, 2, requests=4, max_tokens=8,
                                speculative=True)
    assert point.categories is not None and list(point.categories) == ["chat", "code"]
    chat, code = point.categories["chat"], point.categories["code"]
    assert chat["requests"] == 2 and code["requests"] == 2 and point.requests == 4
    total = sum(c["acceptance"]["drafts"] for c in (chat, code))
    assert point.acceptance is not None and point.acceptance["drafts"] == total > 0
    accepted = sum(c["acceptance"]["accepted"] for c in (chat, code))
    assert point.acceptance["mean_length"] == pytest.approx(1 + accepted / total)
    assert point.output_tokens == chat["output_tokens"] + code["output_tokens"] == 4 * 8
    # requests went to their own category's prompts
    base = vllm_double(speculative=False, **FAST)
    async with VllmClient(base.url) as client:
        bpoint = await run_point(client, "double-model", prompts, 2, requests=4, max_tokens=8,
                                 speculative=False)
    b = BenchRun("base", "u", "m", False, 8, 0, "cats", prompts.sha256, "t", points=[bpoint])
    s = BenchRun("spec", "u", "m", True, 8, 0, "cats", prompts.sha256, "t", points=[point])
    row = compare_runs(b, s).rows[0]
    assert row.categories is not None and set(row.categories) == {"chat", "code"}
    assert row.categories["code"]["speedup"] == pytest.approx(
        code["output_tok_s"] / bpoint.categories["code"]["output_tok_s"])  # type: ignore[index]
