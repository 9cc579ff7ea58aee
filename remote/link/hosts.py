"""Named hosts from console.toml, plus the built-in `local` host that needs no config.

A host says how to reach the box (an SSH target resolved through ~/.ssh/config) and where work
happens on it (container, python, workdir, vLLM URL). Everything else in the console takes a
HostConfig, never raw strings.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import platformdirs

from remote.errors import ConfigError

APP_NAME = "eagle3-console"
CONFIG_NAME = "console.toml"
LOCAL = "local"
RUNTIMES = ("docker", "podman", "none")


@dataclass(frozen=True, slots=True)
class HostConfig:
    name: str
    ssh: str | None = None  # None: this machine (the console runs on the box itself)
    runtime: str = "none"
    container: str | None = None
    # The runtime's binary when it is not `runtime` on PATH (podman-docker's /usr/bin/docker
    # where /usr/local/bin/docker is a client without an engine).
    runtime_bin: str | None = None
    python: str = "python3"
    workdir: str = "~/eagle3"
    vllm_url: str = "http://127.0.0.1:8000"
    # Seconds between two live stats samples in the TUI (`stats_interval` in console.toml):
    # 10 a second by default, the sampler's floor (remote/stats/limits.py MIN_INTERVAL).
    stats_interval: float = 0.1
    # Options passed to the SSH transport (port, user, identity, known_hosts, ssh_config ...).
    ssh_options: dict[str, Any] = field(default_factory=dict)
    source: str = "<built-in>"

    @property
    def is_local(self) -> bool:
        return self.ssh is None


def default_local(workdir: str | None = None) -> HostConfig:
    """Runs on this machine with this interpreter: the demo target and the test default."""
    import sys

    wd = workdir or str(Path(platformdirs.user_data_dir(APP_NAME)) / "local-box")
    return HostConfig(name=LOCAL, ssh=None, python=sys.executable, workdir=wd)


@dataclass(slots=True)
class Config:
    hosts: dict[str, HostConfig]
    path: Path | None
    # [console] auto_reattach: at start the TUI reconnects to the hosts where this laptop
    # started or followed a pipeline run (remote/jobs/remembered.py).
    auto_reattach: bool = True
    # [groups] NAME = ["a", "b"]: kept as written; members are checked when a command resolves
    # the group (remote/link/groups.py), so one bad member costs one line, not the whole fleet.
    groups: dict[str, list[str]] = field(default_factory=dict)
    # [alerts]: the thresholds of the stats alert rules, as written (ALERT_KEYS); the stream
    # builds remote/stats/alerts.py's AlertConfig from them (link/ sits below stats/)
    alerts: dict[str, float] = field(default_factory=dict)

    def host(self, name: str) -> HostConfig:
        if name in self.hosts:
            return self.hosts[name]
        if name == LOCAL:
            return default_local()
        known = ", ".join(sorted({*self.hosts, LOCAL}))
        where = str(self.path) if self.path else "no console.toml found"
        raise ConfigError(where, f"hosts.{name}", f"no such host (known: {known})")


def config_search_path() -> list[Path]:
    return [Path.cwd() / CONFIG_NAME, Path(platformdirs.user_config_dir(APP_NAME)) / CONFIG_NAME]


def find_config(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(str(path), None, "config file not found")
        return path
    for candidate in config_search_path():
        if candidate.is_file():
            return candidate
    return None


_STR_KEYS = ("ssh", "runtime", "container", "runtime_bin", "python", "workdir", "vllm_url")
_SSH_OPTION_KEYS = {
    "port": int,
    "user": str,
    "identity_file": str,
    "known_hosts": str,
    "ssh_config": str,
    "keepalive_interval": float,
    "connect_timeout": float,
}


def parse_config(text: str, source: str) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, None, f"invalid TOML: {exc}") from None
    hosts_table = data.get("hosts", {})
    if not isinstance(hosts_table, dict):
        raise ConfigError(source, "hosts", "must be a table of named hosts ([hosts.NAME])")
    unknown_top = set(data) - {"hosts", "console", "groups", "alerts"}
    if unknown_top:
        raise ConfigError(source, sorted(unknown_top)[0], "unknown top-level key")
    hosts: dict[str, HostConfig] = {}
    for name, table in hosts_table.items():
        hosts[name] = _parse_host(name, table, source)
    return Config(hosts=hosts, path=Path(source) if source != "<string>" else None,
                  groups=parse_groups(data.get("groups", {}), hosts, source),
                  alerts=_alert_settings(data.get("alerts", {}), source),
                  **_console_settings(data.get("console", {}), source))


def parse_groups(table: Any, hosts: dict[str, HostConfig], source: str) -> dict[str, list[str]]:
    if not isinstance(table, dict):
        raise ConfigError(source, "groups", "must be a table ([groups] NAME = [\"host\", ...])")
    groups: dict[str, list[str]] = {}
    for name, members in table.items():
        key = f"groups.{name}"
        if name in hosts or name == "local":
            raise ConfigError(source, key, "a group and a host cannot share a name")
        if "," in name:
            raise ConfigError(source, key, "a group name cannot contain ','")
        if not isinstance(members, list) or not members:
            raise ConfigError(source, key, "must be a non-empty list of host names")
        for m in members:
            if not isinstance(m, str) or not m or "," in m:
                raise ConfigError(source, key, f"{m!r} is not a host name")
        groups[name] = list(dict.fromkeys(members))
    return groups


def _console_settings(table: Any, source: str) -> dict[str, Any]:
    """The [console] table: settings of the console itself, not of a host."""
    if not isinstance(table, dict):
        raise ConfigError(source, "console", "must be a table ([console])")
    for k, v in table.items():
        if k != "auto_reattach":
            raise ConfigError(source, f"console.{k}", "unknown key (allowed: auto_reattach)")
        if not isinstance(v, bool):
            raise ConfigError(source, f"console.{k}", "must be true or false")
    return {"auto_reattach": table.get("auto_reattach", True)}


# The [alerts] keys: remote/stats/alerts.py's AlertConfig fields (a test holds them equal).
ALERT_KEYS = ("brake_seconds", "stall_minutes")


def _alert_settings(table: Any, source: str) -> dict[str, float]:
    """The [alerts] table: each key a positive number (seconds, minutes), as AlertConfig names it."""
    if not isinstance(table, dict):
        raise ConfigError(source, "alerts", "must be a table ([alerts])")
    for k, v in table.items():
        if k not in ALERT_KEYS:
            raise ConfigError(source, f"alerts.{k}",
                              f"unknown key (allowed: {', '.join(ALERT_KEYS)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
            raise ConfigError(source, f"alerts.{k}", f"must be a positive number (got {v!r})")
    return {k: float(v) for k, v in table.items()}


def _parse_host(name: str, table: Any, source: str) -> HostConfig:
    key = f"hosts.{name}"
    if not isinstance(table, dict):
        raise ConfigError(source, key, "must be a table")
    allowed = set(_STR_KEYS) | set(_SSH_OPTION_KEYS) | {"stats_interval"}
    for k in table:
        if k not in allowed:
            raise ConfigError(source, f"{key}.{k}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
    values: dict[str, Any] = {}
    for k in _STR_KEYS:
        if k in table:
            if not isinstance(table[k], str) or not table[k]:
                raise ConfigError(source, f"{key}.{k}", "must be a non-empty string")
            _check_text(source, f"{key}.{k}", table[k])
            values[k] = table[k]
    if "vllm_url" in values:
        _check_url(source, f"{key}.vllm_url", values["vllm_url"])
    if "stats_interval" in table:  # seconds between live stats samples (0.1: the sampler's floor)
        v = table["stats_interval"]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(source, f"{key}.stats_interval",
                              "must be a number of seconds (0.1 .. 3600)")
        _check_option(source, f"{key}.stats_interval", "stats_interval", v)
        values["stats_interval"] = float(v)
    ssh_options: dict[str, Any] = {}
    for k, typ in _SSH_OPTION_KEYS.items():
        if k in table:
            v = table[k]
            if typ is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if not isinstance(v, typ) or isinstance(v, bool):
                raise ConfigError(source, f"{key}.{k}", f"must be {typ.__name__}")
            _check_option(source, f"{key}.{k}", k, v)
            ssh_options[k] = v
    if name == LOCAL and "ssh" in values:
        raise ConfigError(source, f"{key}.ssh", "'local' is the built-in host; name an SSH host differently")
    if "ssh" not in values and ssh_options:
        first = sorted(ssh_options)[0]
        raise ConfigError(source, f"{key}.{first}", "an SSH option on a host without ssh (a "
                          "host without `ssh` runs on this machine)")
    runtime = values.get("runtime", "none")
    if runtime not in RUNTIMES:
        raise ConfigError(source, f"{key}.runtime", f"{runtime!r} is not one of {', '.join(RUNTIMES)}")
    if runtime != "none" and "container" not in values:
        raise ConfigError(source, f"{key}.container", f"required when runtime is {runtime}")
    if runtime == "none" and "container" in values:
        raise ConfigError(source, f"{key}.runtime", "a container is named but runtime is 'none' (use docker or podman)")
    if runtime == "none" and "runtime_bin" in values:
        raise ConfigError(source, f"{key}.runtime_bin", "set but runtime is 'none'")
    if "runtime_bin" in values and not values["runtime_bin"].startswith("/"):
        raise ConfigError(source, f"{key}.runtime_bin", "must be an absolute path on the box")
    if "ssh" not in values:  # this machine: like `local`, this interpreter by default
        base = default_local(values.get("workdir") if name == LOCAL else
                             values.get("workdir", str(Path(default_local().workdir).parent / name)))
        values.setdefault("python", base.python)
        values.setdefault("workdir", base.workdir)
    return HostConfig(name=name, ssh_options=ssh_options, source=source, **values)


# Ranges of the SSH options and stats_interval: a value out of range is refused here, with its
# key, rather than failing deep inside a connect (OverflowError for port 70000) or silently
# meaning something else (port 0 became 22; a nan timeout waits forever).
_RANGES: dict[str, tuple[float, float, str]] = {
    "port": (1, 65535, "a TCP port, 1..65535"),
    "keepalive_interval": (0, 86400, "seconds, 0 (off) .. 86400"),
    "connect_timeout": (0.1, 3600, "seconds, 0.1 .. 3600"),
    "stats_interval": (0.1, 3600, "seconds, 0.1 .. 3600"),
}


def _check_option(source: str, key: str, name: str, value: Any) -> None:
    if isinstance(value, str):
        if not value:
            raise ConfigError(source, key, "must be a non-empty string")
        _check_text(source, key, value)
        return
    if name not in _RANGES:
        return
    low, high, what = _RANGES[name]
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(source, key, f"{value} is not a number of {what}")
    if not low <= value <= high:
        raise ConfigError(source, key, f"{value} is out of range: must be {what}")


def _check_text(source: str, key: str, value: str) -> None:
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise ConfigError(source, key, f"contains the control character {bad!r}")


def _check_url(source: str, key: str, value: str) -> None:
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError as exc:
        raise ConfigError(source, key, f"{value!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(source, key, f"{value!r} must be http://HOST[:PORT] or https://...")
    if port == 0:
        raise ConfigError(source, key, f"{value!r}: port 0 is not a port")


def load_config(explicit: str | os.PathLike[str] | None = None) -> Config:
    path = find_config(explicit)
    if path is None:
        return Config(hosts={}, path=None)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), None, f"cannot read: {exc}") from None
    return parse_config(text, str(path))


def all_hosts(cfg: Config) -> list[HostConfig]:
    hosts = dict(cfg.hosts)
    hosts.setdefault(LOCAL, default_local())
    return [hosts[k] for k in sorted(hosts, key=lambda n: (n != LOCAL, n))]
