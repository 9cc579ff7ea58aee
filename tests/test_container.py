"""Container exec: argv construction, and the whole path (SSH -> docker exec -> command, docker cp,
detached jobs) end to end with tests/doubles/docker, a test double of the docker CLI placed first
on the box's PATH (the real runtime cannot run here)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import pytest

from remote.jobs.client import Jobs
from remote.link.container import ContainerTransport, cp_into_argv, cp_out_argv, exec_argv
from remote.link.errors import ContainerError
from remote.link.transport import Forward, Progress, RemoteProcess, Transport
from tests.sshd_harness import Sshd

DOUBLES = Path(__file__).parent / "doubles"
HOSTILE = ["a b", "it's", 'say "hi"', "x;y", "$(touch PWNED)", "`touch PWNED2`", "new\nline",
           "*", "-rf"]


def test_exec_argv_shapes() -> None:
    assert exec_argv("docker", "vllm", ["python3", "-V"]) == [
        "docker", "exec", "-i", "vllm", "python3", "-V"]
    assert exec_argv("podman", "c 1", ["ls"], env={"A": "1 2", "B": "$(x)"}, workdir="/w d") == [
        "podman", "exec", "-i", "-w", "/w d", "-e", "A=1 2", "-e", "B=$(x)", "c 1", "ls"]
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


class OnPath(Transport):
    """Test double of a box whose PATH starts with `bindir` (where the docker double lives):
    every command runs as `env PATH=bindir:... argv`. Files and forwards pass through."""

    def __init__(self, inner: Transport, bindir: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.path = f"{bindir}:/usr/local/bin:/usr/bin:/bin"

    async def connect(self) -> None:
        await self.inner.connect()

    async def close(self) -> None:
        await self.inner.close()

    @property
    def connected(self) -> bool:
        return self.inner.connected

    async def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
                    ) -> RemoteProcess:
        return await self.inner.start(["env", f"PATH={self.path}", *argv], env=env)

    async def put(self, local: Path, remote: str, progress: Progress | None = None) -> None:
        await self.inner.put(local, remote, progress)

    async def get(self, remote: str, local: Path, progress: Progress | None = None) -> None:
        await self.inner.get(remote, local, progress)

    async def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> Forward:
        return await self.inner.forward(remote_port, remote_host)


@pytest.fixture
def bindir(tmp_path: Path) -> Path:
    d = tmp_path / "bin dir"
    d.mkdir()
    shutil.copy(DOUBLES / "docker", d / "docker")
    (d / "docker").chmod(0o755)
    (d / "containers.json").write_text(json.dumps({
        "ml box; $(touch PWNED)": {"running": True}, "stopped": {"running": False}}))
    return d


@pytest.fixture
async def box(sshd: Sshd, bindir: Path) -> AsyncIterator[Transport]:
    from remote.link import ssh
    t = OnPath(ssh.SSHTransport(sshd.host_config()), bindir)
    await t.connect()
    yield t
    await t.close()


def calls(bindir: Path) -> list[list[str]]:
    return [json.loads(line) for line in (bindir / "calls.jsonl").read_text().splitlines()]


@pytest.mark.ssh
async def test_commands_and_files_reach_the_container_verbatim(
        box: Transport, bindir: Path, tmp_path: Path) -> None:
    name = "ml box; $(touch PWNED)"
    c = ContainerTransport(box, "docker", name)
    await c.connect()  # checks the runtime and that the container runs
    probe = "import json, os, sys; print(json.dumps([os.environ['K'], *sys.argv[1:]]))"
    done = await c.run([sys.executable, "-c", probe, *HOSTILE], env={"K": "v; $(x)"}, check=True)
    assert json.loads(done.stdout) == ["v; $(x)", *HOSTILE]
    assert calls(bindir)[-1] == ["exec", "-i", "-e", "K=v; $(x)", name, sys.executable, "-c",
                                 probe, *HOSTILE]
    src = tmp_path / "local file"
    src.write_text("payload\n")
    inside = str(tmp_path / "in container" / "it's $(here)")
    await c.put(src, inside)
    assert Path(inside).read_text() == "payload\n"
    cp = calls(bindir)[-1]
    assert cp[0] == "cp" and cp[2] == f"{name}:{inside}" and cp[1].startswith("/tmp/")
    back = tmp_path / "back"
    await c.get(inside, back)
    assert back.read_text() == "payload\n"
    for root in (tmp_path, Path.home()):
        assert not list(root.glob("PWNED*"))


@pytest.mark.ssh
async def test_jobs_run_inside_the_container(box: Transport, bindir: Path, tmp_path: Path) -> None:
    name = "ml box; $(touch PWNED)"
    c = ContainerTransport(box, "docker", name)
    await c.connect()
    jobs = Jobs(c, str(tmp_path / "wd"), host="box", python=sys.executable)
    info = await jobs.launch(["sh", "-c", 'echo "$1"; echo done', "sh", "a; $(b)"], name="in c")
    assert [x.text async for x in jobs.tail(info.run_id)] == ["a; $(b)", "done"]
    assert (await jobs.wait(info.run_id)).returncode == 0
    assert any(call[:4] == ["exec", "-i", name, sys.executable] and call[-1] == "serve"
               for call in calls(bindir))  # launch went through the helper session in it
    assert any(call[:4] == ["exec", "-i", name, sys.executable] and "tail" in call
               for call in calls(bindir))


@pytest.mark.ssh
async def test_missing_container_or_runtime_is_named(box: Transport) -> None:
    with pytest.raises(ContainerError, match=r"container 'nope' not found on box.*No such object"):
        await ContainerTransport(box, "docker", "nope").connect()
    with pytest.raises(ContainerError, match="container 'stopped' on box is not running"):
        await ContainerTransport(box, "docker", "stopped").connect()

@pytest.mark.ssh
async def test_missing_runtime_is_named(sshd: Sshd, bindir: Path, tmp_path: Path) -> None:
    """A box whose PATH holds only `sh` and the docker double: podman is missing there whether
    or not this machine has one, so the check runs on every machine."""
    from remote.link import ssh
    only_sh = tmp_path / "only-sh"
    only_sh.mkdir()
    (only_sh / "sh").symlink_to("/bin/sh")
    t = OnPath(ssh.SSHTransport(sshd.host_config()), bindir)
    t.path = f"{bindir}:{only_sh}"
    await t.connect()
    try:
        with pytest.raises(ContainerError, match="container runtime 'podman' not found on box"):
            await ContainerTransport(t, "podman", "x").connect()
    finally:
        await t.close()
