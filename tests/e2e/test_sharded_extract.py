"""Hidden-state extraction sharded across the 3-box test fleet (tests/fleet_fixture.py; issue
#29 point 3): `console run --host box1` with `[extract] hosts = ["box1", "box2", "box3"]`, each
shard a detached `python -m pipeline shard-extract` job on its box through the stage's own
extraction route (hf: the cheapest on CPU), gathered on box1; the
gathered hidden states equal a one-box extraction of the same data, tensor by tensor. The boxes
share this machine's disk, so no hidden-state byte crosses the console (issue #39): boxes given
a disk of their own (each sshd in a mount namespace with a tmpfs over the output storage) copy
their shards box to box; one that box1 cannot reach either (its python in a network namespace
of its own) is refused unless `--relay-through-console`, which prints its estimate first and
counts the bytes. With `[train] data = "local-shards"` box1 and box2 (on a disk of its own)
each keep their shard and train across both on it, each rank on its own box's samples.
Then a box lost mid-shard (its job and its sshd killed) and its shard rerun on another box; bad
input.

Every box runs the same python here (the vLLM 0.32 environment, speculators 0.9's format): a
sharded extraction is only the one-box extraction when every box runs the same stack
(docs/pipeline.md).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from console.cli import main
from pipeline.demo import build_demo
from pipeline.trainers.shard_sampler import NodeShards, plan_epoch
from tests import box_env
from tests.fleet_fixture import Fleet

# The module's first test pays for the fleet, the demo and the one-box reference (minutes on 2
# shared cores) on top of a three-box extraction and a training.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
HOSTS = ["box1", "box2", "box3"]


@dataclass
class Setup:
    root: Path
    demo: Path  # the tiny target and its conversations
    console_toml: Path
    python: str  # every box's python
    baseline: Path  # hidden_states/ of the one-box extraction
    outs: dict[str, Path] = field(default_factory=dict)  # a config's output_dir, when moved

    def config(self, name: str, hosts: list[str] = HOSTS, *, out: Path | None = None) -> Path:
        """A pipeline config of the demo with its own output_dir (`out`, default out-NAME),
        sharded over `hosts`, in speculators 0.9's format (the installed release, which trains
        here; one epoch)."""
        if out is not None:
            self.outs[name] = out
        text = (self.demo / "pipeline.toml").read_text()
        for key, rel in (("output_dir", "out"), ("model", "target"),
                         ("dataset", "conversations.jsonl")):
            target = self.out(name) if key == "output_dir" else self.demo / rel
            text = text.replace(f'{key} = "{rel}"', f'{key} = "{target}"')
        text = text.replace("reserve_bytes = 0\n", f"reserve_bytes = 0\nhosts = {json.dumps(hosts)}\n")
        text = text.replace("[train]\n", '[train]\nspeculators = "0.9"\n')
        text = re.sub(r"^epochs = \d+$", "epochs = 1", text, flags=re.M)
        path = self.root / f"{name}.toml"
        path.write_text(text)
        return path

    def out(self, name: str) -> Path:
        return self.outs.get(name, self.root / f"out-{name}")


@pytest.fixture(scope="module")
def setup(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Setup:
    root = tmp_path_factory.mktemp("sharded")
    demo = build_demo(root / "demo", rows=40, target_steps=1).parent
    python = str(box_env.ensure("vllm032"))  # not the fleet's wrappers: they set PYTHONPATH
    console_toml = root / "console.toml"
    console_toml.write_text(re.sub(r"^python = .*$", f"python = {json.dumps(python)}",
                                   fleet.config.read_text(), flags=re.M))
    s = Setup(root, demo, console_toml, python, root / "out-one-box" / "extract" / "hidden_states")
    one_box = s.config("one-box", hosts=[])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for stage in ("prepare", "extract"):  # the reference: one box, the stage alone
        done = subprocess.run([python, "-m", "pipeline", stage, "--config", str(one_box)],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return s


def console(setup: Setup, *argv: str, session: Path | None = None) -> int:
    extra = ["--session", str(session)] if session else ["--no-record"]
    return main([argv[0], "--config", str(setup.console_toml), *extra, *argv[1:]])


def assert_equal_to_one_box(setup: Setup, name: str) -> int:
    """extract/hidden_states (0.9's hs_*.safetensors, what train reads) equal the one-box
    extraction's, tensor by tensor, and the extract stage finished on them."""
    import torch
    from safetensors.torch import load_file

    ref = sorted(setup.baseline.glob("hs_*.safetensors"))
    got = setup.out(name) / "extract" / "hidden_states"
    assert ref and sorted(p.name for p in got.glob("*")) == [p.name for p in ref]
    for r in ref:
        a, b = load_file(r), load_file(got / r.name)
        assert sorted(a) == sorted(b), r.name
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), (r.name, k)
    manifest = json.loads((setup.out(name) / "manifests" / "extract.json").read_text())
    assert manifest["summary"]["samples"] == len(ref)
    return len(ref)


def session_events(path: Path, hosts: list[str] = HOSTS) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    assert rows[0]["hosts"] == hosts  # the header: every box of the run
    return [r for r in rows if "kind" in r]


def test_sharded_extraction_then_training_relays_nothing(
        setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Sharded extraction, then vocab and train on box1: the boxes share the output storage, so
    each shard is written there by its own box and renamed into place; not one hidden-state
    byte crosses the console, and train reads the one-box extraction's tensors."""
    cfg = setup.config("sharded")
    session = tmp_path / "sharded.jsonl"
    rc = console(setup, "run", "--host", "box1", "--pipeline", str(cfg), "--until", "train",
                 session=session)
    out, err = capsys.readouterr()
    assert rc == 0, out[-3000:] + err[-3000:]
    assert "relayed through the console: 0 B" in out
    assert "relaying through the console" not in out
    assert "box2 shares box1's output storage" in out and "box3 shares box1's" in out
    n = assert_equal_to_one_box(setup, "sharded")  # what train read, sample for sample
    assert n >= 24
    train = json.loads((setup.out("sharded") / "manifests" / "train.json").read_text())
    assert train["summary"]["steps"] > 0
    assert (setup.out("sharded") / "train" / "checkpoint" / "model.safetensors").is_file()
    events = session_events(session)
    # Each box ran its shard: stage events from all three hosts, and the gathers said where.
    starts = {e["host"] for e in events if e["kind"] == "stage.start"
              and (e.get("payload") or {}).get("stage") == "extract"}
    assert starts == set(HOSTS)
    messages = [(e["host"], str((e.get("payload") or {}).get("message"))) for e in events
                if e["kind"] == "console.info"]
    assert not [m for _, m in messages if "pulled from" in m]
    placed = {h for h, m in messages if "on storage box1 shares" in m and "no transfer" in m}
    assert placed == {"box2", "box3"}
    assert "relayed through the console: 0 B" in [m for _, m in messages]
    # One SSH connection per host: box1, the training box, is not connected twice.
    ups = [e["host"] for e in events if e["kind"] == "connection.up"
           and (e.get("payload") or {}).get("attempt") == 0]  # a reconnect says its attempt
    assert sorted(ups) == sorted(HOSTS), ups
    assert "every shard gathered on box1 (ran: 1 on box1, 2 on box2, 3 on box3)" in out
    assert "different stacks" not in out  # one environment on every box
    assert not (setup.out("sharded") / "extract-shards").exists()  # nothing left beside
    # A replay shows every host.
    assert main(["replay", str(session), "--print"]) == 0
    shown = capsys.readouterr().out
    assert all(h in shown for h in HOSTS)
    # The second run finds extract complete: no shard job at all.
    rc = console(setup, "run", "--host", "box1", "--pipeline", str(cfg), "--until", "extract")
    out, _ = capsys.readouterr()
    assert rc == 0 and "no shard to run" in out


@pytest.fixture
def box3_back(fleet: Fleet) -> Iterator[None]:
    yield
    fleet.stop_box("box3")
    fleet.start_box("box3")


@pytest.fixture
def box2_box3_back(fleet: Fleet) -> Iterator[None]:
    yield
    for name in ("box2", "box3"):
        fleet.stop_box(name)
        fleet.start_box(name)


def console_toml_with(setup: Setup, box: str, python: str, name: str) -> Path:
    """setup's console.toml with `box`'s python replaced."""
    text = setup.console_toml.read_text()
    at = text.index(f"[hosts.{box}]")
    end = text.find("[", at + 1)
    end = len(text) if end < 0 else end
    path = setup.root / f"console-{name}.toml"
    path.write_text(text[:at] + re.sub(r"^python = .*$", f"python = {json.dumps(python)}",
                                       text[at:end], flags=re.M) + text[end:])
    return path


def test_boxes_with_disks_of_their_own_copy_box_to_box(
        setup: Setup, fleet: Fleet, box2_box3_back: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    """box2 and box3 each with a disk of its own over the output storage, box1 reaching them
    (loopback): each shard is served once by its box and fetched by box1 straight from there
    (a one-time token, every file's sha256 checked on arrival), not one byte through the
    console; the gathered tensors equal the one-box extraction's, sample for sample."""
    storage = setup.root / "storage-direct"
    cfg = setup.config("direct", out=storage / "out-direct")
    fleet.start_box_apart("box2", storage)
    fleet.start_box_apart("box3", storage)
    rc = console(setup, "run", "--host", "box1", "--pipeline", str(cfg), "--until", "extract")
    out, err = capsys.readouterr()
    assert rc == 0, out[-3000:] + err[-3000:]
    for box, address in (("box2", "127.0.0.3"), ("box3", "127.0.0.4")):
        assert (f"{box} does not share box1's output storage; box1 reaches it at {address}: its "
                "shard is copied box to box, nothing through the console") in out
    assert "shares box1's output storage" not in out
    copied = {int(k): int(b) for k, b in re.findall(
        r"shard (\d): \d+ files \((\d+) bytes\) copied box to box from box\d to box1", out)}
    assert sorted(copied) == [2, 3] and all(copied.values())
    assert "relayed through the console: 0 B" in out
    assert f"copied box to box: {sum(copied.values())} B" in out
    assert "relaying through the console" not in out and "pulled from" not in out
    assert "every shard gathered on box1 (ran: 1 on box1, 2 on box2, 3 on box3)" in out
    assert_equal_to_one_box(setup, "direct")
    assert not list((setup.out("direct") / "extract").glob(".incoming/*"))  # staging emptied


def _seen_by(fleet: Fleet, box: str, path: Path) -> Path:
    """`path` as `box` sees it: through its sshd's root, in the mount namespace of a box with a
    disk of its own (start_box_apart), where this process sees the shared disk instead."""
    return Path(f"/proc/{fleet.sshd_pid(box)}/root") / str(path).lstrip("/")


def _local_shards_config(setup: Setup, name: str, out: Path) -> Path:
    """Extraction sharded over box1 and box2, training across them on the local shards."""
    cfg = setup.config(name, hosts=["box1", "box2"], out=out)
    with socket.socket() as sock:
        sock.bind(("127.0.0.2", 0))
        port = sock.getsockname()[1]
    # Batches of data.max_seq_len tokens: several a box, so the box with fewer pads (runs
    # empty batches) while the other trains.
    text = re.sub(r"^total_seq_len = \d+$", "total_seq_len = 64", cfg.read_text(), flags=re.M)
    cfg.write_text(text.replace("[train]\n", (
        '[train]\nhosts = ["box1", "box2"]\ndata = "local-shards"\n'
        f"rdzv_port = {port}\njoin_timeout = 120\n")))
    return cfg


def test_each_box_trains_on_the_shard_it_extracted(
        setup: Setup, fleet: Fleet, box2_box3_back: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`[train] data = "local-shards"`: box1 and box2 (box2 on a disk of its own) each extract
    their shard into their own output_dir and train across both on it, each rank reading only
    its own box's shard: nothing copied, nothing relayed, and the samples trained on in the
    epoch are every training sample of the one-box extraction, once."""
    storage = setup.root / "storage-local"
    cfg = _local_shards_config(setup, "local", storage / "out-local")
    fleet.start_box_apart("box2", storage)
    session = setup.root / "local.jsonl"
    rc = console(setup, "run", "--host", "box1", "--pipeline", str(cfg), "--until", "train",
                 session=session)
    out, err = capsys.readouterr()
    assert rc == 0, out[-3000:] + err[-3000:]
    assert "relayed through the console: 0 B" in out and "copied box to box: 0 B" in out
    assert "every shard extracted and kept on its own box (ran: 1 on box1, 2 on box2)" in out
    assert "extract sharded across box1, box2; each box keeps its own" in out  # not "gathered"
    assert "pulled from" not in out and "copied box to box from" not in out
    assert "relaying through the console" not in out  # nothing to relay: no estimate either
    out1 = setup.out("local")
    meta = json.loads((out1 / "extract" / "meta.json").read_text())
    shards = [tuple(r) for r in meta["shards"]]
    assert len(shards) == 2 and meta["local_shards"] == [0]
    ref = {p.name: p for p in setup.baseline.glob("hs_*.safetensors")}
    n = len(ref)
    assert shards[0][0] == 0 and shards[1][1] == n
    # Each box holds its own shard's files, byte for byte the one-box extraction's, and no other.
    for box, (start, end) in (("box1", shards[0]), ("box2", shards[1])):
        hs = _seen_by(fleet, box, out1) / "extract" / "hidden_states"
        names = sorted(p.name for p in hs.glob("hs_*.safetensors"))
        assert names == sorted(f"hs_{i}.safetensors" for i in range(start, end)), (box, names)
        for name in names:
            assert (hs / name).read_bytes() == ref[name].read_bytes(), (box, name)
    # What each rank trained on (its `rank R of 2` line, from each box's own log, as that
    # host's event): only its box's shard, and together every training sample (speculators'
    # split: the first 90 %) once.
    events = session_events(session, hosts=["box1", "box2"])
    done: dict[str, str] = {}
    stepped: dict[str, int] = {}
    for e in events:
        said = re.fullmatch(r"train: rank \d of 2: (\d+) steps \(epoch 0: samples (.*)\)",
                            str((e.get("payload") or {}).get("message", "")))
        if e["kind"] == "console.info" and said:
            assert str(e["host"]) not in done, e  # one rank a box
            done[str(e["host"])] = said.group(2)
            stepped[str(e["host"])] = int(said.group(1))
    assert sorted(done) == ["box1", "box2"], done
    train_n = int(n * 0.9)
    seen: list[int] = []
    for box, (start, end) in (("box1", shards[0]), ("box2", shards[1])):
        runs = [tuple(map(int, r.split(".."))) for r in done[box].split(", ")]
        mine = [i for a, b in runs for i in range(a, b + 1)]
        assert mine and all(start <= i < end for i in mine), (box, runs)
        seen += mine
    assert sorted(seen) == list(range(train_n))
    # Both ranks stepped as many times as the longer node has batches; the shorter one padded
    # with empty batches (loss 0), and the loss stayed finite.
    prepared = (out1 / "prepare" / "train.jsonl").read_text().splitlines()
    lengths = [len(json.loads(r)["input_ids"]) for r in prepared if r.strip()][:train_n]
    plan = plan_epoch(lengths, 0, NodeShards(tuple(shards)), 64, 1, seed=0, epoch=0)
    steps = len(plan[0][0])
    assert any(b == [] for node in plan for b in node[0]) and steps > 1
    assert stepped == {"box1": steps, "box2": steps}
    train = json.loads((out1 / "manifests" / "train.json").read_text())
    assert train["summary"]["world_size"] == 2 and train["summary"]["steps"] == steps
    assert math.isfinite(train["summary"]["final"]["loss"])
    kept = train["summary"]["ranks"][0]["samples"]["0"]  # box1's rank, in the manifest too
    assert [i for a, b in kept for i in range(a, b + 1)] == sorted(
        i for i in seen if i < shards[0][1])


def test_a_box_with_its_own_disk_is_relayed_only_when_asked(
        setup: Setup, fleet: Fleet, box3_back: None, capsys: pytest.CaptureFixture[str]) -> None:
    """box3 with a disk of its own over the output storage and out of box1's reach (its python
    in a network namespace of its own: a firewall between the boxes): without
    --relay-through-console one line, exit 2, nothing started; with it, the estimate first
    (bytes, measured links, time), box3's shard through the console (and only box3's),
    counted, equal to the one-box extraction."""
    storage = setup.root / "storage"
    cfg = setup.config("relay", out=storage / "out-relay")
    fleet.start_box_apart("box3", storage)
    apart = setup.root / "python-apart"
    apart.write_text(f'#!/bin/sh\nexec unshare --net -- {setup.python} "$@"\n')
    apart.chmod(0o755)
    toml = console_toml_with(setup, "box3", str(apart), "box3-apart")
    run = ["run", "--config", str(toml), "--no-record", "--host", "box1", "--pipeline",
           str(cfg), "--until", "extract"]
    rc = main(run)
    out, err = capsys.readouterr()
    assert rc == 2, out[-3000:] + err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        "error: extract host box3 does not share box1's output storage"), err
    assert re.search(r"and box1 cannot reach it for a box-to-box copy \(box3: cannot reach the "
                     r"shard box at http://127\.0\.0\.4:\d+/hello: .*refused", lines[0]), lines[0]
    assert "--relay-through-console" in lines[0] and "nothing started" in lines[0]
    assert not (setup.out("relay") / "prepare").exists()
    assert not list((storage / "out-relay").glob(".eagle3-shared-storage/*"))  # marker removed

    rc = main([*run, "--relay-through-console"])
    out, err = capsys.readouterr()
    assert rc == 0, out[-3000:] + err[-3000:]
    said = re.search(r"relaying through the console \(--relay-through-console\): about (\d+) B "
                     r"\(.*\) of hidden states from box3 to box1, about .* at the measured rates "
                     r"\(box3 -> console .*/s, console -> box1 .*/s\)", out)
    assert said, out[-3000:]
    assert out.index("relaying through the console") < out.index("shard 3/3 (samples")
    pulled = re.findall(r"shard 3: \d+ files \((\d+) bytes\) pulled from box3", out)
    assert len(pulled) == 1 and int(pulled[0]) > 0
    assert f"relayed through the console: {pulled[0]} B" in out
    # The estimate is tokens x bytes per token: the files are that plus their containers'
    # headers, which weigh at this tiny width (hidden 64), nothing at a real one.
    assert 0.5 < int(said.group(1)) / int(pulled[0]) < 1.5
    assert "box2 shares box1's output storage" in out and "box3 shares" not in out
    assert re.search(r"warning: box3 does not share box1's output storage and box1 cannot reach "
                     r"it for a box-to-box copy \(cannot reach .*\): its shard is relayed "
                     r"through the console", out), out[-3000:]
    assert "copied box to box" not in out
    assert_equal_to_one_box(setup, "relay")


def _wait_for(pred: object, timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()  # type: ignore[operator]
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def box2_back(fleet: Fleet) -> Iterator[None]:
    yield
    try:
        os.kill(fleet.sshd_pid("box2"), 0)
    except OSError:
        fleet.start_box("box2")


def lose_box2_mid_shard(setup: Setup, fleet: Fleet, name: str, *flags: str) -> tuple[int, str]:
    """`console run` (a process of its own) of config `name`; once box2's shard has started and
    before it is complete, box2 goes away: its job SIGKILLed, its sshd and every session of it
    killed. The console's exit status and output."""
    cfg = setup.config(name)
    runs = fleet.box_dir("box2") / "workdir" / "runs"
    before = set(runs.glob("*")) if runs.is_dir() else set()
    # Its output goes to a file, not a pipe nobody reads until the end: a full pipe would stall
    # the console (its event loop blocked writing), and every box would look lost.
    log = setup.root / f"console-{name}.log"
    sink = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", "run", "--host", "box1", "--config",
         str(setup.console_toml), "--no-record", "--pipeline", str(cfg), "--until", "extract",
         *flags],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=sink,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        def shard_started() -> Path | None:
            if proc.poll() is not None:  # the console ended before box2's shard started
                raise AssertionError(log.read_text(errors="replace")[-4000:])
            for run in sorted(set(runs.glob("*extract-*-shard-2-of-3*")) - before):
                job_log = run / "log"
                if job_log.exists() and '"type":"start","stage":"extract"' in job_log.read_text():
                    return run
            return None

        run = _wait_for(shard_started, 300, "box2's shard to start")
        assert isinstance(run, Path)
        argv = json.loads((run / "argv.json").read_text())
        shard_dir = Path(argv[argv.index("--dir") + 1])
        assert shard_dir.name == "shard-2-of-3"
        assert not (shard_dir / "shard.json").exists()  # mid-shard: not complete
        os.kill(int((run / "supervisor.pid").read_text()), signal.SIGKILL)
        os.killpg(int((run / "pid").read_text()), signal.SIGKILL)
        fleet.stop_box("box2")  # its sshd and every open session: the console's link is cut
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sink.close()
    return proc.returncode, log.read_text(errors="replace")


def test_box_lost_mid_shard_is_rerun_on_another_box(setup: Setup, fleet: Fleet,
                                                    box2_back: None) -> None:
    """With --reassign-lost the console notices box2 gone, reruns shard 2 on box1 or box3 in the
    same run, and the gathered result still equals the one-box extraction."""
    rc, text = lose_box2_mid_shard(setup, fleet, "lost", "--reassign-lost")
    assert rc == 0, text[-4000:]
    assert re.search(r"box2 lost while extracting shard 2/3 .*rerunning it on another box", text)
    assert re.search(r"every shard gathered on box1 \(ran: 1 on box1, 2 on box[13], 3 on box3\)",
                     text), text[-2000:]
    assert_equal_to_one_box(setup, "lost")


def test_box_lost_without_the_flag_keeps_the_rest_and_reassign_finishes(
        setup: Setup, fleet: Fleet, box2_back: None, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --reassign-lost: exit 3 naming box2 and the command that recovers, the other two
    shards gathered and kept; `console run --reassign box2` (box2 still down) then runs shard 2
    alone, on another box, and the result equals the one-box extraction."""
    rc, text = lose_box2_mid_shard(setup, fleet, "manual")
    assert rc == 3, text[-4000:]
    assert "box2 lost while extracting shard 2/3 (samples" in text
    assert re.search(r"error: 1 of 3 shards not extracted \(2 gathered on box1 and kept\): "
                     r"box2 lost; `console run --reassign box2` reruns", text), text[-2000:]
    hs = setup.out("manual") / "extract" / "hidden_states"
    kept = {p.name: p.stat().st_ino for p in hs.glob("hs_*.safetensors")}
    assert len(kept) == len(list(setup.baseline.glob("hs_*.safetensors"))) - 10  # all but shard 2's 10
    rc = console(setup, "run", "--host", "box1", "--pipeline", str(setup.config("manual")),
                 "--until", "extract", "--reassign", "box2")
    out, err = capsys.readouterr()
    assert rc == 0, out[-3000:] + err[-3000:]
    assert out.count("gathered on box1 already") == 2  # shards 1 and 3: not run again
    assert re.search(r"every shard gathered on box1 \(ran: 2 on box[13]\)", out)
    assert all(p.stat().st_ino == kept[p.name] for p in hs.glob("hs_*.safetensors") if p.name in kept)
    assert_equal_to_one_box(setup, "manual")


def test_bad_extract_hosts_and_an_unreachable_box(setup: Setup, fleet: Fleet,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A name console.toml does not define: exit 2, one line; a box down at start: exit 3, one
    line naming it and `--reassign`, nothing started on the training box; local shards with
    two boxes on one output_dir: exit 2, one line, nothing started."""
    runs = fleet.box_dir("box1") / "workdir" / "runs"
    before = sorted(runs.glob("*")) if runs.is_dir() else []
    bad = setup.config("bad", hosts=["box1", "nosuch"])
    rc = console(setup, "run", "--host", "box1", "--pipeline", str(bad))
    _, err = capsys.readouterr()
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == ["error: extract.hosts names 'nosuch', which console.toml does not define "
                     "(hosts: box1, box2, box3, local)"]
    fleet.stop_box("box3")
    try:
        cfg = setup.config("unreachable")
        rc = console(setup, "run", "--host", "box1", "--pipeline", str(cfg), "--until", "extract")
        _, err = capsys.readouterr()
        assert rc == 3
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(
            "error: extract host box3 cannot be reached, nothing started:"), err
        assert "--reassign box3" in lines[0] and "--reassign-lost" in lines[0]
        assert (sorted(runs.glob("*")) if runs.is_dir() else []) == before
        assert not setup.out("unreachable").exists()
    finally:
        fleet.start_box("box3")
    # train.data = "local-shards" with box2 on box1's disk and the same output_dir: both would
    # build their extract/ in one directory.
    out = setup.root / "out-local-shared"
    cfg = _local_shards_config(setup, "local-shared", out)
    rc = console(setup, "run", "--host", "box1", "--pipeline", str(cfg), "--until", "train")
    _, err = capsys.readouterr()
    assert rc == 2
    assert [ln for ln in err.splitlines() if ln.strip()] == [
        f'error: train.data = "local-shards": box2 share(s) box1\'s output_dir ({out}) on one '
        "storage, where every box would build its own extract: nothing started; give each box "
        'an output_dir of its own, or set train.data = "gathered" (shared storage moves no '
        "hidden-state byte either)"], err
    assert (sorted(runs.glob("*")) if runs.is_dir() else []) == before
    assert not (out / "prepare").exists()


def test_a_failed_shard_is_rerun_alone_a_box_down_at_start_and_force(
        setup: Setup, fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    """A shard job failing on a box that answers (box3's python lacks speculators): exit 1, one
    line naming box3 and shard 3 with the job's own error, the other two shards gathered and
    kept. The rerun, with box3 now down at start and --reassign-lost, redoes only shard 3, on
    box1 or box2, and says box3 was left out. Then --force reruns every shard on its own box.
    Each time the result equals the one-box extraction."""
    bare = "/usr/bin/python3"  # a real python without speculators (nor torch)
    assert subprocess.run([bare, "-c", "import speculators"], capture_output=True).returncode
    text = setup.console_toml.read_text()
    at = text.index("[hosts.box3]")
    end = text.index("[", at + 1)
    broken = setup.root / "console-box3-broken.toml"
    broken.write_text(text[:at] + re.sub(r"^python = .*$", f"python = {json.dumps(bare)}",
                                         text[at:end], flags=re.M) + text[end:])
    cfg = str(setup.config("failed"))
    run = ["run", "--host", "box1", "--pipeline", cfg, "--until", "extract"]
    assert main([run[0], "--config", str(broken), "--no-record", *run[1:]]) == 1
    out, err = capsys.readouterr()
    mine = [ln for ln in out.splitlines() if "error: shard 3/3 on box3 failed:" in ln]
    assert len(mine) == 1 and re.search(r"No module named|is not installed", mine[0]), out[-3000:]
    assert "error: 1 of 3 shards not extracted (2 gathered on box1 and kept): shard 3 on box3 " \
           "failed; `console run` again reruns only the shards not gathered" in out
    hs = setup.out("failed") / "extract" / "hidden_states"
    kept = {p.name: p.stat().st_ino for p in hs.glob("hs_*.safetensors")}
    first, last = map(int, re.findall(r"shard 3/3 \(samples (\d+)\.\.(\d+)", out)[0])
    assert set(kept) == {f"hs_{i}.safetensors" for i in range(first)}  # shards 1 and 2
    assert last == len(list(setup.baseline.glob("hs_*.safetensors"))) - 1  # shard 3: the rest, not kept

    fleet.stop_box("box3")
    try:
        rc = console(setup, *run, "--reassign-lost")
        out, err = capsys.readouterr()
    finally:
        fleet.start_box("box3")
    assert rc == 0, out[-3000:] + err[-3000:]
    assert "warning: extract host box3 cannot be reached" in out
    assert "its shard goes to another box (--reassign-lost)" in out
    assert out.count("gathered on box1 already") == 2  # shards 1 and 2: not run again
    assert re.search(r"every shard gathered on box1 \(ran: 3 on box[12]\)", out), out[-2000:]
    assert all(p.stat().st_ino == kept[p.name] for p in hs.glob("hs_*.safetensors") if p.name in kept)
    assert_equal_to_one_box(setup, "failed")

    rc = console(setup, *run, "--force")
    out, err = capsys.readouterr()
    assert rc == 0, out[-3000:] + err[-3000:]
    assert "gathered on box1 already" not in out
    assert "every shard gathered on box1 (ran: 1 on box1, 2 on box2, 3 on box3)" in out
    assert_equal_to_one_box(setup, "failed")
