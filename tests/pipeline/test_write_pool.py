"""The extract stage's writer pool (pipeline/write_pool.py): every sample written, as
write_sample writes it, on several threads; a failed write raised before more is handed over;
a capture that has to wait for the writer counted, for the progress line."""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path

import pytest
import torch

from pipeline.formats import write_sample
from pipeline.progress import Progress, parse
from pipeline.write_pool import CaptureFeed, WritePool, default_threads
from tests.sample_files import read_sample


def _sample(seed: int, seq: int = 30, hidden: int = 16) -> tuple[torch.Tensor, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 1000, (seq,), generator=gen),
            [torch.randn(seq, hidden, generator=gen).to(torch.bfloat16) for _ in range(4)])


@pytest.mark.parametrize("fmt", ["0.9", "0.3"])
def test_the_pool_writes_every_sample_with_its_figures(tmp_path: Path, fmt: str) -> None:
    samples = [_sample(i, seq=10 + i) for i in range(7)]
    name = "hs_{}.safetensors" if fmt == "0.9" else "data_{}.pt"
    with WritePool(3) as pool:
        for i, (ids, states) in enumerate(samples):
            pool.wait(pool.threads - 1)
            path = tmp_path / name.format(i)
            pool.submit(path, len(ids), lambda p=path, a=ids, s=states: write_sample(
                fmt, p, a, torch.ones(len(a), dtype=torch.long), s))
    files = [tmp_path / name.format(i) for i in range(7)]
    assert pool.samples == 7 and pool.tokens == sum(len(ids) for ids, _ in samples)
    assert pool.bytes == sum(f.stat().st_size for f in files)
    for f, (ids, states) in zip(files, samples, strict=True):
        back = read_sample(fmt, f)
        assert torch.equal(back["input_ids"], ids)
        assert all(torch.equal(a, b) for a, b in zip(back["states"], states, strict=True))
    assert not list(tmp_path.glob("*.part"))
    assert pool.busy > 0
    assert 1 <= default_threads() <= 4


def test_a_capture_that_waits_on_the_writer_is_counted(tmp_path: Path) -> None:
    """The write is held until the capture side has asked to hand over the next sample: that
    wait is the one the progress line counts; a wait with nothing left to write is not."""
    gate = threading.Event()
    ids, states = _sample(1)
    path = tmp_path / "hs_0.safetensors"

    def slow_write() -> None:
        gate.wait()
        write_sample("0.9", path, ids, torch.ones(len(ids), dtype=torch.long), states)

    with WritePool(1) as pool:
        pool.submit(path, len(ids), slow_write)
        threading.Timer(0.05, gate.set).start()
        assert pool.wait(0) > 0
        pool.wait(0)  # nothing unfinished: not a wait
        fields = pool.fields(captured_tokens=len(ids), capture_seconds=0.01)
    assert pool.waits == 1 and fields["writer_waits"] == 1 and fields["writer_wait_s"] > 0
    assert "capture_tok_s" not in fields  # 10 ms of capture is no rate (pipeline/progress.py)
    assert path.exists()


def test_a_failed_write_is_raised_before_more_is_handed_over(tmp_path: Path) -> None:
    ids, states = _sample(2)
    missing = tmp_path / "gone" / "hs_0.safetensors"
    pool = WritePool(2)
    pool.submit(missing, len(ids), lambda: write_sample(
        "0.9", missing, ids, torch.ones(len(ids), dtype=torch.long), states))
    with pytest.raises(FileNotFoundError):
        pool.wait(0)
    pool.close()
    assert pool.samples == 0 and not list(tmp_path.rglob("*.part"))


def test_the_feed_reports_written_samples_with_the_writer_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the extract routes print: samples done when their files are (after the resumed
    ones), the tokens written, the writer's figures on every line, the last line the total."""
    progress = Progress("extract", 5, "samples", interval=0)
    progress.resume_at(1)
    feed = CaptureFeed(progress, threads=2)
    with feed.pool:
        for i in range(4):
            with feed.capturing(30):
                ids, states = _sample(i)
            path = tmp_path / f"hs_{i + 1}.safetensors"
            feed.hand_over(path, len(ids), partial(
                write_sample, "0.9", path, ids, torch.ones(len(ids), dtype=torch.long), states))
        assert feed.finish() == 120
    records = [r for r in map(parse, capsys.readouterr().out.splitlines()) if r is not None]
    assert records and all(r["type"] == "progress" and "writer_waits" in r for r in records)
    assert [r["done"] for r in records] == sorted(r["done"] for r in records)
    assert records[0]["done"] >= 1 and records[-1]["done"] == 5 and records[-1]["tokens"] == 120
    assert progress.emitted == 5 and len(list(tmp_path.glob("hs_*.safetensors"))) == 4
