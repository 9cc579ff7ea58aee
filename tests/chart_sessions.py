"""A session with data for every chart (tests/console/tui/test_tui_charts.py): a training run reporting its
loss per step, the evaluate stage's acceptance per position, a bench sweep whose speedup falls
below 1 between concurrency 32 and 64, `bench watch` windows, and 8 GPUs sampled 5 times a
second for 90 s. Built through the event schemas like every real producer (Event.checked)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from remote.spine import events as ev
from remote.spine.events import Event
from tests.tui_sessions import HOST, Clock, stats_payload, write_session

CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)
OFFLINE = [0.78, 0.55, 0.37]
SERVED = [0.71, 0.49, 0.30]


def spec_tok_s(c: int) -> float:
    """Speedup 1.875 at 1 falling to 0.3 at 64: crosses 1.0 between 32 and 64."""
    return 40.0 * c * (1.9 - c / 40)


def chart_events(*, host: str = HOST, gpus: int = 8, steps: int = 120) -> list[Event]:
    c = Clock()
    out: list[Event] = []

    def add(kind: str, dt: float = 1.0, **payload: Any) -> None:
        out.append(Event.checked(kind, host, payload, c.tick(dt)))

    add(ev.CONNECTION_UP, summary=f"connected to {host}")
    add(ev.STAGE_START, stage="train", run_id="r-train")
    for step in range(1, steps + 1):
        loss = 2.0 * math.exp(-step / 40) + 0.4 + 0.05 * math.sin(step)
        add(ev.STAGE_PROGRESS, 0.2, stage="train", done=step, total=steps, unit="step", loss=round(loss, 4))
    add(ev.STAGE_END, stage="train", ok=True, seconds=24.0)
    add(ev.STAGE_START, stage="evaluate", run_id="r-eval")
    add(ev.STAGE_END, stage="evaluate", ok=True, seconds=3.0,
        result={"mean_length": 2.7, "rate": 0.57, "per_position": OFFLINE})
    for conc in CONCURRENCIES:
        add(ev.BENCH_POINT, label="baseline", concurrency=conc, output_tok_s=40.0 * conc, req_s=0.2 * conc,
            ttft_p50=0.2, ttft_p99=0.4, tpot_p50=0.025, tpot_p99=0.03, acceptance={})
        add(ev.BENCH_POINT, label="eagle3", concurrency=conc, output_tok_s=spec_tok_s(conc),
            req_s=0.3 * conc, ttft_p50=0.21, ttft_p99=0.42, tpot_p50=0.013, tpot_p99=0.02,
            acceptance={"rate": 0.5, "mean_length": 2.5, "drafts": 100, "per_position": SERVED})
    for w in range(30):
        rate = 0.45 + 0.2 * math.sin(w / 5)
        add(ev.BENCH_WATCH, 2.0, window=w, seconds=2.0, model="demo",
            acceptance={"rate": round(rate, 3), "mean_length": round(1 + 3 * rate, 3), "drafts": 50},
            accepted_tok_s=100.0)
    for i in range(90 * 5):
        payload = stats_payload(i, gpus)
        for g in payload["gpus"]:  # a smooth, different load per GPU: lines that can be told apart
            g["util"] = round(50 + 40 * math.sin(i / 60 + g["index"]), 1)
            g["mem_used"] = (0.3 + 0.08 * g["index"] + 0.02 * math.sin(i / 90)) * g["mem_total"]
        add(ev.STATS_SAMPLE, 0.2, **payload)
    return out


def chart_session(path: Path, **kwargs: Any) -> Path:
    return write_session(path, chart_events(**kwargs))
