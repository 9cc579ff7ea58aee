from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from remote.errors import RemoteCommandError
from remote.link.argv import shell_join, with_env
from remote.link.transport import LocalTransport
from remote.link.upload import upload

HOSTILE = ["a b", "it's", 'say "hi"', "x; touch PWNED", "$(touch PWNED)", "`touch PWNED`",
           "line1\nline2", "*", "-n", ""]


async def test_run_returns_status_and_output() -> None:
    async with LocalTransport() as t:
        done = await t.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
        with pytest.raises(RemoteCommandError, match="exited 3: err"):
            done.check()
        assert (await t.run(["cat"], input="piped\n")).stdout == "piped\n"
        assert (await t.run(["sh", "-c", "echo $FOO"], env={"FOO": "b a r"})).stdout == "b a r\n"


async def test_hostile_arguments_arrive_verbatim_and_run_nothing(tmp_path: Path) -> None:
    async with LocalTransport() as t:
        argv = ["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *HOSTILE]
        import json

        # run in tmp_path, the directory a positional parameter of the shell, not spliced in
        in_dir = ["sh", "-c", 'cd -- "$1" && shift && exec "$@"', "sh", str(tmp_path), *argv]
        done = await t.run(in_dir, check=True)
        assert json.loads(done.stdout) == HOSTILE
        # the same argv through one shell (as SSH does) is just as inert
        done = await t.run(["sh", "-c", shell_join(argv)], check=True)
        assert json.loads(done.stdout) == HOSTILE
    assert not (tmp_path / "PWNED").exists()
    assert not Path("PWNED").exists()


def test_argv_helpers_refuse_bad_input() -> None:
    with pytest.raises(ValueError):
        shell_join([])
    with pytest.raises(ValueError):
        shell_join(["a\x00b"])
    with pytest.raises(TypeError):
        shell_join(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        with_env(["true"], {"A=B": "x"})
    assert with_env(["true"], {"K": "v w"}) == ["env", "K=v w", "true"]


async def test_streaming_lines_interleave_both_streams() -> None:
    async with LocalTransport() as t:
        proc = await t.start(["sh", "-c", "for i in 1 2 3; do echo o$i; echo e$i >&2; done"])
        await proc.close_stdin()
        lines = [(ln.stream, ln.text) async for ln in proc.lines()]
        assert await proc.wait() == 0
        assert [x for s, x in lines if s == "stdout"] == ["o1", "o2", "o3"]
        assert [x for s, x in lines if s == "stderr"] == ["e1", "e2", "e3"]


async def test_put_get_and_content_hashed_upload(tmp_path: Path) -> None:
    src = tmp_path / "src.py"
    src.write_text("print('v1')\n")
    dest = tmp_path / "box" / "probes" / "src.py"
    async with LocalTransport() as t:
        assert await upload(t, src, str(dest)) is True
        assert dest.read_text() == "print('v1')\n"
        assert await upload(t, src, str(dest)) is False  # unchanged: not sent again
        src.write_text("print('v2')\n")
        assert await upload(t, src, str(dest)) is True
        back = tmp_path / "back.py"
        await t.get(str(dest), back)
        assert back.read_text() == "print('v2')\n"
        fwd = await t.forward(8000)
        assert fwd.local_port == 8000


async def test_upload_expands_tilde_on_the_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    src = tmp_path / "probe.py"
    src.write_text("x = 1\n")
    async with LocalTransport() as t:
        assert await upload(t, src, "~/eagle3/probes/probe.py") is True
        assert (tmp_path / "home" / "eagle3" / "probes" / "probe.py").read_text() == "x = 1\n"
        assert await upload(t, src, "~/eagle3/probes/probe.py") is False
        assert not Path("~").exists()


async def test_run_survives_a_command_that_ignores_its_input() -> None:
    async with LocalTransport() as t:
        done = await t.run(["true"], input=b"x" * (1 << 20))
        assert done.returncode == 0


async def test_close_ends_the_processes_it_started_like_an_ssh_disconnect() -> None:
    t = LocalTransport()
    await t.connect()
    reader = await t.start(["cat"])  # waits for EOF on stdin, as the console's helpers do
    stubborn = await t.start(["python3", "-c", "import os, time; os.close(0); time.sleep(60)"])
    await t.close()
    assert await asyncio.wait_for(reader.wait(), 5) == 0
    assert await asyncio.wait_for(stubborn.wait(), 5) != 0  # killed after the grace period
