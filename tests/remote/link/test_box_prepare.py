"""The box-side preparation before any work: a workdir starting with `-` is a directory, never a
python option; a connection dropped while the workdir is prepared before a launch is retried
(resolve and content-hashed upload are idempotent), over the real loopback sshd."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from console.cli import main
from remote.errors import EXIT_OK
from remote.jobs.client import Jobs
from remote.link import ssh
from tests.patchbox import make_site_packages
from tests.sshd_harness import Sshd


def test_a_workdir_starting_with_a_dash(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "console.toml").write_text('[hosts.local]\nworkdir = "-wd"\n')
    sp = make_site_packages(tmp_path, vllm=False)
    for argv in (["probe", "env"], ["stats", "--once"], ["patch", "plan", "--site-packages", str(sp)],
                 ["jobs", "launch", "--name", "t", "--", sys.executable, "-c", "print('hi')"]):
        cut = 2 if argv[0] == "probe" else 1  # a probe's options follow its name
        rc = main([*argv[:cut], "--host", "local", *argv[cut:], "--no-record", "--json"]
                  if argv[0] != "jobs" else
                  ["jobs", "--host", "local", "launch", "--no-record", *argv[2:]])
        out = capsys.readouterr()
        assert rc == EXIT_OK, (argv, out.out[-800:], out.err[-800:])
        assert "python -h" not in out.out + out.err
    wd = tmp_path / "-wd"
    assert (wd / "probes" / "env_probe.py").is_file()
    assert (wd / "probes" / "sampler.py").is_file()
    assert (wd / "probes" / "patch_helper.py").is_file()
    assert any(wd.joinpath("runs").iterdir())


@pytest.mark.ssh
async def test_drop_while_preparing_the_workdir_is_retried(sshd: Sshd, tmp_path: Path) -> None:
    """The box's python, on its first call (the workdir resolve before a launch), drops the SSH
    connection it runs in, as a network cut would: the launch still happens, once."""
    mark = tmp_path / "dropped-once"
    box_python = tmp_path / "python-that-drops"
    box_python.write_text(
        "#!/bin/sh\n"
        f'if [ ! -e "{mark}" ]; then touch "{mark}"; pkill -KILL -P {sshd.proc.pid}; sleep 5; fi\n'
        f'exec {sys.executable} "$@"\n')
    box_python.chmod(0o755)
    t = ssh.SSHTransport(sshd.host_config("box"))
    await t.connect()
    try:
        jobs = Jobs(t, str(tmp_path / "box"), host="box", python=str(box_python))
        info = await jobs.launch([sys.executable, "-c", "print('once')"], name="after-drop")
        done = await jobs.wait(info.run_id)
        await jobs.close()
    finally:
        await t.close()
    assert mark.exists() and t.reconnects >= 1
    assert done.returncode == 0
    runs = list((tmp_path / "box" / "runs").iterdir())
    assert [r.name for r in runs] == [info.run_id]
