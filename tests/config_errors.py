"""One check for a refused console.toml, shared by the config tests of remote/link/hosts.py
(tests/remote/link/test_hosts.py: the structure) and of its values (tests/console/
test_config_trust.py): the error names the file, the key and the problem, exit code 2."""

from __future__ import annotations

import pytest

from remote.errors import EXIT_USAGE, ConfigError
from remote.link.hosts import parse_config


def assert_config_error(text: str, key: str, problem: str, file: str = "/etc/console.toml"
                        ) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, file)
    err = info.value
    assert err.file == file and err.key == key
    assert problem in err.problem, err.problem
    assert str(err).startswith(f"{file}: {key}: ")
    assert err.exit_code == EXIT_USAGE
    return err
