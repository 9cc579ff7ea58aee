from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sshd_harness import Sshd, sshd_available, start_sshd
from tests.tp2_engine import tp2_engine  # noqa: F401 (one real vLLM TP2 engine per session)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A real OpenSSH sshd on loopback for the whole test session. Without one the SSH tests
    fail: a run that skipped them would pass without its real parts."""
    reason = sshd_available()
    if reason:
        pytest.fail(reason, pytrace=False)
    daemon = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield daemon
    daemon.stop()


@pytest.fixture
def local_workdir(tmp_path: Path) -> Path:
    wd = tmp_path / "box"
    wd.mkdir()
    return wd


# The session's one real vLLM engine (tests/engine_fixture.py): any module may use these.
from tests.engine_fixture import engine_box, served_engine  # noqa: E402,F401
