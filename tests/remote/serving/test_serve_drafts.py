"""`serve start --draft D --k K` without an engine: the --speculative-config the box side builds
for each draft, the refusals made before any job is launched, and what a serve job's own
command line says it speculates with. The live engines are tests/remote/serving/
test_engine_drafts.py and, for ngram and a head directory, the servers of
tests/e2e/test_bench_matrix_engine.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.cli import build_parser
from pipeline import config as config_mod
from pipeline import serve as box_serve
from pipeline.errors import PipelineError
from pipeline.serve import NGRAM_K, NGRAM_LOOKUP, draft_config, server_argv
from remote.errors import UsageError
from remote.serving.records import Served, draft_from_argv
from remote.serving.roles import DRAFTS
from remote.serving.serve import check_draft
from tests.tiny_pipeline import pipeline_toml, tiny_dataset, tiny_model


def _cfg(tmp_path: Path, *, trained: bool = True) -> config_mod.PipelineConfig:
    tiny_model(tmp_path, "target", architectures=["LlamaForCausalLM"], model_type="llama",
               num_attention_heads=2, num_key_value_heads=1, vocab_size=64000)
    tiny_dataset(tmp_path)
    cfg = config_mod.load(pipeline_toml(tmp_path, model="target"), check_disk=False)
    if trained:
        head = tmp_path / "out" / "train" / "checkpoint"
        head.mkdir(parents=True)
        (head / "config.json").write_text("{}")
        (head.parent / "speculative_config.json").write_text(json.dumps(
            {"method": "eagle3", "model": str(head), "num_speculative_tokens": 3,
             "draft_tensor_parallel_size": 1}))
    return cfg


def _spec(argv: list[str]) -> dict[str, object] | None:
    if "--speculative-config" not in argv:
        return None
    return dict(json.loads(argv[argv.index("--speculative-config") + 1]))


def test_the_console_and_the_box_name_the_same_drafts() -> None:
    assert DRAFTS == box_serve.DRAFTS


def test_each_draft_gets_its_speculative_config(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    argv = lambda **kw: server_argv(cfg, host="127.0.0.1", port=8000, baseline=False, **kw)  # noqa: E731
    pipeline = _spec(argv())
    assert pipeline is not None and pipeline["num_speculative_tokens"] == 3
    assert pipeline["model"] == str(tmp_path / "out" / "train" / "checkpoint")
    assert _spec(argv(draft="pipeline", k=1)) == {**pipeline, "num_speculative_tokens": 1}
    assert _spec(argv(draft="none")) is None
    assert _spec(argv(draft="ngram")) == {"method": "ngram", "num_speculative_tokens": NGRAM_K,
                                          **NGRAM_LOOKUP}
    assert _spec(argv(draft="ngram", k=5))["num_speculative_tokens"] == 5  # type: ignore[index]

    # A head directory: eagle3 at its absolute path; K from its speculators config, else train's.
    hf = tmp_path / "heads" / "hf"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    assert _spec(argv(draft=str(hf))) == {"method": "eagle3", "model": str(hf.resolve()),
                                          "num_speculative_tokens": 3,
                                          "draft_tensor_parallel_size": 1}
    spec_fmt = tmp_path / "heads" / "spec"
    spec_fmt.mkdir()
    (spec_fmt / "config.json").write_text(json.dumps({
        "speculators_model_type": "eagle3",
        "speculators_config": {"proposal_methods": [{"speculative_tokens": 5}]}}))
    assert _spec(argv(draft=str(spec_fmt)))["num_speculative_tokens"] == 5  # type: ignore[index]
    assert _spec(argv(draft=str(spec_fmt), k=2))["num_speculative_tokens"] == 2  # type: ignore[index]


def test_drafts_that_cannot_be_served_are_one_line(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    with pytest.raises(PipelineError, match="no such head directory"):
        draft_config(cfg, str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(PipelineError, match=r"has no config\.json"):
        draft_config(cfg, str(tmp_path / "empty"))
    with pytest.raises(PipelineError, match="drafts nothing"):
        draft_config(cfg, "none", 3)
    with pytest.raises(PipelineError, match=">= 1"):
        draft_config(cfg, "ngram", 0)
    with pytest.raises(PipelineError, match="target alone"):
        server_argv(cfg, host="h", port=1, baseline=True, draft="ngram")
    # The baseline needs no trained head at all.
    untrained = _cfg(tmp_path / "u", trained=False)
    assert _spec(server_argv(untrained, host="h", port=1, baseline=True)) is None
    assert _spec(server_argv(untrained, host="h", port=1, baseline=False, draft="ngram"))


def test_the_console_refuses_before_launching() -> None:
    assert check_draft("speculative", "pipeline", None) == ("pipeline", None)
    assert check_draft("speculative", "/heads/a ", 2) == ("/heads/a", 2)
    assert check_draft("baseline", "pipeline", None) == ("none", None)
    for role, draft, k, said in (("baseline", "ngram", None, "target alone"),
                                 ("baseline", "none", 3, "target alone"),
                                 ("speculative", "none", 2, "drafts nothing"),
                                 ("speculative", "ngram", 0, "at least 1"),
                                 ("speculative", " ", None, "expected pipeline")):
        with pytest.raises(UsageError, match=said):
            check_draft(role, draft, k)


def test_cli_takes_draft_and_k() -> None:
    args = build_parser().parse_args(["serve", "start", "--host", "h", "--demo",
                                      "--draft", "ngram", "--k", "4"])
    assert (args.draft, args.k) == ("ngram", 4)
    args = build_parser().parse_args(["serve", "start", "--host", "h", "--demo"])
    assert (args.draft, args.k) == ("pipeline", None)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "start", "--host", "h", "--demo", "--k", "0"])


def test_a_jobs_command_line_says_its_draft() -> None:
    base = ["/py", "-m", "pipeline", "serve", "--config", "c", "--bind", "h", "--port", "1"]
    assert draft_from_argv(base) == ("", None)  # started before drafts
    assert draft_from_argv([*base, "--draft=/heads/-x", "--k=2", "--", "--k=9"]) == ("/heads/-x", 2)
    assert draft_from_argv([*base, "--baseline"]) == ("none", None)
    served = Served(role="speculative", url="http://h:1", run_id="r", seconds=1.0,
                    draft="ngram", k=3)
    assert "draft ngram, K=3" in served.line()
    assert served.event_fields()["draft"] == "ngram"
    assert "draft" not in Served(role="speculative", url="u", run_id="r", seconds=None).line()


def test_served_json_keeps_the_draft_and_k() -> None:
    """served.json written with a draft and K reads back with them; one written before drafts
    (no keys) or with a K that is not a count reads as not known."""
    from remote.jobs.records import RunInfo
    from remote.serving.records import parse_record

    info = RunInfo(run_id="r", name="serve-speculative", argv=[], pid=42, started="t",
                   state="running", returncode=None, ended=None, log_path="/w/runs/r/log",
                   log_size=0)
    base = {"role": "speculative", "url": "http://h:1", "model": "m", "pid": 42, "seconds": 3.0}
    got = parse_record(json.dumps({**base, "draft": "/heads/a", "k": 2}), info)
    assert got is not None and (got.draft, got.k) == ("/heads/a", 2)
    for extra in ({}, {"draft": None, "k": True}, {"k": 1e400}, {"k": -1}):
        old = parse_record(json.dumps({**base, **extra}).replace("Infinity", "1e400"), info)
        assert old is not None and (old.draft, old.k) == ("", None), extra
