"""Regeneration through a real vLLM (issue 50; pipeline/regenerate.py), on the demo target of
the session's engine fixture:

- a server given by `data.vllm_url` (the engine box's baseline server, behind a counting proxy):
  `console run --host local --pipeline P` regenerates every training conversation, skips the one
  longer than the server's context with the server's reason, and trains on the result;
- a prepare SIGKILLed halfway reruns to the same conversations, none of those it finished asked
  of the server again, multi-turn ones regenerated on their regenerated history;
- `extract.backend = "vllm"` without a URL: prepare starts its own server with the extract
  stage's engine settings (box environment python), stops it, and the run trains on the result.

Engine starts: the baseline server (shared with other engine tests) and, in the last test, the
regeneration server and the extraction engine (one at a time: the fixture's server is stopped).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.cli import main as console_main
from tests.box_env import run_env
from tests.counting_proxy import CountingProxy
from tests.engine_fixture import EngineBox, answers
from tests.local_box import local_console_toml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
LONG_WORDS = 300  # past the demo target's 256-token context


@pytest.fixture(scope="module")
def baseline(engine_box: EngineBox) -> EngineBox:
    engine_box.use("baseline")
    assert answers(baseline_url(engine_box))
    return engine_box


def baseline_url(box: EngineBox) -> str:
    """Where `serve start --baseline` listens: the host's vllm_url port + 1."""
    return f"http://127.0.0.1:{box.port + 1}"


def dataset(box: EngineBox, path: Path, *, singles: int, pairs: int, long: bool) -> list[Any]:
    """Demo rows with distinct first user turns: `singles` one-turn, `pairs` two-turn (two demo
    rows back to back), and one whose user turn is longer than the server's context."""
    rows, seen = [], set()
    for line in (box.demo_dir / "conversations.jsonl").read_text().splitlines():
        conv = json.loads(line)["conversations"]
        if conv[0]["content"] not in seen:
            seen.add(conv[0]["content"])
            rows.append(conv)
    convs = rows[:singles]
    convs += [rows[singles + 2 * k] + rows[singles + 2 * k + 1] for k in range(pairs)]
    if long:
        words = " ".join(f"n{i % 60}" for i in range(LONG_WORDS))
        convs.append([{"role": "user", "content": words},
                      {"role": "assistant", "content": "n1 n2"}])
    path.write_text("".join(json.dumps({"conversations": c}) + "\n" for c in convs))
    return convs


def regen_config(box: EngineBox, tmp_path: Path, data: Path, *lines: str,
                 backend: str = "hf") -> Path:
    demo = box.demo_dir / "conversations.jsonl"
    return box.demo_config(
        tmp_path / "pipeline.toml", (f'dataset = "{demo}"', f'dataset = "{data}"'),
        ("eval_samples = 8", "eval_samples = 2\nregenerate = true\n"
         "regenerate_max_new_tokens = 40\n" + "\n".join(lines)),
        ('backend = "hf"', f'backend = "{backend}"'), ("epochs = 8", "epochs = 1"))


def journal(out: Path) -> list[dict[str, Any]]:
    files = list((out / "regenerate").glob("journal-*.jsonl"))
    if not files:
        return []
    return [json.loads(x) for x in files[0].read_text().splitlines() if x.endswith("}")]


def prepare_summary(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "manifests" / "prepare.json").read_text())["summary"])


def assistant_turns(conv: list[dict[str, str]]) -> int:
    return sum(t["role"] == "assistant" for t in conv)


@pytest.fixture
def proxy(baseline: EngineBox) -> Iterator[CountingProxy]:
    p = CountingProxy(baseline_url(baseline))
    try:
        yield p
    finally:
        p.close()


def test_regenerates_through_a_server_at_vllm_url_and_trains(baseline: EngineBox,
                                                              proxy: CountingProxy,
                                                              tmp_path: Path) -> None:
    convs = dataset(baseline, tmp_path / "data.jsonl", singles=14, pairs=2, long=True)
    cfg = regen_config(baseline, tmp_path, tmp_path / "data.jsonl",
                       f'vllm_url = "{proxy.url}"', "regenerate_concurrency = 4")
    rc = console_main(["run", "--host", "local", "--config", str(local_console_toml(tmp_path)),
                       "--pipeline", str(cfg), "--until", "train", "--no-record"])
    assert rc == 0
    out = tmp_path / "out"
    s = prepare_summary(out)
    records = journal(out)
    train_n = len(convs) - 2  # two held out
    assert len(records) == train_n and len({r["i"] for r in records}) == train_n
    skipped = [r for r in records if r["status"] == "skipped"]
    # The long conversation (held out by chance would leave none skipped: the seed keeps it in).
    assert len(skipped) == 1 and skipped[0]["reason"].startswith("HTTP 400"), skipped
    assert "length" in skipped[0]["reason"] or "context" in skipped[0]["reason"], skipped
    assert s["regenerated"] == train_n - 1 and s["skipped"] == 1
    assert s["skip_reasons"] == {skipped[0]["reason"]: 1}
    assert s["regenerated_tokens"] == sum(r.get("tokens", 0) for r in records) > 0
    assert s["regeneration"]["temperature"] == 0.0 and s["regeneration"]["max_tokens"] == 40
    assert s["regeneration"]["server"] == proxy.url
    # Every assistant turn of every regenerated conversation asked once, the long one once.
    regenerated = [r["conversation"] for r in records if r["status"] == "regenerated"]
    assert proxy.count() == sum(map(assistant_turns, regenerated)) + 1
    # The answers trained on are the server's own: asked again directly, it says the same.
    single = next(r for r in records if r["status"] == "regenerated"
                  and len(r["conversation"]) == 2)
    req = json.dumps({"model": proxy.chats[0]["model"], "messages": single["conversation"][:1],
                      "max_tokens": 40, "temperature": 0.0, "top_p": 1.0,
                      "seed": single["i"]}).encode()
    with urllib.request.urlopen(urllib.request.Request(
            baseline_url(baseline) + "/v1/chat/completions", data=req,
            headers={"Content-Type": "application/json"}), timeout=120) as resp:
        again = json.loads(resp.read())["choices"][0]["message"]["content"].strip()
    assert single["conversation"][1]["content"] == again
    rows = (out / "prepare" / "train.jsonl").read_text().splitlines()
    assert len(rows) == s["kept"] == s["samples"] <= s["regenerated"]
    assert json.loads((out / "manifests" / "train.json").read_text())["summary"]


def test_sigkilled_prepare_resumes_without_asking_twice(baseline: EngineBox, tmp_path: Path
                                                        ) -> None:
    proxy = CountingProxy(baseline_url(baseline), delay_s=0.4)
    try:
        convs = dataset(baseline, tmp_path / "data.jsonl", singles=24, pairs=4, long=False)
        cfg = regen_config(baseline, tmp_path, tmp_path / "data.jsonl",
                           f'vllm_url = "{proxy.url}"', "regenerate_concurrency = 2")
        out = tmp_path / "out"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-m", "pipeline", "prepare", "--config", str(cfg)]
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while len(journal(out)) < 10:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(1)  # a request the client sent just before its death reaches the proxy
        before = {r["i"] for r in journal(out)}
        asked_before = proxy.count()
        assert 10 <= len(before) < len(convs) - 2

        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        records = journal(out)
        train_n = len(convs) - 2
        assert sorted(r["i"] for r in records) == list(range(train_n))  # each once
        assert all(r["status"] == "regenerated" for r in records)
        s = prepare_summary(out)
        assert s["regenerated"] == train_n and s["resumed"] == len(before) and s["skipped"] == 0

        # No conversation finished before the kill was asked again after it.
        first_user = {r["i"]: r["conversation"][0]["content"] for r in records}
        finished = {first_user[i] for i in before}
        after = proxy.chats[asked_before:]
        assert not [c for c in after if c["messages"][0]["content"] in finished]
        # What was asked after: the other conversations' turns, in flight ones once more at most.
        rest = [r["conversation"] for r in records if r["i"] not in before]
        assert len(after) == sum(map(assistant_turns, rest))
        # Multi-turn: the second turn was asked on the regenerated first answer.
        pairs = [r["conversation"] for r in records if len(r["conversation"]) == 4]
        assert pairs
        for conv in pairs:
            asked = [c for c in proxy.chats if len(c["messages"]) == 3
                     and c["messages"][0]["content"] == conv[0]["content"]]
            assert asked and all(c["messages"][1]["content"] == conv[1]["content"]
                                 for c in asked), (conv, asked)
    finally:
        proxy.close()


def _servers_with(needle: str) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "api_server" in cmd and needle in cmd:
            pids.append(int(pid))
    return pids


def test_vllm_backend_starts_its_own_server_and_trains(engine_box: EngineBox,
                                                       tmp_path: Path) -> None:
    engine_box.release()  # one engine at a time
    convs = dataset(engine_box, tmp_path / "data.jsonl", singles=8, pairs=2, long=False)
    cfg = regen_config(engine_box, tmp_path, tmp_path / "data.jsonl",
                       "regenerate_concurrency = 4", backend="vllm")
    toml = local_console_toml(tmp_path, python=str(engine_box.python))
    env_before = dict(os.environ)
    os.environ.update({k: v for k, v in run_env().items()
                       if k.startswith(("VLLM_", "TQDM"))})
    try:
        rc = console_main(["run", "--host", "local", "--config", str(toml), "--pipeline",
                           str(cfg), "--until", "train", "--no-record"])
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    assert rc == 0
    out = tmp_path / "out"
    s = prepare_summary(out)
    assert s["regenerated"] == len(convs) - 2 and s["skipped"] == 0, s
    assert s["regeneration"]["server"] == "started by prepare"
    assert s["regenerated_tokens"] > 0
    log = (out / "regenerate" / "vllm_server.log").read_text()
    assert "/v1/chat/completions" in log  # the started server answered the requests
    assert not _servers_with(f"--max-model-len {64 + 40}")  # and was stopped
    assert json.loads((out / "manifests" / "train.json").read_text())["summary"]
