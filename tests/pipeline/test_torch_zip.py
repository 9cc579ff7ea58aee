"""The 0.3 writer's own torch.save file (pipeline/torch_zip.py): every byte torch.save writes for
the same sample but the serialization id (torch's own hash of an unordered set; see the
module), correct CRCs (Python's zipfile and the unzip tool check them), read back unchanged by
torch.load (with and without mmap) and by speculators 0.3's own dataset, whichever CRC32
function computed it; torch.save's path where the layout check fails."""

from __future__ import annotations

import io
import os
import subprocess
import zipfile
import zlib
from pathlib import Path

import pytest
import torch

from pipeline import torch_zip
from pipeline.formats import write_sample
from tests.sample_files import read_sample

SID = ".data/serialization_id"


def _sample(seq: int, hidden: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor,
                                                         list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    states = [torch.randn(seq, hidden, generator=gen).to(torch.bfloat16) for _ in range(4)]
    ids = torch.randint(0, 1000, (seq,), generator=gen)
    mask = (torch.rand(seq, generator=gen) > 0.3).long()
    return ids, mask, states


def _reference(tmp: Path, name: str, ids: torch.Tensor, mask: torch.Tensor,
               states: list[torch.Tensor]) -> bytes:
    """torch.save of what write_sample hands over, under the same temporary name (the zip's
    folder is named after the file)."""
    d = tmp / "ref"
    d.mkdir(exist_ok=True)
    torch.save({"input_ids": ids.to(torch.long), "hidden_states": [
        s.to(torch.bfloat16).contiguous() for s in states], "loss_mask": mask.to(torch.long)},
        d / (name + ".part"))
    return (d / (name + ".part")).read_bytes()


def _same_but_the_id(got: bytes, ref: bytes) -> None:
    """Byte for byte up to the serialization id's record, then the same directory."""
    zg, zr = (zipfile.ZipFile(io.BytesIO(b)) for b in (got, ref))
    ig, ir = zg.infolist(), zr.infolist()
    assert [i.filename for i in ig] == [i.filename for i in ir]
    assert ig[-1].filename.endswith(SID)
    cut = ir[-1].header_offset
    assert got[:cut] == ref[:cut]
    assert len(got) == len(ref)
    for a, b in zip(ig[:-1], ir[:-1], strict=True):
        assert (a.header_offset, a.CRC, a.file_size, a.flag_bits, a.extra) == \
               (b.header_offset, b.CRC, b.file_size, b.flag_bits, b.extra)
    assert zg.testzip() is None  # every record's CRC is right
    sid = zg.read(ig[-1].filename)
    assert len(sid) == 40 and sid.isdigit()


@pytest.mark.parametrize("crc", ["zlib-ng", "zlib"])
@pytest.mark.parametrize(("seq", "hidden"), [(1, 8), (37, 64), (700, 48), (1100, 520)])
def test_write_sample_writes_torch_saves_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               crc: str, seq: int, hidden: int) -> None:
    if crc == "zlib":
        monkeypatch.setattr(torch_zip, "fast_crc32", lambda: ("zlib", zlib.crc32))
    else:
        assert torch_zip.fast_crc32()[0] == "zlib-ng"  # installed with the ml extra
    ids, mask, states = _sample(seq, hidden, seq)
    got = tmp_path / "data_3.pt"
    write_sample("0.3", got, ids, mask, states)
    _same_but_the_id(got.read_bytes(), _reference(tmp_path, "data_3.pt", ids, mask, states))
    for mmap in (False, True):
        d = torch.load(got, weights_only=True, map_location="cpu", mmap=mmap)
        assert torch.equal(d["input_ids"], ids) and torch.equal(d["loss_mask"], mask)
        assert all(torch.equal(a, b) for a, b in zip(d["hidden_states"], states, strict=True))
    assert not list(tmp_path.glob("*.part"))


def test_states_sharing_one_storage_and_a_cast(tmp_path: Path) -> None:
    """Views of one [4, seq, H] buffer: torch.save writes the storage once, so do we; float32
    states are cast to bf16 first, as before."""
    gen = torch.Generator().manual_seed(5)
    buf = torch.randn(4, 30, 16, generator=gen).to(torch.bfloat16)
    ids, mask = torch.arange(30), torch.ones(30, dtype=torch.long)
    for name, states in (("data_0.pt", list(buf.unbind(0))),
                         ("data_1.pt", [s.float() for s in buf.unbind(0)])):
        got = tmp_path / name
        write_sample("0.3", got, ids, mask, states)
        _same_but_the_id(got.read_bytes(), _reference(tmp_path, name, ids, mask, states))
        back = read_sample("0.3", got)
        assert all(torch.equal(a, b) for a, b in zip(back["states"], buf.unbind(0), strict=True))


def test_zip_tools_accept_it(tmp_path: Path) -> None:
    ids, mask, states = _sample(64, 96)
    got = tmp_path / "data_7.pt"
    write_sample("0.3", got, ids, mask, states)
    done = subprocess.run(["unzip", "-t", str(got)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No errors detected" in done.stdout


def test_speculators_03_reads_it(tmp_path: Path) -> None:
    """speculators 0.3's own dataset (what the 0.3 trainer reads, pipeline/trainers/library.py)
    over our files: the same tensors as over torch.save's."""
    from speculators.train.data import Eagle3SampleFileDataset, standardize_data_v1

    ids, mask, states = _sample(40, 32, 2)
    write_sample("0.3", tmp_path / "data_0.pt", ids, mask, states)
    ref = tmp_path / "ref" / "data_0.pt"
    ref.parent.mkdir()
    torch.save({"input_ids": ids, "hidden_states": states, "loss_mask": mask}, ref)
    got = [Eagle3SampleFileDataset(file_list=[str(p)], max_len=64,
                                   standardize_fn=standardize_data_v1)[0]
           for p in (tmp_path / "data_0.pt", ref)]
    assert got[0].keys() == got[1].keys()
    for k in got[0]:
        assert torch.equal(got[0][k], got[1][k]), k


def test_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writev or write that stops early (a signal, a disk filling up): the rest is written
    on. Pieces of 8 KiB, so the states go through the piece loop's own writes."""
    real_writev, real_write = os.writev, os.write
    calls = {"writev": 0, "write": 0}

    def short_writev(fd: int, bufs: list[memoryview]) -> int:
        calls["writev"] += 1
        return real_writev(fd, [bytes(b"".join(bytes(b) for b in bufs)[:777])])

    def short_write(fd: int, buf: memoryview) -> int:
        calls["write"] += 1
        return real_write(fd, bytes(buf)[:777])

    monkeypatch.setattr(os, "writev", short_writev)
    monkeypatch.setattr(os, "write", short_write)
    monkeypatch.setattr(torch_zip, "_PIECE", 8192)
    ids, mask, states = _sample(200, 40, 4)
    got = tmp_path / "data_2.pt"
    write_sample("0.3", got, ids, mask, states)
    assert calls["writev"] > 3 and calls["write"] >= 4
    _same_but_the_id(got.read_bytes(), _reference(tmp_path, "data_2.pt", ids, mask, states))


def test_torch_saves_path_where_the_layout_differs(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch whose file this module does not reproduce (the check once per process):
    torch.save writes it, its own bytes exactly."""
    monkeypatch.setattr(torch_zip, "_LAYOUT_OK", False)
    ids, mask, states = _sample(20, 16, 6)
    got = tmp_path / "data_4.pt"
    write_sample("0.3", got, ids, mask, states)
    assert got.read_bytes() == _reference(tmp_path, "data_4.pt", ids, mask, states)


def test_the_layout_check_passes_here_and_names_follow_torch() -> None:
    assert torch_zip.layout_matches()
    assert torch_zip.archive_name(Path("/a/b/data_12.pt.part")) == "data_12.pt"
    assert torch_zip.archive_name("x/noext") == "noext"
    assert torch_zip.archive_name("x/dätä.pt") == "archive"
