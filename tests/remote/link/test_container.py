"""Container exec: argv construction, and the whole path (SSH -> podman-docker's `docker exec` ->
command, `docker cp`, detached jobs) end to end against the session's real container
(tests/container_fixture.py; more in tests/e2e/test_container_real.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import pytest

from remote.errors import ContainerError
from remote.jobs.client import Jobs
from remote.link.container import ContainerTransport, cp_into_argv, cp_out_argv, exec_argv
from remote.link.transport import Forward, Progress, RemoteProcess, Transport
from tests.container_fixture import DOCKER_BIN, Box
from tests.sshd_harness import Sshd

HOSTILE = ["a b", "it's", 'say "hi"', "x;y", "$(touch PWNED)", "`touch PWNED2`", "new\nline",
           "*", "-rf"]


def test_exec_argv_shapes() -> None:
    assert exec_argv("docker", "vllm", ["python3", "-V"]) == [
        "docker", "exec", "-i", "vllm", "python3", "-V"]
    assert exec_argv("podman", "c 1", ["ls"], env={"A": "1 2", "B": "$(x)"}) == [
        "podman", "exec", "-i", "-e", "A=1 2", "-e", "B=$(x)", "c 1", "ls"]
    assert cp_into_argv("docker", "c", "/tmp/f", "/opt/x y") == ["docker", "cp", "/tmp/f", "c:/opt/x y"]
    assert cp_out_argv("docker", "c", "/opt/f", "rel:name") == ["docker", "cp", "c:/opt/f", "./rel:name"]
    assert cp_out_argv("docker", "c", "/opt/f", "-x") == ["docker", "cp", "c:/opt/f", "./-x"]


@pytest.mark.parametrize("runtime,container,match", [
    ("kubectl", "c", "unknown container runtime 'kubectl'"),
    ("docker", "", "no container name"),
    ("docker", "--privileged", "starts with '-'"),
    ("docker", "a:b", "contains ':'"),
])
def test_bad_runtime_or_name_is_refused(runtime: str, container: str, match: str) -> None:
    with pytest.raises(ContainerError, match=match):
        exec_argv(runtime, container, ["true"])
    with pytest.raises(ContainerError, match=match):
        ContainerTransport(_Never(), runtime, container)


class _Never(Transport):
    name = "never"

    async def connect(self) -> None: raise AssertionError
    async def close(self) -> None: raise AssertionError
    @property
    def connected(self) -> bool: return False
    async def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
                    ) -> RemoteProcess: raise AssertionError
    async def put(self, local: Path, remote: str, progress: Progress | None = None) -> None:
        raise AssertionError
    async def get(self, remote: str, local: Path, progress: Progress | None = None) -> None:
        raise AssertionError
    async def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> Forward:
        raise AssertionError


@pytest.fixture
async def box(sshd: Sshd) -> AsyncIterator[Transport]:
    from remote.link import ssh
    t = ssh.SSHTransport(sshd.host_config())
    await t.connect()
    yield t
    await t.close()


@pytest.mark.ssh
async def test_commands_and_files_reach_the_container_verbatim(
        box: Transport, container_box: Box, tmp_path: Path) -> None:
    c = ContainerTransport(box, "docker", container_box.name, DOCKER_BIN)
    await c.connect()  # checks the runtime and that the container runs
    probe = "import json, os, sys; print(json.dumps([os.environ['K'], *sys.argv[1:]]))"
    done = await c.run([sys.executable, "-c", probe, *HOSTILE], env={"K": "v; $(x)"}, check=True)
    assert json.loads(done.stdout) == ["v; $(x)", *HOSTILE]
    src = tmp_path / "local file"
    src.write_text("payload\n")
    inside = str(tmp_path / "in container" / "it's $(here)")
    await c.put(src, inside)
    assert container_box.read_inside(inside) == "payload\n"
    assert not Path(inside).exists()  # in the container's layer, not on the host
    back = tmp_path / "back"
    await c.get(inside, back)
    assert back.read_text() == "payload\n"
    for root in (tmp_path, Path.home()):
        assert not list(root.glob("PWNED*"))
    assert not container_box.exists_inside(str(Path.home() / "PWNED"))


@pytest.mark.ssh
async def test_jobs_run_inside_the_container(box: Transport, container_box: Box,
                                             tmp_path: Path) -> None:
    c = ContainerTransport(box, "podman", container_box.name)
    await c.connect()
    jobs = Jobs(c, str(tmp_path / "wd"), host="box", python=sys.executable)
    info = await jobs.launch(["sh", "-c", 'echo "$1"; test -e /run/.containerenv && echo inside',
                              "sh", "a; $(b)"], name="in c")
    assert [x.text async for x in jobs.tail(info.run_id)] == ["a; $(b)", "inside"]
    assert (await jobs.wait(info.run_id)).returncode == 0
    assert not (tmp_path / "wd").exists() and container_box.exists_inside(str(tmp_path / "wd"))


@pytest.mark.ssh
async def test_a_hostile_container_name_is_only_a_name(box: Transport) -> None:
    name = "ml box; $(touch PWNED)"
    with pytest.raises(ContainerError, match=r"container 'ml box; \$\(touch PWNED\)' not found"):
        await ContainerTransport(box, "podman", name).connect()
    assert not list(Path.home().glob("PWNED*"))
