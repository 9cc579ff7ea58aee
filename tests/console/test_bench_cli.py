"""`console bench run | compare | watch` end to end against vLLM test doubles."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from remote.bench.compare import find_crossover
from remote.bench.results import load_result
from remote.errors import NoServer
from remote.link.transport import Forward, Transport
from tests.sshd_harness import free_port
from tests.vllm_double import DoubleConfig
from tests.vllm_double_fixture import vllm_double  # noqa: F401  (fixture)

FAST = {"step_base_s": 0.002, "step_per_seq_s": 0.0005}

# The speed model of the pair (tests/vllm_double.py): a step costs base + per_seq * batch.
# Speculation yields 1 + 3 tokens per decode step (every draft fully accepted), so 16 output
# tokens take 5 steps instead of 16, but verifying 4 positions per sequence makes each sequence
# in a step dearer, so it wins at low concurrency and loses at high: predicted speedups 2.22
# (c=1), 1.70 (c=2), 0.42 (c=16). What skews the measured ratio is not the speeds but time the
# model leaves out, and it pulls towards 1: fixed per-request costs, the two sweeps running one
# after the other under a changing load, and (at high concurrency) the client falling behind
# the baseline's many one-token chunks. With 16 tokens the gain is at most 16/5 = 3.2, so the
# old sweep 1, 2, 8 held c=2 only 1.26x from 1 (one run at load ~5 measured 0.94 there).
# Measured here with two busy loops beside the test: c=2 1.46-1.81, c=16 0.69-0.73 (idle:
# 1.61 and 0.49), so both sides of the crossover keep ~1.4x or more; the old pair gave 1.26-1.33
# at c=2 under the same load.
BASELINE_SPEED = {"step_base_s": 0.020, "step_per_seq_s": 0.0001}
SPEC_SPEED = {"step_base_s": 0.020, "step_per_seq_s": 0.009, "accept_pattern": [3],
              "num_speculative_tokens": 3}
SWEEP = (1, 2, 16)


def write_config(tmp_path: Path, vllm_url: str, name: str = "local", **extra: str) -> Path:
    lines = [f"[hosts.{name}]", f'vllm_url = "{vllm_url}"']
    lines += [f'{k} = "{v}"' for k, v in extra.items()]
    cfg = tmp_path / "console.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_run_reports_speedup_and_crossover_of_the_configured_speeds(
    vllm_double, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    base = vllm_double(speculative=False, **BASELINE_SPEED)
    spec = vllm_double(speculative=True, **SPEC_SPEED)
    cfg = write_config(tmp_path, spec.url)
    session = tmp_path / "s.jsonl"
    rc = main(["bench", "run", "--config", str(cfg), "--host", "local", "--concurrency",
               ",".join(map(str, SWEEP)), "--baseline-url", base.url, "--max-tokens", "16",
               "--rounds", "2", "--session", str(session)])
    out = capsys.readouterr().out
    assert rc == 0, out
    # What the speed model predicts, from the doubles' own configuration.
    b_cfg, s_cfg = DoubleConfig(**BASELINE_SPEED), DoubleConfig(speculative=True, **SPEC_SPEED)
    predicted = [(c, s_cfg.predicted_tok_s(c, 16) / b_cfg.predicted_tok_s(c, 16))
                 for c in SWEEP]
    assert [round(want, 2) for _, want in predicted] == [2.22, 1.70, 0.42]
    expected_crossover = find_crossover(predicted)[0]
    assert expected_crossover == 16
    # The result file sits next to the session and holds both sweeps and the comparison.
    result = load_result(tmp_path / "s.bench-speculative.json")
    assert result.baseline is not None and result.comparison is not None
    rows = result.comparison["rows"]
    assert [r["concurrency"] for r in rows] == list(SWEEP)
    # Each measured speedup on the predicted side of 1 (the margins above): the measurement
    # follows the configured speeds, not a fixed answer.
    for row, (_, want) in zip(rows, predicted, strict=True):
        assert (row["speedup"] > 1) == (want > 1), (row, want)
    assert result.comparison["crossover"] == expected_crossover
    assert result.comparison["last_paying"] == 2
    # Acceptance of every window: pattern [3] of 3 drafted tokens -> vLLM's figures exactly.
    for p in result.run.points:
        assert p.acceptance is not None
        assert p.acceptance["rate"] == pytest.approx(1.0)
        assert p.acceptance["mean_length"] == pytest.approx(4.0)
        assert p.acceptance["per_position"] == pytest.approx([1.0, 1.0, 1.0])
    # Tables were printed, and the session recorded the same points and summary.
    assert "SPEEDUP" in out and "PER POSITION" in out
    assert "crossover: speculation stops paying between concurrency 2 and 16" in out
    recorded = [json.loads(line) for line in session.read_text().splitlines()[1:]]
    kinds = [e["kind"] for e in recorded]
    assert kinds.count("bench.point") == 6 and kinds.count("bench.summary") == 1
    summary = next(e for e in recorded if e["kind"] == "bench.summary")["payload"]
    assert summary["crossover"] == 16 and summary["result_file"].endswith(".json")


def test_baseline_file_then_speculative_run_then_compare(
    vllm_double, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    plain = vllm_double(speculative=False, **FAST)
    spec = vllm_double(speculative=True, accept_pattern=[2, 1], **FAST)
    common = ["--host", "local", "--concurrency", "1,4,16", "--max-tokens", "6", "--rounds", "1",
              "--warmup", "0", "--no-record"]
    base_json, spec_json = tmp_path / "base.json", tmp_path / "spec.json"
    assert main(["bench", "run", "--config", str(write_config(tmp_path, plain.url)), *common,
                 "--no-speculation", "--out", str(base_json), "--json"]) == 0
    capsys.readouterr()
    assert main(["bench", "run", "--config", str(write_config(tmp_path, spec.url)), *common,
                 "--baseline", str(base_json), "--label", "eagle3", "--out", str(spec_json),
                 "--json"]) == 0
    evs = events(capsys.readouterr().out)
    points = [e["payload"] for e in evs if e["kind"] == "bench.point"]
    assert [p["concurrency"] for p in points] == [1, 4, 16]
    for p in points:  # the brief's payload shape
        for key in ("label", "concurrency", "output_tok_s", "req_s", "ttft_p50", "ttft_p99",
                    "tpot_p50", "tpot_p99"):
            assert key in p
        assert set(p["acceptance"]) >= {"rate", "mean_length", "per_position"}
    summary = next(e["payload"] for e in evs if e["kind"] == "bench.summary")
    assert [r["concurrency"] for r in summary["rows"]] == [1, 4, 16]
    assert load_result(base_json).run.speculative is False

    assert main(["bench", "compare", str(base_json), str(spec_json)]) == 0
    out = capsys.readouterr().out
    assert "SPEEDUP" in out and "baseline TOK/S" in out and "eagle3 TOK/S" in out
    spec_run = load_result(spec_json).run
    for p in spec_run.points:
        assert f"{p.output_tok_s:.1f}" in out


def test_watch_shows_each_windows_acceptance(
    vllm_double, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    step = {"drafts": 10, "draft_tokens": 40, "accepted": 23, "per_pos": [9, 7, 5, 2]}
    spec = vllm_double(speculative=True, num_speculative_tokens=4, advance_per_scrape=step,
                       restart_at_scrape=4, **FAST)
    cfg = write_config(tmp_path, spec.url)
    rc = main(["bench", "watch", "--config", str(cfg), "--host", "local", "--interval", "0.05",
               "--count", "4", "--no-record", "--json"])
    assert rc == 0
    evs = events(capsys.readouterr().out)
    windows = [e["payload"] for e in evs if e["kind"] == "bench.watch"]
    warnings = [e["payload"]["message"] for e in evs if e["kind"] == "console.warning"]
    # Scrapes 1..5; the counters advance by `step` after each, and scrape 4 sees a restart:
    # windows 0, 1 and 3 carry exactly one step, window 2 (scrapes 3 -> 4) is reported as reset.
    assert [w["window"] for w in windows] == [0, 1, 3]
    assert len(warnings) == 1 and "restarted" in warnings[0]
    for w in windows:
        acc = w["acceptance"]
        assert acc["rate"] == pytest.approx(23 / 40)
        assert acc["mean_length"] == pytest.approx(1 + 23 / 10)
        assert acc["per_position"] == pytest.approx([0.9, 0.7, 0.5, 0.2])


def test_watch_prints_a_table(vllm_double, tmp_path: Path,  # noqa: F811
                              capsys: pytest.CaptureFixture[str]) -> None:
    step = {"drafts": 4, "draft_tokens": 8, "accepted": 3, "per_pos": [2, 1]}
    spec = vllm_double(speculative=True, num_speculative_tokens=2, advance_per_scrape=step,
                       **FAST)
    cfg = write_config(tmp_path, spec.url)
    assert main(["bench", "watch", "--config", str(cfg), "--interval", "0.05", "--count", "2",
                 "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "PER POSITION" in out and "37.5%" in out and "1.75" in out and "0.50 0.25" in out


@pytest.mark.parametrize(("case", "code", "message"), [
    ("no-server", 3, "no server at http://127.0.0.1:"),
    ("no-speculation", 1, "exposes no spec-decode counters"),
    ("model", 2, "serves 'double-model', not 'kimi'"),
    ("watch-no-speculation", 1, "exposes no spec-decode counters"),
])
def test_clear_errors(case: str, code: int, message: str, vllm_double, tmp_path: Path,  # noqa: F811
                      capsys: pytest.CaptureFixture[str]) -> None:
    if case == "no-server":
        url = f"http://127.0.0.1:{free_port()}"
    else:
        url = vllm_double(speculative=(case == "model"), **FAST).url
    argv = ["bench", "run", "--concurrency", "1", "--max-tokens", "4", "--rounds", "1"]
    if case == "model":
        argv += ["--model", "kimi"]
    if case.startswith("watch"):
        argv = ["bench", "watch", "--interval", "0.05", "--count", "1"]
    rc = main([*argv, "--config", str(write_config(tmp_path, url)), "--no-record"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == code
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "junk.json").write_text("[1, 2]")
    assert main(["bench", "compare", str(tmp_path / "junk.json"),
                 str(tmp_path / "missing.json")]) == 2
    assert "not a bench result" in capsys.readouterr().err
    assert main(["bench", "run", "--concurrency", "0", "--no-record"]) == 2
    assert main(["bench", "run", "--prompts", str(tmp_path / "none.jsonl"), "--no-record"]) == 2
    assert main(["bench", "run", "--no-speculation", "--baseline", "x.json"]) == 2
    err = capsys.readouterr().err
    assert "--concurrency '0'" in err and "none.jsonl" in err


@pytest.mark.ssh
async def test_server_reached_through_the_ssh_forward(vllm_double, sshd) -> None:  # noqa: F811
    from remote.bench.driver import run_point
    from remote.bench.prompts import load_prompts
    from remote.bench.reach import vllm_client
    from remote.link.connect import make_transport

    double = vllm_double(speculative=True, accept_pattern=[2, 0, 1], **FAST)
    host = sshd.host_config("box", vllm_url=double.url)
    t = make_transport(host)
    await t.connect()
    try:
        async with vllm_client(t, host.vllm_url, is_local=False) as client:
            assert client.url != client.shown_url  # through the forward's own local port
            assert client.shown_url == double.url
            point = await run_point(client, "double-model", load_prompts(), 2, requests=4,
                                    max_tokens=8, speculative=True)
    finally:
        await t.close()
    state = double.state()
    assert state["requests_seen"] == 4 and point.output_tokens == 32
    c = state["counters"][0]
    assert point.acceptance is not None
    assert point.acceptance["rate"] == pytest.approx(c["accepted"] / c["draft_tokens"])
    assert point.acceptance["per_position"] == pytest.approx(
        [p / c["drafts"] for p in c["per_pos"]])


@pytest.mark.ssh
@pytest.mark.slow
def test_cli_run_on_an_ssh_host(vllm_double, sshd, tmp_path: Path,  # noqa: F811
                                capsys: pytest.CaptureFixture[str]) -> None:
    double = vllm_double(speculative=True, **FAST)
    cfg = sshd.console_toml(tmp_path / "console.toml", vllm_url=double.url)
    rc = main(["bench", "run", "--config", str(cfg), "--host", "box", "--concurrency", "1,2",
               "--max-tokens", "6", "--rounds", "1", "--no-record", "--json",
               "--out", str(tmp_path / "r.json")])
    assert rc == 0, capsys.readouterr().err
    run = load_result(tmp_path / "r.json").run
    assert run.host == "box" and [p.concurrency for p in run.points] == [1, 2]
    assert double.state()["requests_seen"] == 1 + 1 + 2


class _AsyncsshForward(Transport):
    """Only the port forward of an SSH transport, made with asyncssh against the loopback sshd,
    so the forward path of `vllm_client` runs through a real SSH tunnel before remote.link.ssh lands.
    (Not a mock: the tunnel is real; the other Transport methods are not needed here.)"""

    name = "box"

    def __init__(self, sshd: Any) -> None:
        self._sshd = sshd
        self._conn: Any = None

    async def connect(self) -> None:
        import asyncssh

        self._conn = await asyncssh.connect(self._sshd.alias, config=[str(self._sshd.ssh_config)],
                                            known_hosts=str(self._sshd.known_hosts))

    async def close(self) -> None:
        self._conn.close()
        await self._conn.wait_closed()

    @property
    def connected(self) -> bool:
        return self._conn is not None

    async def start(self, argv: Any, *, env: Any = None) -> Any:
        raise NotImplementedError

    async def put(self, local: Any, remote: str, progress: Any = None) -> None:
        raise NotImplementedError

    async def get(self, remote: str, local: Any, progress: Any = None) -> None:
        raise NotImplementedError

    async def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> Forward:
        listener = await self._conn.forward_local_port("127.0.0.1", 0, remote_host, remote_port)
        return Forward(listener.get_port(), remote_host, remote_port, listener.close)


@pytest.mark.ssh
async def test_acceptance_through_a_real_ssh_tunnel(vllm_double, sshd) -> None:  # noqa: F811
    from remote.bench.driver import run_point
    from remote.bench.prompts import load_prompts
    from remote.bench.reach import vllm_client

    double = vllm_double(speculative=True, accept_pattern=[1, 3], **FAST)
    t = _AsyncsshForward(sshd)
    await t.connect()
    try:
        async with vllm_client(t, double.url + "/", is_local=False) as client:
            local_port = int(client.url.rsplit(":", 1)[1])
            assert local_port != double.port and client.shown_url == double.url
            point = await run_point(client, "double-model", load_prompts(), 2, requests=4,
                                    max_tokens=9, speculative=True)
        # The forward is gone with the client.
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", local_port), timeout=2).close()
        # A forward to a port where nothing listens: the tunnel accepts, the server is absent.
        dead = f"http://127.0.0.1:{free_port()}"
        async with vllm_client(t, dead, is_local=False) as client:
            with pytest.raises(NoServer, match=f"no server at {dead}"):
                await client.scrape()
    finally:
        await t.close()
    c = double.state()["counters"][0]
    assert point.output_tokens == 4 * 9 and c["drafts"] > 0
    assert point.acceptance is not None
    assert point.acceptance["rate"] == pytest.approx(c["accepted"] / c["draft_tokens"])
    assert point.acceptance["mean_length"] == pytest.approx(1 + c["accepted"] / c["drafts"])
    assert point.acceptance["per_position"] == pytest.approx(
        [p / c["drafts"] for p in c["per_pos"]])


def test_a_restart_mid_sweep_stops_it_and_keeps_the_points_measured(
    vllm_double, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    # Scrapes: 1 the pre-flight check, 2-3 around c=1, 4-5 around c=2; restart at 5.
    spec = vllm_double(speculative=True, restart_at_scrape=5, **FAST)
    out = tmp_path / "r.json"
    rc = main(["bench", "run", "--config", str(write_config(tmp_path, spec.url)),
               "--concurrency", "1,2", "--max-tokens", "4", "--rounds", "1", "--warmup", "0",
               "--out", str(out), "--no-record"])
    captured = capsys.readouterr()
    assert rc == 1
    assert captured.err.strip().splitlines()[-1].startswith("error: ")
    assert "restarted" in captured.err
    assert f"kept in {out}" in captured.out
    kept = load_result(out)
    assert not kept.complete
    assert [p.concurrency for p in kept.run.points] == [1]
    assert main(["bench", "compare", str(out), str(out)]) == 0
    assert "incomplete" in capsys.readouterr().out


def test_a_plain_server_in_place_of_the_speculative_one_fails_before_the_baseline_sweep(
    vllm_double, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    base = vllm_double(speculative=False, **FAST)
    not_spec = vllm_double(speculative=False, **FAST)
    rc = main(["bench", "run", "--config", str(write_config(tmp_path, not_spec.url)),
               "--baseline-url", base.url, "--concurrency", "1", "--max-tokens", "4",
               "--no-record"])
    assert rc == 1 and "no spec-decode counters" in capsys.readouterr().err
    assert base.state()["requests_seen"] == 0 and not_spec.state()["requests_seen"] == 0
