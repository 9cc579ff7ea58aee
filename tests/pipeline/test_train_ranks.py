"""Ranks on one box (issue 38, pipeline/ranks.py), the fast parts: how many ranks a box gets,
the torchrun command, the one line a dead rank becomes, rank 0 alone reporting progress, and
speculators 0.3 (this checkout's .venv) refusing several ranks on CPU with its evidence.
Several real ranks training, dying and serving: tests/e2e/test_train_ranks.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import config as pconfig
from pipeline import progress, ranks
from pipeline.errors import ConfigInvalid
from tests.tiny_pipeline import tiny_pipeline


def _config(tmp_path: Path, train: str = "") -> Path:
    return tiny_pipeline(tmp_path, train, name="p.toml")


def test_ranks_per_box_default_to_one_on_cpu_and_follow_the_key(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    auto = pconfig.load(_config(tmp_path / "a"))
    assert auto.train.nproc_per_node == 0
    assert ranks.ranks_per_node(auto, "cpu") == 1
    (tmp_path / "b").mkdir()
    two = pconfig.load(_config(tmp_path / "b", "nproc_per_node = 2\n"))
    assert ranks.ranks_per_node(two, "cpu") == 2  # the machines the suite runs on have >= 2 cores
    # The world size changes what is trained: the key is in train's manifest key.
    assert auto.section_digest("train") != two.section_digest("train")


def test_more_ranks_than_the_box_has_gpus_or_cores_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 48 row 9: `nproc_per_node = 10000` was handed to torchrun. CUDA's device count is
    a test double here (no GPU on the machines the suite runs on): 8 GPUs."""
    import torch

    cores, _ = ranks.slots("cpu")
    (tmp_path / "a").mkdir()
    many = pconfig.load(_config(tmp_path / "a", "nproc_per_node = 10000\n"))
    with pytest.raises(ConfigInvalid) as err:
        ranks.ranks_per_node(many, "cpu")
    message = str(err.value)
    assert message.endswith(f"train.nproc_per_node: 10000 ranks, but this box has {cores} CPU "
                            f"cores (cpu): at most one rank per CPU core; set it to {cores} or "
                            "fewer (0: one per GPU, 1 on CPU)")
    assert "\n" not in message and err.value.exit_code == 2
    (tmp_path / "b").mkdir()
    just = pconfig.load(_config(tmp_path / "b", f"nproc_per_node = {cores}\n"))
    assert ranks.ranks_per_node(just, "cpu") == cores
    (tmp_path / "c").mkdir()
    over = pconfig.load(_config(tmp_path / "c", f"nproc_per_node = {cores + 1}\n"))
    with pytest.raises(ConfigInvalid, match=f"{cores + 1} ranks, but this box has {cores} CPU"):
        ranks.ranks_per_node(over, "cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    with pytest.raises(ConfigInvalid, match=r"10000 ranks, but this box has 8 GPUs \(cuda\): at "
                       r"most one rank per GPU"):
        ranks.ranks_per_node(many, "cuda")
    (tmp_path / "d").mkdir()
    eight = pconfig.load(_config(tmp_path / "d", "nproc_per_node = 8\n"))
    assert ranks.ranks_per_node(eight, "cuda") == 8


def test_a_negative_rank_count_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid) as err:
        pconfig.load(_config(tmp_path, "nproc_per_node = -1\n"))
    assert "train.nproc_per_node: must be >= 0" in str(err.value)
    assert "\n" not in str(err.value) and err.value.exit_code == 2


def test_one_box_is_torchrun_with_one_node(tmp_path: Path) -> None:
    cfg = pconfig.load(_config(tmp_path, "nproc_per_node = 2\n"))
    argv = ranks.torchrun_argv(cfg, nnodes=1, nproc=2, endpoint="127.0.0.1:5555",
                               local_addr=None, run_id="r", save_dir=tmp_path / "s",
                               ranks_dir=tmp_path / "r", device="cpu")
    i = argv.index("torch.distributed.run")
    assert argv[i + 1:i + 5] == ["--nnodes", "1", "--nproc-per-node", "2"]
    assert argv[argv.index("--rdzv-endpoint") + 1] == "127.0.0.1:5555"
    assert argv[argv.index("--max-restarts") + 1] == "0"  # a dead rank ends the run
    assert "--local-addr" not in argv
    assert argv[argv.index("-m", i) + 1:][:2] == ["pipeline.ranks", "rank"]
    port = ranks.free_port()
    assert 0 < port < 65536  # a real port: torchrun's port 0 hangs its rendezvous


# torchrun's own failure summary (torch 2.13, the vllm032 box environment), as it printed it on
# this machine for rank 1 SIGKILLed while rank 0 trained (its log lines and traceback
# above it cut, one trailing space dropped), kept as recorded in tests/data.
SUMMARY = (Path(__file__).parents[1] / "data" / "torchrun-rank-sigkill.txt").read_text()


def test_a_rank_killed_by_a_signal_is_named_with_it(tmp_path: Path) -> None:
    line = ranks.rank_failure(SUMMARY.splitlines(keepends=True), tmp_path, 2, 1)
    assert line == "rank 1 of 2 died: killed by SIGKILL; torchrun stopped the other ranks"


def test_a_rank_with_an_error_is_named_with_its_own_message(tmp_path: Path) -> None:
    (tmp_path / "rank-1.error").write_text("ValueError: bad batch\n")
    summary = SUMMARY.replace("exitcode  : -9 (pid: 26356)  (SIGKILL)",
                              "exitcode  : 1 (pid: 26356)  (<N/A>)")
    line = ranks.rank_failure(summary.splitlines(keepends=True), tmp_path, 2, 1)
    assert line == "rank 1 of 2 died: ValueError: bad batch; torchrun stopped the other ranks"
    # No summary (torchrun itself killed): the rank that wrote its error.
    assert ranks.rank_failure([], tmp_path, 2, 1).startswith("rank 1 of 2 died: ValueError")
    (tmp_path / "rank-1.error").unlink()
    assert ranks.rank_failure([], tmp_path, 2, 1) == "torchrun exit 1, no rank named (its " \
                                                      "output above)"


def test_only_rank_0_reports_progress(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        progress.for_rank(1, 2)
        progress.Progress("train", 4, "steps").update(1, force=True)
        assert capsys.readouterr().out == ""
        progress.for_rank(0, 2)
        progress.Progress("train", 4, "steps").update(1, force=True)
        rec = progress.parse(capsys.readouterr().out.strip())
        assert rec is not None and rec["ranks"] == 2 and rec["done"] == 1
    finally:
        progress._RANKS.clear()


def test_speculators_03_refuses_several_ranks_on_cpu_with_the_evidence(tmp_path: Path) -> None:
    """This checkout's .venv has speculators 0.3.0 (the local demo's): its FSDP path needs
    CUDA, so two ranks on CPU are one line (exit 2) before torchrun starts."""
    cfg = pconfig.load(_config(tmp_path, "nproc_per_node = 2\n"))
    with pytest.raises(ConfigInvalid) as err:
        ranks.train_local(cfg, tmp_path / "save", "cpu", 2)
    msg = str(err.value)
    assert "\n" not in msg and err.value.exit_code == 2
    assert "train.nproc_per_node: speculators 0.3.0 (the 0.3 path) cannot train with several " \
           "ranks on CPU" in msg
    assert "trainer.py:104" in msg and "No accelerator found" in msg
    assert "train.nproc_per_node = 1" in msg
    assert not (tmp_path / "ranks").exists()  # nothing started
