"""Uploading a tree of files asks the box what it has in one round trip, over the local
transport and the real loopback sshd: 31 pipeline modules checked one `python -c` at a time
cost 6–12 s of every `console` run over SSH, even with nothing to send."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import remote.link.upload as upload_module
from remote.errors import RemoteError
from remote.link.transport import Transport
from remote.link.upload import upload_many
from remote.spine import events as ev
from remote.spine.bus import EventBus


def _counting_runs(transport: Transport) -> list[Sequence[str]]:
    """Records the argv of every command the transport runs (the real run still happens)."""
    calls: list[Sequence[str]] = []
    real = transport.run

    async def run(argv: Sequence[str], **kw: Any) -> Any:
        calls.append(list(argv))
        return await real(argv, **kw)

    transport.run = run  # type: ignore[method-assign]
    return calls


async def test_one_round_trip_sends_only_what_differs(transport: Transport, tmp_path: Path) -> None:
    local = tmp_path / "local"
    local.mkdir()
    names = ["a.py", "sub/b.py", "sub/deeper/c.py", "name with space.py"]
    for i, name in enumerate(names):
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_text(f"x = {i}\n")
    box = tmp_path / "box"
    files = [(local / name, str(box / "src" / name)) for name in names]
    calls = _counting_runs(transport)
    bus = EventBus()
    progress: list[Mapping[str, Any]] = []
    bus.add_callback(lambda e: progress.append(e.payload) if e.kind == ev.UPLOAD_PROGRESS else None)

    assert await upload_many(transport, files, bus=bus, host="box") == 4
    assert len(calls) == 1
    assert [(box / "src" / n).read_text() for n in names] == [f"x = {i}\n" for i in range(4)]
    assert {p["path"] for p in progress} == {r for _, r in files}

    calls.clear()
    assert await upload_many(transport, files) == 0  # unchanged: nothing sent
    assert len(calls) == 1

    (local / "sub/b.py").write_text("x = 'changed'\n")
    (box / "src" / "sub/deeper/c.py").unlink()  # gone on the box
    assert await upload_many(transport, files) == 2
    assert (box / "src" / "sub/b.py").read_text() == "x = 'changed'\n"
    assert (box / "src" / "sub/deeper/c.py").read_text() == "x = 2\n"
    assert await upload_many(transport, []) == 0


async def test_a_box_python_that_answers_nonsense_is_a_clear_error(transport: Transport,
                                                                   tmp_path: Path) -> None:
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    fake = tmp_path / "notpython"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    with pytest.raises(RemoteError, match=r"no usable answer .* 2 file"):
        await upload_many(transport, [(src, str(tmp_path / "box" / "a.py")),
                                      (src, str(tmp_path / "box" / "b.py"))], python=str(fake))
    assert not (tmp_path / "box").exists()


async def test_a_large_upload_reports_its_progress_at_most_once_a_second_and_its_end(
        transport: Transport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over SFTP the progress handler is called once per block: a checkpoint of some GB is
    thousands of calls. The session gets one event a PROGRESS_EVERY_S and the last one; the
    headless printer then draws one line each (and none for a small file)."""
    from console.printer import human_line

    big = tmp_path / "head.safetensors"
    big.write_bytes(bytes(range(256)) * (24 << 12))  # 24 MiB: many SFTP blocks
    small = tmp_path / "probe.py"
    small.write_text("x = 1\n")
    bus = EventBus()
    seen: list[Any] = []
    bus.add_callback(lambda e: seen.append(e) if e.kind == ev.UPLOAD_PROGRESS else None)
    monkeypatch.setattr(upload_module, "PROGRESS_EVERY_S", 3600.0)  # nothing on the way
    box = tmp_path / "box"
    assert await upload_many(transport, [(big, str(box / "head")), (small, str(box / "p.py"))],
                             bus=bus, host="box") == 2
    assert (box / "head").read_bytes() == big.read_bytes()
    assert [(e.payload["path"], e.payload["done"], e.payload["total"]) for e in seen] == [
        (str(box / "head"), 24 << 20, 24 << 20), (str(box / "p.py"), 6, 6)]
    lines = [human_line(e) for e in seen]
    assert lines[0] is not None and lines[0].endswith(f"[box] uploaded {box / 'head'} (24.0 MiB)")
    assert lines[1] is None  # a probe-sized file: said by the command's result

    seen.clear()
    monkeypatch.setattr(upload_module, "PROGRESS_EVERY_S", 0.0)  # every call the transport makes
    big.write_bytes(big.read_bytes()[::-1])
    assert await upload_many(transport, [(big, str(box / "head"))], bus=bus, host="box") == 1
    done = [e.payload["done"] for e in seen]
    assert done == sorted(done) and done[-1] == 24 << 20
    partial = [human_line(e) for e in seen[:-1]]
    from remote.link.transport import LocalTransport

    assert partial or isinstance(transport, LocalTransport)  # a local copy is one call
    assert all(line is not None and "% of 24.0 MiB" in line for line in partial)
