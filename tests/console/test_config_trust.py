"""A refused config value through the CLI: one line naming the file, the key and the problem,
exit 2, no traceback (each refusal's wording: tests/remote/link/test_hosts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.cli import main
from remote.errors import EXIT_USAGE

BASE = '[hosts.box]\nssh = "ops@gpu-box"\n'


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    lines = [x for x in cap.err.splitlines() if x.strip()]
    assert len(lines) == 1, cap.err
    return lines[0]


def test_port_70000_through_the_cli_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "console.toml").write_text(BASE + "port = 70000\n")
    assert main(["probe", "env", "--host", "box", "--no-record"]) == EXIT_USAGE
    line = _one_line_error(capsys)
    assert "console.toml: hosts.box.port: 70000 is out of range" in line


def test_missing_identity_file_names_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    key = tmp_path / "keys" / "id_missing"
    (tmp_path / "console.toml").write_text(
        BASE.replace("ops@gpu-box", "ops@127.0.0.1") + f'identity_file = "{key}"\n')
    assert main(["probe", "env", "--host", "box", "--no-record"]) == EXIT_USAGE
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out
    text = cap.out + cap.err
    assert "hosts.box.identity_file" in text and f"identity file {key} not found" in text
