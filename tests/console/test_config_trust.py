"""Config values are validated where they are read: the file, the key and the problem named,
exit 2 — never an OverflowError from a connect, a port 0 that silently becomes 22, or a nan
timeout that waits forever."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.cli import main
from remote.errors import EXIT_USAGE
from remote.link.hosts import parse_config
from tests.config_errors import assert_config_error

BASE = '[hosts.box]\nssh = "ops@gpu-box"\n'


@pytest.mark.parametrize(("extra", "key", "problem"), [
    ("port = 70000", "hosts.box.port", "out of range: must be a TCP port, 1..65535"),
    ("port = 0", "hosts.box.port", "out of range"),
    ("port = -22", "hosts.box.port", "out of range"),
    ("connect_timeout = nan", "hosts.box.connect_timeout", "nan is not a number"),
    ("connect_timeout = inf", "hosts.box.connect_timeout", "inf is not a number"),
    ("connect_timeout = 0", "hosts.box.connect_timeout", "out of range"),
    ("connect_timeout = -3", "hosts.box.connect_timeout", "out of range"),
    ("keepalive_interval = nan", "hosts.box.keepalive_interval", "not a number"),
    ("keepalive_interval = -1", "hosts.box.keepalive_interval", "out of range"),
    ('vllm_url = "ftp://box/"', "hosts.box.vllm_url", "must be http"),
    ('vllm_url = "http://127.0.0.1:99999"', "hosts.box.vllm_url", "not a valid URL"),
    ('vllm_url = "127.0.0.1:8000"', "hosts.box.vllm_url", "must be http"),
    ('workdir = "/data/x\\ny"', "hosts.box.workdir", "control character"),
    ('identity_file = ""', "hosts.box.identity_file", "non-empty string"),
    ('user = "ops\\u001b[2J"', "hosts.box.user", "control character"),
])
def test_bad_values_name_file_key_and_problem(extra: str, key: str, problem: str) -> None:
    assert_config_error(BASE + extra + "\n", key, problem, "/etc/c.toml")


def test_good_edges_still_parse() -> None:
    cfg = parse_config(BASE + "port = 65535\nkeepalive_interval = 0\nconnect_timeout = 2.5\n"
                       'vllm_url = "https://box:8443/v1"\n', "c.toml")
    assert cfg.hosts["box"].ssh_options == {"port": 65535, "keepalive_interval": 0.0,
                                            "connect_timeout": 2.5}


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
