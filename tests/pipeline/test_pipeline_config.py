"""Bad pipeline input is refused before any work starts, with one clear line and exit code 2.

These run the config validation of pipeline/config.py (standard library only, no torch), through
the library, through `python -m pipeline validate` on the box side, and through `console run`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from console.cli import main as console_main
from pipeline import config as pconfig
from pipeline import manifest, state_size
from pipeline.errors import ConfigInvalid, NotEnoughDisk
from remote.spine.events import Event
from tests.local_box import local_console_toml
from tests.tiny_pipeline import pipeline_toml, tiny_dataset, tiny_model, tiny_pipeline

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def good(tmp_path: Path) -> Path:
    return tiny_pipeline(tmp_path)


def test_a_good_config_resolves_layers_and_bytes_per_token(good: Path) -> None:
    cfg = pconfig.load(good)
    assert cfg.num_layers == 8 and cfg.hidden_size == 64
    assert cfg.all_layer_ids == [2, 4, 5, 8]  # the last layer's id N is always added
    assert state_size.bytes_per_token(cfg) == 4 * 64 * 2 + 16
    assert cfg.output_dir == good.parent / "out"


def test_default_layer_ids_follow_vllm(tmp_path: Path) -> None:
    tiny_model(tmp_path, num_hidden_layers=61)
    tiny_dataset(tmp_path)
    p = pipeline_toml(tmp_path)
    p.write_text(p.read_text().replace("layer_ids = [2, 4, 5]\n", ""))
    assert pconfig.load(p).all_layer_ids == [2, 30, 58, 61]


def test_missing_model_path(tmp_path: Path) -> None:
    tiny_dataset(tmp_path)
    with pytest.raises(ConfigInvalid, match=r"target\.model: .*nowhere is not a directory"):
        pconfig.load(pipeline_toml(tmp_path, model="nowhere"))


def test_dataset_without_conversations(tmp_path: Path) -> None:
    tiny_model(tmp_path)
    tiny_dataset(tmp_path, [{"text": "just prose"}])
    with pytest.raises(ConfigInvalid, match=r"data\.dataset: .* row 0 has no conversations "
                       r".*found keys \['text'\]"):
        pconfig.load(pipeline_toml(tmp_path))


def test_missing_dataset_file(tmp_path: Path) -> None:
    tiny_model(tmp_path)
    with pytest.raises(ConfigInvalid, match=r"data\.dataset: .*absent\.jsonl not found"):
        pconfig.load(pipeline_toml(tmp_path, dataset="absent.jsonl"))


@pytest.mark.parametrize("ids, why", [
    ("[2, 4, 8]", r"\[8\] out of range: the target has 8 layers, so ids run 1\.\.7"),
    ("[0, 4, 5]", r"\[0\] out of range"),
    ("[2, 2, 5]", "repeats a layer"),
    ("[2, 5]", "exactly 3 auxiliary layers"),
])
def test_layer_ids_out_of_range(tmp_path: Path, ids: str, why: str) -> None:
    with pytest.raises(ConfigInvalid, match=r"extract\.layer_ids: .*" + why):
        pconfig.load(tiny_pipeline(tmp_path, layer_ids=ids))


def test_not_enough_disk_gives_the_numbers(tmp_path: Path) -> None:
    with pytest.raises(NotEnoughDisk, match=r"not enough disk under .*out: .* need .* \(\d+ bytes\)"
                       r" \+ reserve .* free .* \(\d+ bytes\)"):
        pconfig.load(tiny_pipeline(tmp_path, reserve=str(10**18)))


def test_bytes_per_token_and_the_disk_refusal_at_kimi_width(tmp_path: Path) -> None:
    """Kimi-K2.5's text body (hidden 7168, 61 layers; docs/design.md §11): 3 auxiliary layers
    + the last, bf16 = 57,344 bytes of states per token, + 16 for the int64 id and mask. A
    dataset of 50k samples x 4096 tokens projects 10.7 TiB: refused with those figures."""
    tiny_model(tmp_path, num_hidden_layers=61, hidden_size=7168, vocab_size=163840,
               intermediate_size=18432, num_attention_heads=64)
    tiny_dataset(tmp_path)
    cfg = pconfig.load(pipeline_toml(tmp_path, layer_ids="[]"), check_disk=False)
    assert cfg.all_layer_ids == [2, 30, 58, 61]
    assert state_size.bytes_per_token(cfg) == 4 * 7168 * 2 + 16 == 57_344 + 16
    assert state_size.bytes_per_token(cfg, "0.9") == 57_360  # the hf route stores bf16 in 0.9 too
    projected = 4096 * 50_000 * 57_360
    text = pipeline_toml(tmp_path, layer_ids="[]").read_text().replace(
        "max_seq_len = 64", "max_seq_len = 4096\nsamples = 50000").replace(
        "total_seq_len = 128", "total_seq_len = 8192")
    (tmp_path / "big.toml").write_text(text)
    with pytest.raises(NotEnoughDisk, match=rf"need 10\.7 TiB \({projected} bytes\) \+ reserve"):
        pconfig.load(tmp_path / "big.toml")


def test_unknown_key_and_wrong_type(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid, match=r"train: bogus: unknown key"):
        pconfig.load(tiny_pipeline(tmp_path, extra="bogus = 1\n"))
    with pytest.raises(ConfigInvalid, match=r"train: epochs: must be int"):
        pconfig.load(pipeline_toml(tmp_path, extra='epochs = "ten"\n'))


def test_box_side_validate_exits_2_with_one_line(tmp_path: Path) -> None:
    tiny_dataset(tmp_path)
    cfg = pipeline_toml(tmp_path, model="nowhere")
    done = subprocess.run([sys.executable, "-m", "pipeline", "validate", "--config", str(cfg)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "target.model" in done.stderr and "Traceback" not in done.stderr


def test_console_run_refuses_bad_config_before_work(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tiny_pipeline(tmp_path, layer_ids="[1, 2, 99]")
    console_toml = local_console_toml(tmp_path)
    rc = console_main(["run", "--host", "local", "--config", str(console_toml),
                       "--pipeline", str(cfg), "--no-record"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "extract.layer_ids" in err and "[99] out of range" in err
    assert not (tmp_path / "out").exists()  # nothing was started
    # The spelling: --config naming a pipeline TOML is taken as --pipeline.
    rc = console_main(["run", "--host", "local", "--config", str(cfg), "--no-record"])
    assert rc == 2 and "[99] out of range" in capsys.readouterr().err
    assert not (tmp_path / "box" / "runs").exists() or not any((tmp_path / "box" / "runs").iterdir())


def test_manifest_status_follows_config_and_outputs(good: Path) -> None:
    cfg = pconfig.load(good)
    assert manifest.status(cfg, "prepare").reason == "no manifest"
    out = cfg.output_dir / "prepare"
    out.mkdir(parents=True)
    f = out / "train.jsonl"
    f.write_text("{}\n")
    key = manifest.stage_key(cfg, "prepare")
    assert key is not None
    manifest.write(cfg, "prepare", [f], key=key, summary={}, seconds=0.1)
    assert manifest.status(cfg, "prepare").complete
    assert manifest.stage_key(cfg, "extract") is not None  # its input is now complete
    f.write_text("{}\n{}\n")
    assert "changed size" in manifest.status(cfg, "prepare").reason
    f.write_text("{}\n")
    changed = pconfig.load(pipeline_toml(good.parent, extra="", layer_ids="[2, 4, 5]").parent
                           / "pipeline.toml")
    assert manifest.status(changed, "prepare").complete
    good.write_text(good.read_text().replace("max_seq_len = 64", "max_seq_len = 32"))
    assert "config or inputs changed" in manifest.status(pconfig.load(good), "prepare").reason


def test_vllm_backends_get_the_same_layers_in_their_own_conventions(good: Path) -> None:
    """The vLLM paths cannot run here (no GPU); their layer-id translation can be checked."""
    from pipeline.stages.extract import worker_03_layer_ids
    from pipeline.stages.extract_server import vllm_09_server_argv

    cfg = pconfig.load(good)  # ids [2, 4, 5] + 8
    # 0.3's worker records the output of layer L: ask for L-1 to get the state entering L.
    assert worker_03_layer_ids(cfg) == [1, 3, 4, 7]
    argv = vllm_09_server_argv(cfg, Path("/staging"), 8765)
    spec = json.loads(argv[argv.index("--speculative_config") + 1])
    assert spec["method"] == "extract_hidden_states"
    assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5, 8]
    kv = json.loads(argv[argv.index("--kv_transfer_config") + 1])
    assert kv["kv_connector"] == "ExampleHiddenStatesConnector"
    assert kv["kv_connector_extra_config"]["shared_storage_path"] == "/staging"
    # the OpenAI server module (a CPU build has no "vllm" distribution for `vllm serve`), no
    # prefix cache (cached tokens get no rows), vLLM's own chunk size unless set, eager on CPU
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "--no-enable-prefix-caching" in argv and "--max-num-batched-tokens" not in argv
    assert "--enforce-eager" not in argv
    good.write_text(good.read_text().replace("reserve_bytes = 0",
                                             "reserve_bytes = 0\nmax_num_batched_tokens = 32"))
    argv = vllm_09_server_argv(pconfig.load(good), Path("/staging"), 8765, cpu=True)
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "32" and "--enforce-eager" in argv
    assert argv[argv.index("--max-num-seqs") + 1] == "32"  # vLLM: chunk >= max_num_seqs
    good.write_text(good.read_text().replace("max_num_batched_tokens = 32",
                                             "max_num_batched_tokens = -1"))
    with pytest.raises(ConfigInvalid, match="max_num_batched_tokens: must be >= 0"):
        pconfig.load(good)


def _run_local(tmp_path: Path, pipeline: Path) -> tuple[int, list[Event]]:
    """`console run` of `pipeline` on the local host (workdir tmp_path/box), recorded to
    tmp_path/s.jsonl: its exit code and the session's events."""
    from console.sessions.reader import SessionReader

    console_toml = local_console_toml(tmp_path)
    session = tmp_path / "s.jsonl"
    rc = console_main(["run", "--host", "local", "--config", str(console_toml),
                       "--pipeline", str(pipeline), "--session", str(session)])
    with SessionReader(session) as reader:
        return rc, list(reader.events())


def test_a_failing_stage_ends_the_run_with_exit_1_and_no_manifest(
        good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The model directory has a config but no tokenizer: prepare fails on the box; the box
    runner stops there, the console reports stage.end ok=false and every later stage as not
    run with why, and exits 1."""
    rc, events = _run_local(tmp_path, good)
    assert rc == 1
    from remote.spine import events as ev
    ends = [e.payload for e in events if e.kind == ev.STAGE_END]
    assert [(p["stage"], p["ok"]) for p in ends] == [("prepare", False)]
    started = [e.payload["name"] for e in events if e.kind == ev.JOB_STARTED]
    assert started == ["pipeline"]  # one box runner, no stage after the failed one
    not_run = [(e.payload["stage"], e.payload["reason"]) for e in events
               if e.kind == ev.STAGE_NOT_RUN]
    assert not_run == [(s, "prepare failed (exit 1): the runner stopped there")
                       for s in ("extract", "vocab", "train", "evaluate")]
    assert not (good.parent / "out" / "manifests" / "prepare.json").exists()
    assert "stage prepare failed" in capsys.readouterr().out


def test_stage_records_become_stage_events() -> None:
    """What the console makes of each record the box runner's log holds (and of lines that are
    not one): the outcome of the run, folded from the events the tail parses, and nothing else."""
    from remote.jobs.blocks import stage_events
    from remote.pipeline_runner import RunOutcome
    from remote.spine.events import utc_now

    out = RunOutcome("run-1", "started")
    lines = [
        '@@eagle3 {"type":"info","stage":"pipeline","message":"the box carries the pipeline"}',
        '@@eagle3 {"type":"skipped","stage":"prepare","reason":"manifest matches","bytes":9}',
        '@@eagle3 {"type":"start","stage":"extract","reason":"no manifest"}',
        '@@eagle3 {"type":"progress","stage":"extract","done":3,"total":9,"unit":"samples",'
        '"rate":1.5,"tokens":42}',
        '@@eagle3 {"type":"progress", broken json',
        "plain library chatter",
        '@@eagle3 {"type":"info","stage":"extract","message":"resuming"}',
        '@@eagle3 {"type":"end","stage":"extract","ok":true,"seconds":2.5,"outputs":["a"],'
        '"summary":{"samples":9}}',
        '@@eagle3 {"type":"start","stage":"vocab","reason":"no manifest"}',
        '@@eagle3 {"type":"error","stage":"vocab","message":"vocab failed: OSError: disk"}',
        '@@eagle3 {"type":"end","stage":"vocab","ok":false,"seconds":1,"error":"vocab exited 1"}',
        '@@eagle3 {"type":"not_run","stage":"train","reason":"vocab failed (exit 1)"}',
        '@@eagle3 {"type":"not_run","stage":"evaluate","reason":"vocab failed (exit 1)"}',
        '@@eagle3 {"type":"finished","stage":"pipeline","ok":false,"returncode":1}',
    ]
    for event in stage_events("local", "run-1", "pipeline", lines, list(range(len(lines))),
                              utc_now()).values():
        out.fold(event)
    assert {s: o.status for s, o in out.stages.items()} == {
        "prepare": "skipped", "extract": "done", "vocab": "failed", "train": "not run",
        "evaluate": "not run"}
    assert out.stages["extract"].result == {"samples": 9}
    assert out.stages["extract"].metrics == {"tokens": 42}  # what its progress carried
    assert out.stages["vocab"].error == "vocab exited 1"  # the runner's end record's words
    assert out.stages["train"].reason == "vocab failed (exit 1)"
    assert not out.ok and out.failed is out.stages["vocab"]


async def test_a_cancelled_box_runner_says_which_stages_did_not_run(good: Path,
                                                                     tmp_path: Path) -> None:
    """The console's cancel TERMs the runner's process group: the running stage ends, the
    runner records it as failed (cancelled) and every later stage as not run, then exits 143;
    the console following it shows the same."""
    import asyncio

    from remote.errors import PipelineFailed
    from remote.link.hosts import HostConfig
    from remote.link.transport import LocalTransport
    from remote.ops import pipeline as ops
    from remote.pipeline_runner import PipelineRunner
    from remote.spine import events as ev
    from remote.spine.bus import EventBus

    bus = EventBus()
    seen: list[ev.Event] = []
    bus.add_callback(seen.append)
    host = HostConfig(name="local", python=sys.executable, workdir=str(tmp_path / "box"))
    transport = LocalTransport("local")
    await transport.connect()
    try:
        runner = PipelineRunner(transport, host, bus, in_place=True)
        info, how = await runner.start(str(good))
        assert how == "started"

        async def cancel_once_prepare_started() -> None:
            while not any(e.kind == ev.STAGE_START for e in seen):
                await asyncio.sleep(0.05)
            await ops.cancel(transport, host, bus, info.run_id, grace=30)

        canceller = asyncio.create_task(cancel_once_prepare_started())
        with pytest.raises(PipelineFailed, match="stage prepare failed") as failed:
            await ops._follow(runner, info, how, None)
        await canceller
    finally:
        await transport.close()
    outcome = failed.value.outcome
    assert outcome.info is not None and outcome.info.state == "cancelled"
    assert outcome.info.returncode == 143
    assert outcome.stages["prepare"].status == "failed"
    assert {s: o.reason for s, o in outcome.stages.items() if o.status == "not run"} == {
        s: "the run was cancelled" for s in ("extract", "vocab", "train", "evaluate")}
    assert [e.payload["stage"] for e in seen if e.kind == ev.STAGE_NOT_RUN] == [
        "extract", "vocab", "train", "evaluate"]
