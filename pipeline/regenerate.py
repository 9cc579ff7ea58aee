"""Regeneration through vLLM (prepare with `[data] regenerate = true` and `extract.backend =
"vllm"`, or `[data] vllm_url`): every assistant turn of every training conversation rewritten by
the target behind an OpenAI-compatible vLLM server, so the head learns the text the target
writes (speculators' docs, "Response Regeneration").

The server is the one at `data.vllm_url` (already up), or one prepare starts with the extract
stage's engine settings (tensor parallel, dtype, prefill chunk, trust_remote_code; eager on a CPU
build) and stops on every way out (pipeline.stages.extract_server.server_beside: return, exception,
SIGTERM; a SIGKILLed prepare's server gets SIGTERM from the kernel through die_with).

`data.regenerate_concurrency` conversations are in flight at once, each regenerated turn by turn
with its own regenerated history (a thread each, blocking HTTP: the server batches them). Each
request carries the sampling keys; its seed is `regenerate_seed + the conversation's index`, so a
conversation's answer does not depend on which others were in flight. Finished conversations go
to the journal (pipeline/regen_journal.py) as they finish; a rerun skips them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from pipeline.config_types import PipelineConfig
from pipeline.errors import PipelineError, RequestRefused
from pipeline.progress import Progress, emit
from pipeline.regen_client import base_url, chat, history_turn, model_id, turn_of
from pipeline.regen_journal import Journal
from pipeline.stages import PREPARE

Conversation = list[dict[str, str]]


def server_argv(cfg: PipelineConfig, port: int, *, cpu: bool) -> list[str]:
    """The target served as extract serves it (pipeline.stages.extract_server), without the
    capture: context long enough for a max_seq_len prompt and its answer."""
    from pipeline.stages.extract_server import engine_server_argv

    d = cfg.data
    argv = engine_server_argv(cfg, port, max_model_len=d.max_seq_len + d.regenerate_max_new_tokens,
                              cpu=cpu)
    if d.regenerate_reasoning_parser:
        argv += ["--reasoning-parser", d.regenerate_reasoning_parser]
    return argv


@contextlib.contextmanager
def server(cfg: PipelineConfig, log: Path) -> Iterator[str]:
    """The base URL of the server to regenerate with: data.vllm_url, or one started here."""
    if cfg.data.vllm_url:
        yield base_url(cfg.data.vllm_url)  # written with or without /v1
        return
    import torch

    from pipeline.stages.extract_server import loopback_server

    cpu = not torch.cuda.is_available()
    with loopback_server(lambda port: server_argv(cfg, port, cpu=cpu), log, PREPARE,
                         "starting the regeneration server") as url:
        yield url


def sampling(cfg: PipelineConfig) -> dict[str, Any]:
    """The sampling settings every request carries (and the manifest records)."""
    d = cfg.data
    return {"max_tokens": d.regenerate_max_new_tokens, "temperature": d.regenerate_temperature,
            "top_p": d.regenerate_top_p, "seed": d.regenerate_seed}


def regenerate_one(url: str, model: str, index: int, conv: Conversation, cfg: PipelineConfig,
                   template_reads_reasoning: bool) -> dict[str, Any]:
    """One conversation's journal record: every assistant turn regenerated in order, each from
    the regenerated history; or skipped with the reason of the first refused request."""
    params = {**sampling(cfg), "seed": cfg.data.regenerate_seed + index}
    new: Conversation = []
    tokens = 0
    for turn in conv:
        if turn["role"] != "assistant":
            new.append(turn)
            continue
        try:
            reply = chat(url, model, [history_turn(t) for t in new], params,
                         cfg.data.regenerate_timeout)
        except RequestRefused as exc:
            return {"i": index, "status": "skipped", "reason": exc.reason}
        tokens += reply.completion_tokens
        new.append(turn_of(reply, keep_thinking=cfg.data.regenerate_keep_thinking,
                           template_reads_reasoning=template_reads_reasoning))
    return {"i": index, "status": "regenerated", "tokens": tokens, "conversation": new}


def regenerate(cfg: PipelineConfig, tok: Any, convs: list[Conversation], journal_dir: Path,
               key: str, log: Path, *, fresh: bool = False
               ) -> tuple[list[Conversation], dict[str, Any]]:
    """The conversations the target regenerated (in the input's order, skipped ones left out)
    and the summary's regeneration facts."""
    journal = Journal(journal_dir, key, fresh=fresh)
    try:
        done_before = {i for i in journal.records if i < len(convs)}
        todo = [i for i in range(len(convs)) if i not in done_before]
        template = str(getattr(tok, "chat_template", "") or "")
        reads_reasoning = "reasoning_content" in template
        if done_before:
            emit("info", PREPARE, message=f"regeneration resumed: {len(done_before)} of "
                 f"{len(convs)} conversations already in {journal.path}")
        if todo:
            with server(cfg, log) as url:
                _run(cfg, url, convs, todo, journal, reads_reasoning, len(done_before))
    finally:
        journal.close()
    return _outcome(cfg, convs, journal, done_before)


def _run(cfg: PipelineConfig, url: str, convs: list[Conversation], todo: list[int],
         journal: Journal, reads_reasoning: bool, resumed: int) -> None:
    model = model_id(url)
    progress = Progress(PREPARE, len(convs), "conversations regenerated")
    progress.resume_at(resumed)
    t0 = time.monotonic()
    tokens = skipped = 0
    pool = ThreadPoolExecutor(max_workers=cfg.data.regenerate_concurrency,
                              thread_name_prefix="regenerate")
    pending = iter(todo)
    running: set[Future[dict[str, Any]]] = set()

    def fill() -> None:  # at most `concurrency` conversations submitted: a cancel waits for few
        while len(running) < cfg.data.regenerate_concurrency:
            i = next(pending, None)
            if i is None:
                return
            running.add(pool.submit(regenerate_one, url, model, i, convs[i], cfg,
                                    reads_reasoning))

    try:
        fill()
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                running.discard(fut)
                rec = fut.result()  # a PipelineError (server gone) ends the run here
                journal.append(rec)
                if rec["status"] == "skipped":
                    skipped += 1
                    emit("info", PREPARE, message=f"conversation {rec['i']} skipped: "
                         f"{rec['reason']}", skipped=rec["i"], reason=rec["reason"])
                tokens += int(rec.get("tokens", 0))
                elapsed = max(time.monotonic() - t0, 1e-9)
                here = progress.done + 1 - resumed
                left = len(convs) - progress.done - 1
                progress.advance(tokens=tokens, skipped=skipped,
                                 tokens_per_s=round(tokens / elapsed, 1),
                                 eta_s=round(left * elapsed / here, 1) if here else None)
            fill()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    progress.update(progress.done, force=True, tokens=tokens, skipped=skipped)


def _outcome(cfg: PipelineConfig, convs: list[Conversation], journal: Journal,
             resumed: set[int]) -> tuple[list[Conversation], dict[str, Any]]:
    out: list[Conversation] = []
    reasons: dict[str, int] = {}
    tokens = 0
    for i in range(len(convs)):
        rec = journal.records.get(i)
        if rec is None:  # not reached: every index was journaled or the run raised
            raise PipelineError(f"prepare: conversation {i} was never regenerated")
        if rec["status"] == "regenerated":
            out.append(rec["conversation"])
            tokens += int(rec.get("tokens", 0))
        else:
            reasons[rec["reason"]] = reasons.get(rec["reason"], 0) + 1
    facts = {"regenerated": len(out), "skipped": sum(reasons.values()),
             "skip_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:10]),
             "resumed": len(resumed), "regenerated_tokens": tokens,
             "regeneration": {"route": "vllm", "server": cfg.data.vllm_url or "started by prepare",
                              **sampling(cfg), "seed_per_conversation": "seed + index",
                              "concurrency": cfg.data.regenerate_concurrency,
                              "keep_thinking": cfg.data.regenerate_keep_thinking,
                              "journal": str(journal.path)}}
    if not out:
        raise PipelineError(f"prepare: the server refused every conversation "
                            f"({', '.join(f'{n}x {r}' for r, n in reasons.items())[:400]})")
    return out, facts
