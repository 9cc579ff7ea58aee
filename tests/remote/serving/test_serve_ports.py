"""The serve ports are checked on the box before any engine starts: a vLLM told to listen on a
taken port loads the whole model first and only then dies with "address already in use".

Real parts: the loopback sshd (the check runs on the box with the box's python, reached like a
GPU box) and real listening sockets held by the test. The free case with a real engine behind it
is tests/remote/serving/test_engine_serve.py::test_demo_closes_the_loop (it passes --baseline-url).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.cli import main as console_main
from remote.errors import PortInUse
from remote.link.transport import Transport
from remote.serving.serve import check_port_free
from tests.sshd_harness import Sshd, free_port


@pytest.fixture
def listening() -> Iterator[int]:
    """A port something listens on (as a forgotten server would) for the test's duration."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


async def test_free_port_passes_taken_port_names_itself_and_the_fix(transport: Transport,
                                                                    listening: int) -> None:
    await check_port_free(transport, sys.executable, f"http://127.0.0.1:{free_port()}",
                          "baseline", "box")
    url = f"http://127.0.0.1:{listening}"
    with pytest.raises(PortInUse) as err:
        await check_port_free(transport, sys.executable, url, "baseline", "box")
    text = str(err.value)
    assert f"port {listening} on box is in use" in text
    assert "--baseline-url" in text and "vllm_url's + 1" in text
    with pytest.raises(PortInUse, match=r"vllm_url in the host's \[hosts\.NAME\]"):
        await check_port_free(transport, sys.executable, url, "speculative", "box")
    # An address the box does not have is a different error, still before any launch.
    with pytest.raises(PortInUse, match=r"cannot listen on 192\.0\.2\.1:"):
        await check_port_free(transport, sys.executable, "http://192.0.2.1:8000", "baseline",
                              "box")


def _console_toml(tmp_path: Path, sshd: Sshd, port: int) -> Path:
    return sshd.console_toml(tmp_path / "console.toml", python=sys.executable,
                             workdir=tmp_path / "box", vllm_url=f"http://127.0.0.1:{port}")


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line the CLI printed (stderr, as the operator sees it)."""
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, lines
    return lines[0]


def test_run_serve_refuses_a_taken_baseline_port_before_the_pipeline(
        sshd: Sshd, tmp_path: Path, listening: int,
        capsys: pytest.CaptureFixture[str]) -> None:
    """vllm_url's port + 1 is taken: exit 2 naming the port and --baseline-url, and nothing
    was started on the box (no demo built, no job)."""
    toml = _console_toml(tmp_path, sshd, listening - 1)
    session = tmp_path / "s.jsonl"
    rc = console_main(["run", "--host", "box", "--config", str(toml), "--demo", "--serve",
                       "--session", str(session)])
    assert rc == 2
    message = _error(capsys)
    assert f"port {listening} on box is in use" in message
    assert "--baseline-url" in message
    assert not (tmp_path / "box" / "demo").exists()
    assert not (tmp_path / "box" / "jobs").exists() or not any((tmp_path / "box" / "jobs")
                                                               .iterdir())


def test_baseline_url_flag_moves_the_baseline_and_is_checked(
        sshd: Sshd, tmp_path: Path, listening: int,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The default baseline port is free but --baseline-url names a taken one: its port is the
    one reported. A malformed URL or the flag without --serve is a usage error at once."""
    toml = _console_toml(tmp_path, sshd, free_port())
    session = tmp_path / "s.jsonl"
    rc = console_main(["run", "--host", "box", "--config", str(toml), "--demo", "--serve",
                       "--baseline-url", f"http://127.0.0.1:{listening}",
                       "--session", str(session)])
    assert rc == 2
    message = _error(capsys)
    assert f"port {listening} on box is in use" in message
    assert not (tmp_path / "box" / "demo").exists()
    for bad in (["--serve", "--baseline-url", "127.0.0.1:8001"],
                ["--baseline-url", "http://127.0.0.1:8001"]):
        session = tmp_path / f"bad{len(bad)}.jsonl"
        rc = console_main(["run", "--host", "box", "--config", str(toml), "--demo", *bad,
                           "--session", str(session)])
        assert rc == 2
        message = _error(capsys)
        assert "--baseline-url" in message or "127.0.0.1:8001" in message
    # The request count per point is bench run's (--requests, default MIN_REQUESTS) or exactly
    # --rounds x concurrency: not both, and neither below 1.
    serve = ["run", "--host", "box", "--config", str(toml), "--demo", "--serve"]
    assert console_main([*serve, "--requests", "8", "--rounds", "2",
                         "--session", str(tmp_path / "count-both.jsonl")]) == 2
    assert "give one" in _error(capsys)
    assert console_main([*serve, "--requests", "0",  # refused by argparse (console/argtypes.py)
                         "--session", str(tmp_path / "count-zero.jsonl")]) == 2
    assert "argument --requests: '0' is not a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "box" / "demo").exists()
