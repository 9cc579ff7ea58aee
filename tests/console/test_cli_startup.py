"""`console --help` and `console CMD --help` load only what printing the help needs.

A test of imports, not of time (benchmarks/cli_startup.py measures the time): each command line
runs in a fresh interpreter, as a user runs it, and reports the modules it imported. And
`console`'s two passes (console/cli.py: parse_command_line, an outline and then the one
command's parser) print, parse and refuse exactly what the fully built parser does, so building
one command's parser alone changes nothing a user sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.argtypes import command_lines
from console.cli import build_parser, main, parse_command_line

REPO = Path(__file__).resolve().parents[2]

# Third-party libraries a --help never needs, and our modules that pull them in or run a command.
HEAVY = ("httpx", "prometheus_client", "zstandard", "textual", "asyncssh", "msgspec", "torch",
         "packaging", "platformdirs", "asyncio", "remote.spine.events", "remote.spine.event_types",
         "remote.spine.bus", "remote.link.transport", "remote.link.ssh", "remote.link.hosts", "remote.jobs.client",
         "remote.stats.stream", "remote.serving.serve", "remote.pipeline_runner", "remote.ops",
         "remote.bench", "remote.patcher.plan", "console.sessions.reader", "console.sessions.writer",
         "console.sessions.recorder", "console.printer",
         "console.sessions.live", "console.tui")
_PROBE = """
import json, runpy, sys
sys.argv = ["console", *json.loads(sys.argv[1])]
try:
    runpy.run_module("console", run_name="__main__")
except SystemExit as exc:
    code = exc.code
else:
    code = None
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _help_lines() -> list[tuple[str, ...]]:
    """`console --help`, every `console CMD --help` and every `console CMD SUB --help`."""
    return [path for path, _ in command_lines(build_parser())]


def _imported(argv: tuple[str, ...]) -> tuple[object, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps([*argv, "--help"])],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert "usage: console" in done.stdout, (argv, done.stdout, done.stderr)
    return report["code"], report["modules"]


def test_the_help_lines_cover_every_command() -> None:
    lines = _help_lines()
    commands = {p[0] for p in lines if len(p) == 1}
    assert {"run", "replay", "hosts", "jobs", "patch", "bench", "probe", "stats", "allreduce",
            "serve"} <= commands
    assert ("bench", "run") in lines and ("allreduce", "capture") in lines


@pytest.mark.parametrize("argv", _help_lines(), ids=lambda p: " ".join(("console", *p)))
def test_help_imports_nothing_heavy(argv: tuple[str, ...]) -> None:
    code, modules = _imported(argv)
    assert code == 0
    heavy = [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == [], f"console {' '.join(argv)} --help imported {heavy}"
    # The command's own module is loaded (its parser printed the help), through console.cli.
    assert "console.cli" in modules
    if argv:
        assert f"console.commands.{argv[0]}" in modules


def test_the_top_level_help_reads_the_commands_help_lines_alone() -> None:
    """`console --help` needs each command's HELP line, not its parser: not the stage table's
    dataclasses (console run's --from choices), nor dataclasses and inspect at all (the probe
    table, whose names the probe line lists, is made of NamedTuples). Issue 52's goal, <= 2x
    `python -c pass`, measured in docs/measurements.md."""
    code, modules = _imported(())
    assert code == 0
    assert [m for m in ("dataclasses", "inspect", "pipeline.stages") if m in modules] == []


def test_a_command_line_imports_what_it_runs() -> None:
    """The other side of the same coin: the check above would pass if a command line imported
    nothing at all. A real run of `console replay --print` loads the session reader."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _PROBE,
                           json.dumps(["replay", "--print", str(REPO / "missing.jsonl")])],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert "console.sessions.reader" in report["modules"]


@pytest.mark.parametrize("argv", _help_lines(), ids=lambda p: " ".join(("console", *p)))
def test_help_built_on_demand_is_the_full_parsers_help(
        argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    expected = dict(command_lines(build_parser()))[argv].format_help()
    assert main([*argv, "--help"]) == 0
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize("argv", [
    ["probe", "env", "--host", "box", "--accept-new-host-key", "--timeout", "5"],
    ["bench", "run", "--host", "box", "--concurrency", "1,2", "--baseline", "a.json"],
    ["jobs", "tail", "r1", "--no-follow", "--host", "box"],
    ["jobs", "--host", "box"],
    ["--config", "c.toml", "stats", "--once", "--interval", "0.5"],
    ["patch", "plan", "--recipe", "embed-input-ids", "--yes"],
    ["serve", "stop", "--host", "box", "--role", "baseline"],
    ["allreduce", "trace", "a.json", "b.json.gz", "--kernels", "*ar*"],
    ["run", "--demo", "--from", "train"],
    ["replay", "s.jsonl", "--json"],
    [],
])
def test_parsed_alike(argv: list[str]) -> None:
    assert vars(parse_command_line(argv)) == vars(build_parser().parse_args(argv))


@pytest.mark.parametrize("argv", [["nope"], ["stats", "--interval", "x"], ["patch", "mend"],
                                  ["bench"], ["--bogus"], ["--bogus", "run"], ["run", "--bogus"],
                                  ["--config"], ["jobs", "tail"]])
def test_refused_alike(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    messages = []
    for parse in (build_parser().parse_args, parse_command_line):
        with pytest.raises(SystemExit) as exc:
            parse(argv)
        assert exc.value.code == 2
        messages.append(capsys.readouterr().err)
    assert messages[0] == messages[1] and "error:" in messages[0]


# What printing a session never needs: an event loop (and what asyncio brings: ssl, sockets,
# thread pools), the SSH stack, the TUI, the decompressor of a plain file.
NOT_FOR_A_PRINT = ("asyncio", "ssl", "socket", "concurrent.futures", "asyncssh", "textual",
                   "zstandard", "httpx", "torch", "remote.link.ssh", "remote.link.transport",
                   "console.tui.app", "console.tui.launch")


def test_replay_print_imports_no_event_loop_ssh_or_tui(tmp_path: Path) -> None:
    """`console replay F --print` is a file to stdout: it runs without asyncio (console/cli.py
    runs a coroutine only when a command returns one), which was a fifth of its start."""
    session = tmp_path / "run.jsonl"
    session.write_bytes((REPO / "benchmarks" / "data" / "demo-run.jsonl").read_bytes())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _PROBE,
                           json.dumps(["replay", str(session), "--print"])],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, done.stderr[-2000:]
    assert done.stdout.count("\n") > 50  # the session was printed
    assert "console.sessions.human" in report["modules"]
    heavy = [m for m in report["modules"]
             if any(m == h or m.startswith(h + ".") for h in NOT_FOR_A_PRINT)]
    assert heavy == []
