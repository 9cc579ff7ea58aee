"""The 0.9 writer's own safetensors path (pipeline/formats.py `_write_safetensors_rows`: the
layers written row by row, no stacked copy) writes the very bytes safetensors' save_file writes
for the stacked tensor, so what speculators and the sharded-extraction checks read is unchanged;
states it does not take (another dtype, not contiguous) go through save_file as before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from pipeline.formats import write_sample
from tests.sample_files import read_sample


def _reference(path: Path, ids: torch.Tensor, states: list[torch.Tensor],
               dtype: torch.dtype) -> bytes:
    save_file({"token_ids": ids.to(torch.long).contiguous(),
               "hidden_states": torch.stack(states, dim=1).to(dtype).contiguous()}, str(path))
    return path.read_bytes()


@pytest.mark.parametrize(("seq", "hidden", "dtype"), [
    (1, 8, torch.bfloat16), (37, 64, torch.bfloat16), (700, 48, torch.bfloat16),
    (300, 40, torch.float32), (5, 16, torch.float16)])
def test_the_row_writer_writes_save_files_bytes(tmp_path: Path, seq: int, hidden: int,
                                                dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(seq)
    states = [torch.randn(seq, hidden, generator=gen).to(dtype) for _ in range(4)]
    ids = torch.randint(0, 1000, (seq,), generator=gen)
    mask = torch.ones(seq, dtype=torch.long)
    got = tmp_path / "hs_0.safetensors"
    write_sample("0.9", got, ids, mask, states, dtype)
    assert got.read_bytes() == _reference(tmp_path / "ref.safetensors", ids, states, dtype)
    back = read_sample("0.9", got)
    assert torch.equal(back["input_ids"], ids)
    assert all(torch.equal(a, b) for a, b in zip(back["states"], states, strict=True))
    assert not list(tmp_path.glob("*.part"))


def test_states_it_does_not_take_go_through_save_file(tmp_path: Path) -> None:
    """float32 states stored as bf16 (a cast) and a non-contiguous view: the same bytes."""
    gen = torch.Generator().manual_seed(1)
    full = torch.randn(20, 2 * 32, generator=gen)
    states = [full[:, ::2], full[:, 1::2], full[:, :32].clone(), full[:, 32:].clone()]
    ids = torch.arange(20)
    got = tmp_path / "hs_1.safetensors"
    write_sample("0.9", got, ids, torch.ones(20, dtype=torch.long), states)
    assert got.read_bytes() == _reference(tmp_path / "ref.safetensors", ids, states,
                                          torch.bfloat16)
    assert load_file(str(got))["hidden_states"].dtype == torch.bfloat16


def test_short_writes_still_write_save_files_bytes(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A regular file takes a whole writev at once, but POSIX allows fewer bytes (a signal, a
    disk filling up): the writer carries on from the byte where the kernel stopped. Test double:
    os.writev handing the real one only the first 1,000 bytes of the buffers, cut mid-buffer."""
    real = os.writev
    calls = []

    def short_writev(fd: int, bufs: list[memoryview]) -> int:
        calls.append(len(bufs))
        head, left = [], 1000
        for b in bufs:
            if not left:
                break
            head.append(b[:left])
            left -= len(head[-1])
        return real(fd, head)

    monkeypatch.setattr(os, "writev", short_writev)
    gen = torch.Generator().manual_seed(3)
    states = [torch.randn(50, 24, generator=gen).to(torch.bfloat16) for _ in range(4)]
    ids = torch.arange(50)
    got = tmp_path / "hs_2.safetensors"
    write_sample("0.9", got, ids, torch.ones(50, dtype=torch.long), states)
    assert len(calls) > 10  # it was cut, many times
    assert got.read_bytes() == _reference(tmp_path / "ref.safetensors", ids, states,
                                          torch.bfloat16)
