"""The patcher over the real loopback sshd: the helper is uploaded over SFTP and every file
operation runs on the far side. Acceptance: apply then rollback restores the wheel's sha256."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.cli import main
from remote.errors import EXIT_OK, Refused
from remote.link.connect import make_transport
from remote.patcher.runner import Patcher
from remote.spine import events as ev
from remote.spine.bus import EventBus
from remote.spine.events import Event
from tests.patchbox import GENERATOR, WORKER, make_site_packages, sha256, wheel_file
from tests.sshd_harness import Sshd

pytestmark = [pytest.mark.ssh, pytest.mark.slow]


async def test_plan_apply_verify_reapply_rollback_over_ssh(sshd: Sshd, tmp_path: Path) -> None:
    sp = make_site_packages(tmp_path)
    worker, gen = sp / WORKER, sp / GENERATOR
    host = sshd.host_config("box", workdir=str(tmp_path / "box-workdir"))
    bus = EventBus()
    seen: list[Event] = []
    bus.add_callback(seen.append)
    transport = make_transport(host, bus=bus)
    await transport.connect()
    try:
        patcher = Patcher(transport, host, bus, site_packages=str(sp))
        await patcher.plan()
        assert [e.payload["file"] for e in seen if e.kind == ev.PATCH_PLANNED] == [
            str(worker), str(gen)]
        assert (tmp_path / "box-workdir" / "probes" / "patch_helper.py").is_file()

        await patcher.apply()
        assert "_resolve_text_decoder(model)" in worker.read_text()
        assert "trust_remote_code=True  # eagle3-console" in gen.read_text()
        patched = sha256(worker)

        await patcher.apply()  # idempotent
        assert sha256(worker) == patched
        seen.clear()
        await patcher.verify()
        verified = [e.payload for e in seen if e.kind == ev.PATCH_VERIFIED]
        assert all(r["in_effect"] for v in verified for r in v["recipes"])

        edited = worker.read_text() + "# hand edit on the box\n"
        worker.write_text(edited)
        with pytest.raises(Refused):
            await patcher.apply()
        with pytest.raises(Refused, match="rolling back would discard that edit"):
            await patcher.rollback()

        await patcher.rollback(force=True)  # keeps the edit beside the original
        assert sha256(worker) == sha256(wheel_file(WORKER))
        kept = list(worker.parent.glob("custom_worker.py.eagle3-edited-*"))
        assert [k.read_text() for k in kept] == [edited]
        assert sha256(gen) == sha256(wheel_file(GENERATOR))
    finally:
        await transport.close()


def test_cli_apply_then_rollback_restores_wheel_sha256(
        sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sp = make_site_packages(tmp_path)
    worker = sp / WORKER
    host = sshd.host_config("box")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "console.toml").write_text(
        "[hosts.box]\n"
        f'ssh = "{host.ssh}"\n'
        f'python = "{host.python}"\n'
        f'workdir = "{tmp_path / "box-workdir"}"\n'
        f'ssh_config = "{sshd.ssh_config}"\n'
        f'known_hosts = "{sshd.known_hosts}"\n'
    )
    common = ["--host", "box", "--site-packages", str(sp), "--no-record", "--json"]
    assert main(["patch", "apply", "--yes", *common]) == EXIT_OK
    assert sha256(worker) != sha256(wheel_file(WORKER))
    assert main(["patch", "rollback", *common]) == EXIT_OK
    assert sha256(worker) == sha256(wheel_file(WORKER))
