"""The CLI and the TUI reach stats, allreduce, bench and serve through remote/ops/ only.

A front end that called a runner directly would carry its own copy of how the action runs
(issue 14: the copies drifted). The static checks read the sources; the live ones run the real
stats stream on `local` and watch that it went through the operation.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from console.tui.controller import LiveController
from remote.link.hosts import Config, HostConfig, default_local
from remote.ops import stats as stats_ops
from remote.spine import events as ev
from remote.spine.bus import EventBus
from tests.local_box import local_console_toml

REPO = Path(__file__).resolve().parents[3]

# module -> the runners the operations wrap. Formatting helpers and parsers of the same modules
# (format_sweep_table, parse_sizes, DEFAULT_KERNELS, extra_vllm_args, ...) stay free to use.
RUNNERS: dict[str, set[str]] = {
    "remote.stats.stream": {"StatsStream", "stream_stats"},
    "remote.allreduce.sweep": {"run_sweep"},
    "remote.allreduce.trace": {"analyse_files"},
    "remote.allreduce.capture": {"capture"},
    "remote.bench.driver": {"run_sweep", "run_point"},
    "remote.bench.watch": {"watch"},
    "remote.serving.serve": {"ServeRunner", "serving"},
    "remote.serving.serve_bench": {"serve_and_bench"},
}


def _runner_imports(path: Path) -> set[str]:
    """`module:name` for every runner the file imports (any scope, TYPE_CHECKING included), and
    `module` for a plain `import module` of a runner module (which would reach them by
    attribute)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in RUNNERS:
            found |= {f"{node.module}:{a.name}" for a in node.names
                      if a.name in RUNNERS[node.module]}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in RUNNERS}
    return found


def test_front_ends_never_import_a_runner() -> None:
    offenders = {str(p.relative_to(REPO)): sorted(_runner_imports(p))
                 for p in sorted((REPO / "console").rglob("*.py")) if _runner_imports(p)}
    assert offenders == {}


def test_the_operations_are_what_wraps_every_runner() -> None:
    # Not vacuous: each runner named above is imported by remote/ops/ (so the names are real).
    wrapped = set().union(*(_runner_imports(p) for p in (REPO / "remote" / "ops").glob("*.py")))
    expected = {f"{m}:{n}" for m, names in RUNNERS.items() for n in names}
    # serving is reached through serve_and_bench (run_point: run_sweep, and the matrix's cells
    # in remote/ops/matrix.py); stream_stats now lives in remote/ops/stats.py
    assert expected - wrapped == {"remote.serving.serve:serving",
                                  "remote.stats.stream:stream_stats"}


def test_a_key_reaches_the_operations_in_two_hops() -> None:
    """Issue 52: a key's action (console/tui/box_actions.py) calls a method of the Controller,
    and the live one calls its operation from remote/ops/: typed (no Any in its signature), no
    adapter layer between."""
    tui = REPO / "console" / "tui"
    tree = ast.parse((tui / "controller.py").read_text())
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    actions = {f.name for f in classes["Controller"].body if isinstance(f, ast.AsyncFunctionDef)}
    live = {f.name: f for f in classes["LiveController"].body if isinstance(f, ast.AsyncFunctionDef)}
    for name in actions - {"connect", "accept_host_key", "aclose"}:
        method = live[name]
        ops = {a.name for n in ast.walk(method) if isinstance(n, ast.ImportFrom)
               and n.module == "remote.ops" for a in n.names}
        assert ops, f"LiveController.{name} imports no operation from remote.ops"
        called = {ast.unparse(n.func.value) for n in ast.walk(method)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        assert ops & called, (name, ops, called)
        assert "Any" not in ast.unparse(method.args), name
    source = ast.parse((tui / "box_actions.py").read_text())
    used = {n.attr for n in ast.walk(source) if isinstance(n, ast.Attribute)
            and ast.unparse(n.value) == "self.source.controller"}
    assert {"run_probe", "apply_patch", "start_stage", "serve_start", "run_bench"} <= used <= actions
    assert not (tui / "wiring.py").exists()


def test_one_serve_set_up_for_the_cli_run_serve_and_the_tui() -> None:
    """`console serve start`, `run --serve`, `bench matrix` and the TUI build their server the
    same way: remote.ops.serve's options (pipeline and vLLM arguments) and server (its python)."""
    for path in ("console/commands/serve.py", "console/commands/run.py",
                 "console/commands/bench_matrix.py", "console/tui/controller.py"):
        text = (REPO / path).read_text()
        assert ".options(" in text and ".server(" in text, path
        assert "extra_vllm_args" not in text and "local_python" not in text, path


def test_cli_stats_runs_through_the_operation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[int | None] = []
    real = stats_ops.stream

    async def counted(*args: object, **kwargs: object) -> int:
        calls.append(kwargs.get("count"))  # type: ignore[arg-type]
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(stats_ops, "stream", counted)
    cfg = local_console_toml(tmp_path)
    rc = main(["stats", "--host", "local", "--once", "--interval", "0.1",
               "--config", str(cfg), "--no-record"])
    assert rc == 0 and "local: cpu " in capsys.readouterr().out
    assert calls == [1]  # --once: one sample, through remote/ops/stats.py
    rc = main(["stats", "--host", "local", "--count", "2", "--interval", "0.1",
               "--config", str(cfg), "--no-record"])
    assert rc == 0 and calls == [1, 2]


async def test_tui_stats_action_streams_real_samples(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    host: HostConfig = default_local(workdir=str(tmp_path / "box"))  # stats_interval 0.1
    bus = EventBus()
    samples = []
    bus.add_callback(lambda e: samples.append(e) if e.kind == ev.STATS_SAMPLE else None)
    controller = LiveController(Config(hosts={"local": host}, path=None), bus)
    calls: list[float] = []
    real = stats_ops.stream

    async def counted(*args: Any, **kwargs: Any) -> int:
        calls.append(kwargs["interval"])
        return await real(*args, **kwargs)

    monkeypatch.setattr(stats_ops, "stream", counted)
    await controller.connect("local")  # the TUI's connect starts the live stats

    async def two() -> None:
        while len(samples) < 2:
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(two(), 60)
    finally:
        await controller.aclose()
    assert calls == [0.1] and len(samples) >= 2  # the TUI's stream is the operation's
    assert {"host", "source"} <= set(samples[0].payload)
