"""The parts of regeneration through vLLM that need no server (issue 50): its config keys and
what they do to the prepare key, thinking kept in the template's form or dropped, the journal's
torn tail, and the one-line answers for a server that refuses or is gone. The server itself is
exercised for real in tests/pipeline/test_regenerate_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import config as pconfig
from pipeline import regenerate
from pipeline.errors import ConfigInvalid, PipelineError, RequestRefused
from pipeline.ranks import free_port
from pipeline.regen_client import Reply, api_url, base_url, chat, history_turn, turn_of
from pipeline.regen_config import regenerate_route
from pipeline.regen_journal import Journal
from tests.tiny_pipeline import tiny_pipeline


def _data(root: Path, lines: str, name: str = "pipeline.toml") -> pconfig.PipelineConfig:
    """The tiny pipeline with `lines` in [data], as root/name (one dataset for every name)."""
    base = tiny_pipeline(root)
    path = root / name
    path.write_text(base.read_text().replace("max_seq_len = 64", "max_seq_len = 64\n" + lines))
    return pconfig.load(path)


@pytest.mark.parametrize(("line", "error"), [
    ("regenerate_concurrency = 0", "data.regenerate_concurrency: must be >= 1"),
    ("regenerate_top_p = 0.0", "data.regenerate_top_p: must be in (0, 1]"),
    ("regenerate_temperature = -1", "data.regenerate_temperature: must be >= 0"),
    ("regenerate_timeout = 0", "data.regenerate_timeout: must be > 0"),
    ('vllm_url = "localhost:8000"', "data.vllm_url: 'localhost:8000' is not an http(s) URL"),
])
def test_bad_regenerate_keys_are_one_line(tmp_path: Path, line: str, error: str) -> None:
    with pytest.raises(ConfigInvalid, match=error.replace("(", r"\(").replace(")", r"\)")
                       .replace("]", r"\]")):
        _data(tmp_path, line)


def test_route_and_what_changes_the_prepare_key(tmp_path: Path) -> None:
    def digest(lines: str, name: str) -> str:
        return _data(tmp_path, lines, name).section_digest("data")

    assert regenerate_route(_data(tmp_path, "", "a.toml")) == "hf"
    # Without regenerate, the new keys change nothing (earlier manifests stay valid).
    assert digest("", "a.toml") == digest('regenerate_temperature = 0.7\nvllm_url = "http://h:1"',
                                          "b.toml")
    on = 'regenerate = true\nvllm_url = "http://127.0.0.1:1"'
    assert regenerate_route(_data(tmp_path, on, "c.toml")) == "vllm"
    # Where and how fast: not what. The sampling settings: what.
    assert digest(on, "c.toml") == digest('regenerate = true\nvllm_url = "http://127.0.0.2:9"\n'
                                          "regenerate_concurrency = 64", "d.toml")
    assert digest(on, "c.toml") != digest(on + "\nregenerate_temperature = 0.7", "e.toml")


@pytest.mark.parametrize("written", ["http://h:8000", "http://h:8000/", "http://h:8000/v1",
                                     "http://h:8000/v1/"])
def test_a_users_vllm_url_is_taken_with_or_without_v1(tmp_path: Path, written: str) -> None:
    """data.vllm_url written either way: regeneration keeps the server's base URL (as for the
    server prepare starts itself, tests/pipeline/test_train_online.py) and its requests go to
    the API's root under it."""
    cfg = _data(tmp_path, f'regenerate = true\nvllm_url = "{written}"')
    with regenerate.server(cfg, tmp_path / "server.log") as url:
        assert url == "http://h:8000"
    assert api_url(written) == "http://h:8000/v1"


def test_thinking_kept_in_the_templates_form_or_dropped() -> None:
    apart = Reply(content="42", reasoning="six times seven", completion_tokens=5)
    inline = Reply(content="<think>\nsix times seven\n</think>\n\n42", reasoning="",
                   completion_tokens=5)
    assert turn_of(apart, keep_thinking=True, template_reads_reasoning=True) == {
        "role": "assistant", "content": "42", "reasoning_content": "six times seven"}
    assert turn_of(apart, keep_thinking=True, template_reads_reasoning=False) == {
        "role": "assistant", "content": "<think>\nsix times seven\n</think>\n\n42"}
    assert turn_of(inline, keep_thinking=True, template_reads_reasoning=False)["content"] \
        == inline.content
    for reply in (apart, inline):
        assert turn_of(reply, keep_thinking=False, template_reads_reasoning=True) == {
            "role": "assistant", "content": "42"}
    assert history_turn({"role": "assistant", "content": inline.content}) == {
        "role": "assistant", "content": "42"}


def test_journal_cuts_a_torn_tail_and_keys_its_file(tmp_path: Path) -> None:
    j = Journal(tmp_path, "a" * 64)
    j.append({"i": 0, "status": "regenerated", "conversation": []})
    j.append({"i": 1, "status": "skipped", "reason": "HTTP 400: too long"})
    j.close()
    with open(j.path, "ab") as fh:
        fh.write(b'{"i": 2, "status": "regen')  # killed mid-write
    again = Journal(tmp_path, "a" * 64)
    assert sorted(again.records) == [0, 1]
    again.append({"i": 2, "status": "regenerated", "conversation": []})
    again.close()
    assert [json.loads(x)["i"] for x in again.path.read_text().splitlines()] == [0, 1, 2]
    other = Journal(tmp_path, "b" * 64)  # another key: a fresh journal, the old one gone
    other.close()
    assert other.records == {} and not again.path.exists()
    fresh = Journal(tmp_path, "b" * 64, fresh=True)
    fresh.close()


def test_a_server_gone_is_fatal_and_a_url_is_normalised() -> None:
    assert base_url("http://h:8000/v1/") == base_url("http://h:8000") == "http://h:8000"
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(PipelineError, match="stopped answering"):
        chat(url, "m", [{"role": "user", "content": "hi"}], {}, timeout=5)
    assert issubclass(RequestRefused, Exception)


def test_the_console_prints_tokens_per_second_and_an_eta() -> None:
    from console.printer import RULES
    from remote.spine import events as ev

    line = RULES[ev.STAGE_PROGRESS](ev.STAGE_PROGRESS, {
        "stage": "prepare", "done": 40, "total": 100, "unit": "conversations regenerated",
        "rate": 8.0, "tokens_per_s": 410.5, "eta_s": 7.5})
    assert line == ("prepare: 40/100 conversations regenerated  40.0% 8 conversations "
                    "regenerated/s, 410 tokens/s, ETA 7.5 s"), line


def test_a_request_past_its_time_limit_is_refused_not_fatal() -> None:
    import socket

    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(RequestRefused, match=r"^timed out after 0.5 s$"):
            chat(url, "m", [{"role": "user", "content": "hi"}], {}, timeout=0.5)
