from __future__ import annotations

from pathlib import Path

import pytest

from remote.errors import EXIT_USAGE, ConfigError
from remote.link.hosts import LOCAL, find_config, load_config, parse_config

GOOD = """
[hosts.kimi]
ssh = "ops@gpu-box"
runtime = "docker"
container = "vllm-server"
python = "/usr/bin/python3"
workdir = "/data/eagle3"
vllm_url = "http://127.0.0.1:8000"
port = 2222
keepalive_interval = 15
"""


def test_parse_good_config() -> None:
    cfg = parse_config(GOOD, "console.toml")
    h = cfg.host("kimi")
    assert (h.ssh, h.runtime, h.container, h.workdir) == (
        "ops@gpu-box", "docker", "vllm-server", "/data/eagle3")
    assert h.ssh_options == {"port": 2222, "keepalive_interval": 15.0}
    assert not h.is_local
    local = cfg.host(LOCAL)
    assert local.is_local and local.runtime == "none"


def test_a_host_without_ssh_is_this_machine_and_may_name_its_container() -> None:
    """The console running on the box itself: no ssh, the container through its runtime."""
    cfg = parse_config("[hosts.onbox]\nruntime = 'docker'\ncontainer = 'vllm'\n"
                       "runtime_bin = '/usr/bin/docker'\npython = '/opt/venv/bin/python'\n",
                       "/etc/console.toml")
    h = cfg.host("onbox")
    assert h.is_local and (h.runtime, h.container, h.runtime_bin) == (
        "docker", "vllm", "/usr/bin/docker")
    assert h.python == "/opt/venv/bin/python" and h.workdir.endswith("onbox")


BOX = '[hosts.box]\nssh = "ops@gpu-box"\n'


@pytest.mark.parametrize(("text", "key", "problem"), [
    # the structure
    ("[hosts.a]\nssh = 'x'\nruntime = 'lxc'\n", "hosts.a.runtime", "not one of"),
    ("[hosts.a]\nssh = 'x'\nruntime = 'docker'\n", "hosts.a.container", "required"),
    ("[hosts.a]\nworkdir = '/w'\nport = 22\n", "hosts.a.port", "host without ssh"),
    ("[hosts.a]\nssh = 'x'\nruntime_bin = '/usr/bin/docker'\n", "hosts.a.runtime_bin", "runtime is 'none'"),
    ("[hosts.a]\nruntime = 'docker'\ncontainer = 'c'\nruntime_bin = 'docker'\n", "hosts.a.runtime_bin",
     "absolute path"),
    ("[hosts.a]\nssh = 'x'\nprot = 22\n", "hosts.a.prot", "unknown key"),
    ("[hosts.a]\nssh = 'x'\nport = 'ssh'\n", "hosts.a.port", "must be int"),
    ("[hosts.a]\nssh = ''\n", "hosts.a.ssh", "non-empty"),
    ("hosts = 3\n", "hosts", "table"),
    ("[hostz.a]\n", "hostz", "unknown top-level"),
    ("[hosts.local]\nssh = 'x'\n", "hosts.local.ssh", "built-in"),
    # the values: never an OverflowError from a connect, a port 0 that silently becomes 22, or a
    # nan timeout that waits forever
    (BOX + "port = 70000", "hosts.box.port", "out of range: must be a TCP port, 1..65535"),
    (BOX + "port = 0", "hosts.box.port", "out of range"),
    (BOX + "port = -22", "hosts.box.port", "out of range"),
    (BOX + "connect_timeout = nan", "hosts.box.connect_timeout", "nan is not a number"),
    (BOX + "connect_timeout = inf", "hosts.box.connect_timeout", "inf is not a number"),
    (BOX + "connect_timeout = 0", "hosts.box.connect_timeout", "out of range"),
    (BOX + "connect_timeout = -3", "hosts.box.connect_timeout", "out of range"),
    (BOX + "keepalive_interval = nan", "hosts.box.keepalive_interval", "not a number"),
    (BOX + "keepalive_interval = -1", "hosts.box.keepalive_interval", "out of range"),
    (BOX + 'vllm_url = "ftp://box/"', "hosts.box.vllm_url", "must be http"),
    (BOX + 'vllm_url = "http://127.0.0.1:99999"', "hosts.box.vllm_url", "not a valid URL"),
    (BOX + 'vllm_url = "127.0.0.1:8000"', "hosts.box.vllm_url", "must be http"),
    (BOX + 'workdir = "/data/x\\ny"', "hosts.box.workdir", "control character"),
    (BOX + 'identity_file = ""', "hosts.box.identity_file", "non-empty string"),
    (BOX + 'user = "ops\\u001b[2J"', "hosts.box.user", "control character"),
])
def test_config_errors_name_file_key_and_problem(text: str, key: str, problem: str) -> None:
    """A refused console.toml: the error names the file, the key and the problem, exit code 2."""
    with pytest.raises(ConfigError) as info:
        parse_config(text, "/etc/console.toml")
    err = info.value
    assert (err.file, err.key, err.exit_code) == ("/etc/console.toml", key, EXIT_USAGE)
    assert problem in err.problem, err.problem
    assert str(err).startswith(f"/etc/console.toml: {key}: ")


def test_good_edges_still_parse() -> None:
    cfg = parse_config(BOX + "port = 65535\nkeepalive_interval = 0\nconnect_timeout = 2.5\n"
                       'vllm_url = "https://box:8443/v1"\n', "c.toml")
    assert cfg.hosts["box"].ssh_options == {"port": 65535, "keepalive_interval": 0.0,
                                            "connect_timeout": 2.5}


def test_invalid_toml_names_the_file() -> None:
    with pytest.raises(ConfigError, match=r"^x.toml: invalid TOML"):
        parse_config("[hosts.a\n", "x.toml")


def test_unknown_host_lists_known_ones() -> None:
    cfg = parse_config(GOOD, "console.toml")
    with pytest.raises(ConfigError, match=r"hosts.nope: no such host \(known: kimi, local\)"):
        cfg.host("nope")


def test_lookup_order_cwd_then_user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert find_config() is None
    user = tmp_path / "xdg" / "eagle3-console" / "console.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[hosts.u]\nssh = 'u@h'\n")
    assert find_config() == user
    (tmp_path / "console.toml").write_text(GOOD)
    assert find_config() == tmp_path / "console.toml"
    assert set(load_config().hosts) == {"kimi"}
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")
