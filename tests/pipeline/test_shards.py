"""Sharded extraction's pure parts: the split (pipeline/shards.py), `[extract] hosts` in the
pipeline config, the host checks the console makes before contacting any box; and the box-side
gather refusing a shard whose file does not match its manifest (a real hf extraction of a tiny
target, on this machine)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from pipeline import config as config_mod
from pipeline.__main__ import main as pipeline_main
from pipeline.demo import build_demo
from pipeline.errors import ConfigInvalid, CopyRefused, PipelineError
from pipeline.shards import Shard, split
from remote.errors import UsageError
from remote.ops.sharded_extract import check_hosts, stack_differences


def _check_cover(lengths: list[int], shards: list[Shard]) -> None:
    assert [s.index for s in shards] == list(range(len(shards)))
    assert shards[0].start == 0 and shards[-1].end == len(lengths)
    for a, b in itertools.pairwise(shards):
        assert a.end == b.start  # contiguous, in order, each sample once
    for s in shards:
        assert s.tokens == sum(lengths[s.start:s.end])


def test_split_is_contiguous_and_balanced_by_tokens() -> None:
    rng = random.Random(7)
    for _ in range(200):
        lengths = [rng.randint(1, 300) for _ in range(rng.randint(1, 120))]
        n = rng.randint(1, 6)
        shards = split(lengths, n)
        assert len(shards) == n
        _check_cover(lengths, shards)
        if len(lengths) >= n:
            assert all(s.count >= 1 for s in shards)
            ideal = sum(lengths) / n
            # each cut is the boundary nearest its ideal, so a shard is off by < 1 sample each side
            assert all(abs(s.tokens - ideal) <= 2 * max(lengths) for s in shards)
        assert split(lengths, n) == shards  # deterministic


def test_split_balances_tokens_not_sample_counts() -> None:
    # Long samples first: an even split by count would give shard 1 nearly all the tokens.
    lengths = [100] * 10 + [10] * 100
    a, b = split(lengths, 2)
    assert (a.start, a.end, b.start, b.end) == (0, 10, 10, 110)
    assert a.tokens == b.tokens == 1000
    assert split([5, 5, 5, 5], 2) == [Shard(0, 0, 2, 10), Shard(1, 2, 4, 10)]


def test_split_edge_cases() -> None:
    assert split([], 3) == [Shard(0, 0, 0, 0), Shard(1, 0, 0, 0), Shard(2, 0, 0, 0)]
    got = split([7, 9], 3)  # fewer samples than boxes: the last shards are empty
    _check_cover([7, 9], got)
    assert [s.count for s in got] == [1, 1, 0]
    assert split([3, 1, 4], 1) == [Shard(0, 0, 3, 8)]
    with pytest.raises(ValueError):
        split([1], 0)
    with pytest.raises(ValueError):
        split([-1], 1)


def _demo(tmp_path: Path, extract_extra: str = "") -> Path:
    cfg = build_demo(tmp_path / "demo", rows=24, target_steps=1)
    text = cfg.read_text().replace('reserve_bytes = 0\n', f'reserve_bytes = 0\n{extract_extra}')
    text = text.replace("[train]\n", '[train]\nspeculators = "0.3"\n')
    cfg.write_text(text)
    return cfg


def test_extract_hosts_in_the_config(tmp_path: Path) -> None:
    cfg_path = _demo(tmp_path, 'hosts = ["a", "b"]\n')
    cfg = config_mod.load(cfg_path, check_disk=False)
    assert cfg.extract.hosts == ("a", "b")
    # The host list is not in any key: a sharded extraction is the one-box extraction.
    other = cfg_path.with_name("other.toml")
    other.write_text(cfg_path.read_text().replace('hosts = ["a", "b"]\n', ""))
    assert config_mod.load(other, check_disk=False).section_digest("target", "extract") == \
        cfg.section_digest("target", "extract")
    for bad, why in (('hosts = ["a", "a"]', "names a host twice"),
                     ("hosts = [1]", "must be a list of names"),
                     ('hosts = "a"', "must be a list of names")):
        other.write_text(cfg_path.read_text().replace('hosts = ["a", "b"]', bad))
        with pytest.raises(ConfigInvalid, match=why):
            config_mod.load(other, check_disk=False)
    # Where the box-to-box copy connects is not what was extracted either.
    other.write_text(cfg_path.read_text().replace(
        'hosts = ["a", "b"]\n', 'hosts = ["a", "b"]\naddresses = ["10.0.0.1", "10.0.0.2"]\n'
        'copy_port = 29500\n'))
    moved = config_mod.load(other, check_disk=False)
    assert moved.extract.addresses == ("10.0.0.1", "10.0.0.2") and moved.extract.copy_port == 29500
    assert moved.section_digest("target", "extract") == cfg.section_digest("target", "extract")
    for bad, why in (('addresses = ["10.0.0.1"]', r"extract\.addresses: 1 address\(es\) for 2 "
                      r"extract\.hosts"),
                     ("copy_port = 70000", r"extract\.copy_port: must be 0\.\.65535")):
        other.write_text(cfg_path.read_text().replace('hosts = ["a", "b"]\n',
                                                      f'hosts = ["a", "b"]\n{bad}\n'))
        with pytest.raises(ConfigInvalid, match=why):
            config_mod.load(other, check_disk=False)


def test_host_checks_before_any_box_is_contacted() -> None:
    known = {"box1", "box2", "local"}
    check_hosts(["box1", "box2"], known, set())
    with pytest.raises(UsageError, match=r"extract\.hosts names 'nosuch', which console\.toml"):
        check_hosts(["box1", "nosuch"], known, set())
    with pytest.raises(UsageError, match=r"--reassign box9: not one of extract\.hosts"):
        check_hosts(["box1", "box2"], known, {"box9"})
    with pytest.raises(UsageError, match="no box is left"):
        check_hosts(["box1"], known, {"box1"})


def test_gather_refuses_a_file_that_does_not_match_its_manifest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """shard-plan, shard-extract and shard-gather on this machine (hf backend); a byte changed
    in one shard file after its manifest was written: nothing of that shard is placed."""
    cfg = _demo(tmp_path, 'hosts = ["local", "other"]\n')
    assert pipeline_main(["prepare", "--config", str(cfg)]) == 0
    capsys.readouterr()
    assert pipeline_main(["shard-plan", "--config", str(cfg)]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    first, second = plan["shards"]
    assert (first["start"], second["end"]) == (0, plan["samples"]) and first["end"] == second["start"]
    rows = [r for r in Path(plan["train_jsonl"]).read_text().splitlines() if r.strip()]
    part = tmp_path / "rows.jsonl"
    part.write_text("\n".join(rows[second["start"]:second["end"]]) + "\n")
    shard_dir = tmp_path / "shard2"
    assert pipeline_main(["shard-extract", "--config", str(cfg), "--rows", str(part),
                          "--dir", str(shard_dir)]) == 0
    m = json.loads((shard_dir / "shard.json").read_text())
    assert m["count"] == second["end"] - second["start"] == len(m["files"])
    victim = shard_dir / "hidden_states" / m["files"][-1]["name"]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 1
    victim.write_bytes(bytes(data))
    capsys.readouterr()
    rc = pipeline_main(["shard-gather", "--config", str(cfg), "--dir", str(shard_dir),
                        "--start", str(second["start"])])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "does not match the shard's manifest (size or sha256): not placed" in out + err
    hs = Path(plan["extract_dir"]) / "hidden_states"
    assert not list(hs.glob("*.pt"))  # nothing of it placed
    # A shard gathered at the wrong place (another shard's samples) is refused by its key.
    victim.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 1]))
    with pytest.raises(PipelineError, match="does not hold samples 0"):
        from pipeline.stages.extract_shard import gather

        gather(config_mod.load(cfg, check_disk=False), shard_dir, 0)
    # A manifest that lists fewer files than its count, or its files out of sample order, is
    # refused before anything is placed (files are placed by position; issue 48 row 2).
    victim.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 1]))
    loaded = config_mod.load(cfg, check_disk=False)
    for files, why in ((m["files"][:-1], f"says count {m['count']} but lists "
                        f"{len(m['files']) - 1} files"),
                       ([*m["files"][1:], m["files"][0]], "files are not")):
        (shard_dir / "shard.json").write_text(json.dumps({**m, "files": files}))
        with pytest.raises(CopyRefused, match=why) as caught:
            gather(loaded, shard_dir, second["start"])
        assert "\n" not in str(caught.value) and caught.value.exit_code == 2
        assert not list(hs.glob("*.pt"))


def test_stack_differences_names_the_package_and_the_shards() -> None:
    same = {"torch": "2.13.0", "transformers": "5.19.0"}
    assert stack_differences({0: same, 1: dict(same), 2: dict(same)}) == ""
    mixed = {0: same, 1: dict(same), 2: {"torch": "2.10.0", "transformers": "5.19.0"}}
    assert stack_differences(mixed) == "torch: 2.13.0 (shards 1, 2) vs 2.10.0 (shard 3)"
