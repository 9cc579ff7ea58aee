"""CI cannot go green without its real parts: a missing sshd, a failed install of it, or a
project module that does not import fails the run instead of turning into skips."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
pytest_plugins = ["pytester"]


def test_no_importorskip_of_the_projects_own_modules() -> None:
    own = re.compile(r"importorskip\(\s*[\"'](console|remote|pipeline|tests)\b")
    found = [f"{p.name}:{n}" for p in sorted(TESTS.rglob("*.py")) if p.name != Path(__file__).name
             for n, line in enumerate(p.read_text().splitlines(), 1) if own.search(line)]
    assert found == [], f"a broken module would become skips: {found}"


def test_no_test_skips_on_a_missing_part() -> None:
    """No skip of any kind in tests/: a part a test needs is installed by `make test` (sshd,
    tmux, wheels, engine environments) or the test fails saying what is missing."""
    skip = re.compile(r"pytest\.skip\(|mark\.skipif|importorskip\(|mark\.skip\b")
    found = [f"{p.name}:{n}" for p in sorted(TESTS.rglob("*.py")) if p.name != Path(__file__).name
             for n, line in enumerate(p.read_text().splitlines(), 1) if skip.search(line)]
    assert found == [], f"tests that skip instead of failing: {found}"


@pytest.mark.parametrize("as_root", [True, False])
def test_ensure_tools_fails_when_it_cannot_install(tmp_path: Path, as_root: bool) -> None:
    bindir = tmp_path / "bin"  # the whole PATH: no tmux on it
    bindir.mkdir()
    _fake_bin(bindir, "apt-get", 'echo "E: Unable to locate package tmux" >&2; exit 100')
    _fake_bin(bindir, "id", f'echo {0 if as_root else 1000}')
    proc = subprocess.run(["/bin/bash", str(REPO / "scripts" / "ensure-tools.sh")],
                          env={**os.environ, "PATH": str(bindir)}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0, proc.stderr
    assert "error:" in proc.stderr and "tmux" in proc.stderr


def test_missing_real_parts_fail_rather_than_skip() -> None:
    """The fixture and helpers that stand for real parts (sshd, wheels, engine environments)."""
    for name in ("conftest.py", "wheels.py", "box_env.py", "test_sshd_harness.py"):
        text = next(TESTS.rglob(name)).read_text()
        assert "pytest.skip(" not in text, f"{name} skips when a real part is missing"


def test_sshd_fixture_fails_without_sshd(pytester: pytest.Pytester,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAGLE3_SSHD", str(pytester.path / "no-such-sshd"))
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    pytester.makeconftest("from tests.conftest import sshd  # noqa: F401\n")
    pytester.makepyfile(test_uses_sshd=textwrap.dedent("""
        def test_needs_it(sshd):
            assert sshd.port > 0
    """))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1 and "skipped" not in outcomes, outcomes
    result.stdout.fnmatch_lines(["*OpenSSH sshd not installed*"])


def _fake_bin(d: Path, name: str, script: str) -> None:
    f = d / name
    f.write_text("#!/bin/sh\n" + script + "\n")
    f.chmod(f.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("as_root", [True, False])
def test_ensure_sshd_fails_when_it_cannot_install(tmp_path: Path, as_root: bool) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_bin(bindir, "apt-get", 'echo "E: Unable to locate package openssh-server" >&2; exit 100')
    _fake_bin(bindir, "id", f'echo {0 if as_root else 1000}')
    env = {**os.environ, "PATH": f"{bindir}:/usr/bin:/bin", "EAGLE3_SSHD": str(tmp_path / "sshd")}
    proc = subprocess.run([str(REPO / "scripts" / "ensure-sshd.sh")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stderr
    assert "error:" in proc.stderr


def test_ensure_sshd_passes_with_an_sshd(tmp_path: Path) -> None:
    _fake_bin(tmp_path, "sshd", "exit 0")
    env = {**os.environ, "EAGLE3_SSHD": str(tmp_path / "sshd")}
    proc = subprocess.run([str(REPO / "scripts" / "ensure-sshd.sh")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
