"""`console bench matrix`: one engine per (draft, K) at a time, each swept over temperatures and
concurrencies, the baseline first, in one run (the data: remote/bench/matrix.py).

Engines are the cost (a minute each on this CPU, minutes on a big target), so each (draft, K)
server is started once, warmed up once, measured at every temperature and concurrency, and
stopped before the next starts: two engines at once would share the box and each slow the
other, so the speedup would measure the contention. The result file is rewritten after every
cell; a rerun reads it and starts only the servers whose cells are missing.

Where the time goes is measured as the matrix runs (engine starts, warm-up, measured windows)
and "the rest" is the wall time minus those three: scrapes, port checks, stopping engines,
SSH. It is printed at the end and kept in the file.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote.bench.client import VllmClient
from remote.bench.driver import check_server, run_point
from remote.bench.matrix import (
    GUESS_START_S,
    GUESS_TOK_S_PER_STREAM,
    NONE,
    Cell,
    MatrixPlan,
    MatrixResult,
    draft_name,
    estimate_seconds,
    save_matrix,
)
from remote.bench.prompts import PromptSet
from remote.bench.reach import vllm_client
from remote.errors import RemoteError, UsageError
from remote.ops import serve as serve_ops
from remote.serving.serve import Served, ServeRunner, default_url
from remote.spine import events as ev
from remote.spine.bus import EventBus


@dataclass
class Clock:
    """Where this invocation's time went."""

    t0: float
    engine_start: float = 0.0
    warmup: float = 0.0
    measured: float = 0.0

    def split(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        rest = max(0.0, wall - self.engine_start - self.warmup - self.measured)
        return {"wall": wall, "engine_start": self.engine_start, "warmup": self.warmup,
                "measured": self.measured, "rest": rest}


def cell_text(m: MatrixResult, cell: Cell) -> str:
    f = cell.figures()
    speedup, lo, hi = m.speedup(cell)
    text = (f"{cell.name} T={cell.temperature:g} c={cell.concurrency}: "
            f"{f['tok_s']:.1f} tok/s")
    if speedup is not None and cell.draft != NONE:
        text += f", {speedup:.2f}x ({lo:.2f}-{hi:.2f})"
    if f["acceptance_length"] is not None:
        text += (f", acceptance length {f['acceptance_length']:.2f} "
                 f"rate {f['acceptance_rate']:.1%}")
    return text


async def run_matrix(r: ServeRunner, m: MatrixResult, prompts: PromptSet, *,
                     pipeline: Path | None, vllm_args: Sequence[str], out_path: Path,
                     start_timeout: float = 1800.0, request_timeout: float = 600.0,
                     ) -> MatrixResult:
    """Measure every cell of `m.plan` that `m` lacks; `m` is saved to `out_path` after each."""
    host = r.host.name
    plan = m.plan
    clock = Clock(time.monotonic())
    todo = m.missing()
    total = len(todo)
    done_here = 0
    url = default_url(r.host, "speculative")  # one server at a time, all at the same address
    failed: dict[str, str] = {}

    def emit(phase: str, summary: str, **fields: Any) -> None:
        r.bus.emit(ev.BENCH_MATRIX, host, phase=phase, summary=summary, **fields)

    def eta() -> float:
        left = m.missing()
        if not left:
            return 0.0
        starts = list(m.engine_starts.values())
        rates = [c.figures()["tok_s"] / c.concurrency for c in m.cells.values() if c.rounds]
        return estimate_seconds(
            plan, left, start_s=sum(starts) / len(starts) if starts else GUESS_START_S,
            tok_s_per_stream=sum(rates) / len(rates) if rates else GUESS_TOK_S_PER_STREAM)

    if todo:
        await preflight(r, {d for d, _, _, _ in todo}, pipeline)
    emit("plan", f"measuring {total} cells ({len(m.cells)} kept), "
         f"estimate {eta() / 60:.0f} min", total=total, kept=len(m.cells), eta_s=eta(), result_file=str(out_path))
    for draft, k in plan.servers():
        keys = [key for key in plan.cell_keys(draft, k) if key not in m.cells]
        if not keys:
            continue
        name = draft_name(draft, k)
        started = time.monotonic()
        try:
            served = await _start(r, draft, k, pipeline=pipeline, url=url,
                                  vllm_args=vllm_args, timeout=start_timeout)
        except UsageError:
            raise  # the same for every server (a taken port, a bad option): stop here
        except RemoteError as exc:
            clock.engine_start += time.monotonic() - started
            failed[name] = str(exc).splitlines()[0]
            r.bus.emit(ev.CONSOLE_WARNING, host,
                       message=f"{name}: not measured: {failed[name]}")
            continue
        clock.engine_start += time.monotonic() - started
        m.engine_starts[name] = served.seconds or (time.monotonic() - started)
        try:
            async with vllm_client(r.transport, served.url, is_local=r.host.is_local,
                                   timeout=request_timeout) as client:
                model = await check_server(client, None, speculative=draft != NONE)
                m.model = m.model or model
                t = time.monotonic()
                warm = await asyncio.gather(*(client.stream_chat(model, prompts.get(i),
                                                                 plan.max_tokens)
                                              for i in range(plan.warmup)))
                clock.warmup += time.monotonic() - t
                if warm and not any(w.ok for w in warm):
                    raise RemoteError(f"{name}: warm-up failed: {warm[0].error}")

                def measured(cell: Cell) -> None:
                    nonlocal done_here
                    clock.measured += sum(p.duration for p in cell.rounds)
                    m.cells[cell.key] = cell
                    done_here += 1
                    m.time_split = clock.split()
                    save_matrix(out_path, m)
                    left = eta()
                    emit("cell", f"[{done_here}/{total}, ETA {left / 60:.1f} min] "
                         + cell_text(m, cell), **_row(m, cell), done=done_here,
                         total=total, eta_s=left, result_file=str(out_path))

                await measure_cells(client, model, plan, prompts, keys, on_cell=measured)
        finally:
            await asyncio.shield(r.stop(served))
    m.complete = not m.missing()
    if todo:  # a rerun that found every cell measured keeps the time split of the runs that did
        m.time_split = clock.split()
        save_matrix(out_path, m)
    emit("done", "; ".join(m.recommendations()), recommendations=m.recommendations(),
         time_split=m.time_split, complete=m.complete, failed_servers=failed,
         result_file=str(out_path))
    return m


async def preflight(r: ServeRunner, drafts: set[str], pipeline: Path | None) -> None:
    """Every draft still to serve checked against the target and the box's vLLM (the head
    probe `serve start` runs) before the first engine starts: a head that does not fit, or a
    method this build lacks, is refused (DraftRefused, one line per mismatch) now, not after
    the engines before it have been paid for."""
    from remote.ops import heads

    drafts = {d for d in drafts if d != NONE}
    if not drafts:
        return
    target = heads.target_from(*await serve_ops.resolved_config(r, pipeline))
    for draft in sorted(drafts):
        await heads.check(r.transport, r.host, r.bus, draft=draft, target=target.model,
                          pipeline_head=target.head)


async def measure_cells(client: VllmClient, model: str, plan: MatrixPlan, prompts: PromptSet,
                        keys: Sequence[tuple[str, int, float, int]], *,
                        on_cell: Callable[[Cell], None]) -> None:
    """The cells `keys` of one running server, each `plan.rounds` windows; round i of a cell
    sends requests i*n..(i+1)*n-1 of the prompt set (n = plan.round_requests), with their seeds,
    so every server of the matrix gets the same requests in the same order."""
    for draft, k, temperature, c in keys:
        cell = Cell(draft, k, temperature, c)
        n = plan.round_requests(c)
        for i in range(plan.rounds):
            cell.rounds.append(await run_point(
                client, model, prompts, c, requests=n, max_tokens=plan.max_tokens,
                speculative=draft != NONE, offset=i * n, ignore_eos=plan.ignore_eos,
                temperature=temperature, seed=plan.seed))
        on_cell(cell)


def publish_found(bus: EventBus, m: MatrixResult) -> None:
    """A matrix read from its file, published as its run did (a cell event per cell, then its
    end), so the Bench screen and a replay show it as the live run showed it."""
    host = m.host
    for cell in m.cells.values():
        bus.emit(ev.BENCH_MATRIX, host, phase="cell", summary=cell_text(m, cell),
                 **_row(m, cell), found=True, result_file=str(m.path))
    bus.emit(ev.BENCH_MATRIX, host, phase="done", summary="; ".join(m.recommendations()),
             recommendations=m.recommendations(), time_split=m.time_split,
             complete=m.complete, found=True, result_file=str(m.path))


def _row(m: MatrixResult, cell: Cell) -> dict[str, Any]:
    for row in m.rows():
        if (row["draft"], row["k"], row["temperature"], row["concurrency"]) == cell.key:
            return {k: v for k, v in row.items() if k != "acceptance"}
    return {}


async def _start(r: ServeRunner, draft: str, k: int, *, pipeline: Path | None, url: str,
                 vllm_args: Sequence[str], timeout: float) -> Served:
    """One server of the matrix: the target alone for `none`, else the draft with K tokens
    (`console serve start --draft D --k K`'s operation)."""
    role = "baseline" if draft == NONE else "speculative"
    return await serve_ops.start(r, role, pipeline=pipeline, url=url, vllm_args=vllm_args,
                                 timeout=timeout, draft=draft,
                                 k=None if draft == NONE else k)
