from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from remote.link.transport import LocalTransport, Transport
from tests import tp2_engine as tp2
from tests.fleet_fixture import Fleet, start_fleet, stop_fleet
from tests.sshd_harness import Sshd, sshd_available, start_sshd
from tests.tp2_engine import tp2_engine  # noqa: F401 (one real vLLM TP2 engine per session)

_TP2_LAST_USER = pytest.StashKey[str | None]()

# Tests that share one running engine, and the xdist group that keeps them on one pytest worker
# (`make test`: -n 2 --dist loadgroup). With plain load distribution the served engine's users
# went to both workers: each worker started its own demo server, and each restarted it whenever
# one of its own tests between two users had released the box (one engine at a time per box);
# both workers also started the TP2 engine. A group runs on one worker back to back, in
# collection order: one start each. Every other test still goes to whichever worker is free.
ENGINE_GROUPS = {"served_engine": "served-engine", "tp2_engine": "tp2-engine"}


def pytest_itemcollected(item: pytest.Item) -> None:
    """Marked as collected: before any collection_modifyitems (xdist's reads the groups)."""
    for fixture, group in ENGINE_GROUPS.items():
        if fixture in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)  # after deselection (-k, -m): the tests that will really run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_TP2_LAST_USER] = tp2.last_user(items)


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """The session's TP2 engine stops once its last user has run (tests/tp2_engine.py)."""
    if item.nodeid == item.config.stash.get(_TP2_LAST_USER, None):
        tp2.stop_started()


@pytest.fixture(scope="session", autouse=True)
def own_laptop_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The consoles the tests start keep their laptop state, data and config apart from the
    operator's own: a run remembered in ~/.local/state made the TUI reattach on start and a test
    read another screen; every suite run left ~17 recorded sessions and a local-box in the
    operator's ~/.local/share/eagle3-console; an operator's ~/.config/eagle3-console/console.toml
    would have changed what the tests' consoles saw. Podman as root keeps its storage in
    /var/lib/containers whatever XDG_DATA_HOME says, so the session's container stays cached.
    (Tests that need a state of their own still set these themselves.) Yields the folder
    holding the three."""
    root = tmp_path_factory.mktemp("xdg")
    with pytest.MonkeyPatch.context() as mp:  # the session-wide twin of the monkeypatch fixture
        for var, sub in (("XDG_STATE_HOME", "state"), ("XDG_DATA_HOME", "data"),
                         ("XDG_CONFIG_HOME", "config")):
            (root / sub).mkdir()
            mp.setenv(var, str(root / sub))
        yield root


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


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three real sshd boxes on 127.0.0.2-4 (scripts/box_fleet.py), one per test session; box3
    runs the vLLM 0.16 environment (tests/fleet_fixture.py)."""
    reason = sshd_available()
    if reason:
        pytest.fail(reason, pytrace=False)
    boxes = start_fleet(tmp_path_factory.mktemp("fleet"))
    yield boxes
    stop_fleet(boxes)


@pytest.fixture(params=["local", "ssh"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    """The same test on this machine's local transport and over the real loopback sshd: what
    runs on a box must behave alike however the box is reached."""
    if request.param == "local":
        t: Transport = LocalTransport()
    else:
        from remote.link import ssh
        sshd: Sshd = request.getfixturevalue("sshd")
        t = ssh.SSHTransport(sshd.host_config())
    await t.connect()
    yield t
    await t.close()


@pytest.fixture
async def local_transport() -> AsyncIterator[LocalTransport]:
    """The host `local` as the console reaches it: this machine's own transport, connected."""
    t = LocalTransport("local")
    await t.connect()
    yield t
    await t.close()


@pytest.fixture
def local_workdir(tmp_path: Path) -> Path:
    wd = tmp_path / "box"
    wd.mkdir()
    return wd


# The session's one trained demo (tests/demo_fixture.py): test_pipeline_demo.py and engine_box;
# the session's one real vLLM engine (tests/engine_fixture.py): any module may use these.
# The session's one real container (tests/container_fixture.py, podman).
from tests.container_fixture import container_box  # noqa: E402,F401
from tests.demo_fixture import console_demo  # noqa: E402,F401
from tests.engine_fixture import engine_box, served_engine  # noqa: E402,F401
