"""Session files for the TUI tests, written with the real SessionWriter in the payload shapes
the brief fixes for every producer. Timestamps are fixed so snapshots are stable."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from console.sessions.writer import SessionWriter
from remote.spine import events as ev
from remote.spine.events import Event, JobLines

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
HOST = "gpu-box"

# Shapes as remote/probes/model_probe.py and remote/compat/ produce them.
MODEL_RESULT: dict[str, Any] = {
    "architecture": "KimiK25ForConditionalGeneration",
    "vllm_version": "0.16.0",
    "num_layers": 61,
    "status": "resolved",
    "supports_eagle3": False,
    "hops": [
        {"class": "KimiK25ForConditionalGeneration", "module": "vllm.model_executor.models.kimi_k25",
         "supports_eagle3": False, "attr": "language_model"},
        {"class": "DeepseekV2ForCausalLM", "module": "vllm.model_executor.models.deepseek_v2",
         "supports_eagle3": False, "attr": "model"},
        {"class": "DeepseekV2Model", "module": "vllm.model_executor.models.deepseek_v2",
         "supports_eagle3": False, "layers_attr": "layers"},
    ],
    "layers_path": "language_model.model.layers",
    "default_aux_layers": [2, 30, 58],
}

COMPAT_RESULT: dict[str, Any] = {
    "findings": [
        {"rule": "worker-model-model", "severity": "error", "stage": "extract",
         "title": "speculators 0.3 worker assumes model.model and supports_eagle3()",
         "detail": "KimiK25ForConditionalGeneration has no .model", "evidence": [],
         "fix": {"kind": "patch", "text": "worker patch: resolve layers path"}},
        {"rule": "tokenizer-trust", "severity": "warning", "stage": "extract",
         "title": "tokenizer loaded without trust_remote_code", "detail": "", "evidence": [],
         "fix": {"kind": "patch", "text": "worker patch: trust_remote_code"}},
        {"rule": "serve-version", "severity": "info", "stage": "serving",
         "title": "serving the head needs vLLM >= 0.18", "detail": "", "evidence": [],
         "fix": {"kind": "upgrade", "text": "upgrade vLLM on the serving box"}},
    ]
}

DIFF = """--- a/speculators/data_generation/custom_worker.py
+++ b/speculators/data_generation/custom_worker.py
@@ -40,7 +40,7 @@
-        if not supports_eagle3(model):
+        if not _has_layers(model):
             raise ValueError("Model does not support hidden state extraction")
-        layers = model.model.layers
+        layers = _resolve_layers(model)
"""
WORKER = "speculators/data_generation/custom_worker.py"


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def tick(self, seconds: float = 1.0) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def stats_payload(i: int, gpus: int = 2) -> dict[str, Any]:
    return {
        "source": "nvml",
        "host": {"cpu": 20.0 + i % 7, "mem_used": 64e9 + i * 1e8, "mem_total": 512e9, "load1": 3.0 + (i % 5) / 2},
        "gpus": [
            {"index": g, "name": "NVIDIA H200", "util": float((i * 13 + g * 29) % 100),
             "mem_used": 100e9 + g * 5e9 + i * 1e8, "mem_total": 141e9, "power": 300.0 + (i * 37 + g * 11) % 350,
             "power_limit": 700.0, "temp": 50 + (i + g) % 20, "sm_clock": 1980, "pcie_tx": 1e9, "pcie_rx": 2e9,
             "procs": [{"pid": 4242 + g, "name": "python3", "mem_used": int(90e9)}]}
            for g in range(gpus)
        ],
    }


def demo_events(*, host: str = HOST, log_lines: int = 40, reconnecting: bool = False) -> list[Event]:
    """A session: connect, stats, probes, a patch, two pipeline stages with a log, bench, allreduce."""
    c = Clock()
    out: list[Event] = []

    def add(kind: str, dt: float = 1.0, h: str = host, **payload: Any) -> None:
        # Through the schema, like every real producer: the double cannot drift from them.
        out.append(Event.checked(kind, h, payload, c.tick(dt)))

    add(ev.CONNECTION_UP, summary=f"connected to {host}")
    add(ev.PROBE_RESULT, probe="env", result={
        "python": {"executable": "/usr/bin/python3", "implementation": "CPython", "version": "3.12.3"},
        "packages": {"torch": "2.9.0", "vllm": "0.16.0", "speculators": "0.3.0", "transformers": "4.57.6"},
        "gpu": {"count": 2, "gpus": [{"index": 0}, {"index": 1}], "source": "nvml"}}, summary="env ok")
    for i in range(12):
        add(ev.STATS_SAMPLE, 0.5, **stats_payload(i))
    add(ev.PROBE_RESULT, probe="model", result=MODEL_RESULT, summary="layers at language_model.model.layers")
    add(ev.PROBE_RESULT, probe="compat", result=COMPAT_RESULT, summary="3 findings")
    add(ev.PATCH_PLANNED, file=WORKER, diff=DIFF, recipes=[
        {"name": "resolve-layers-path", "applies": True, "reason": ""},
        {"name": "trust-remote-code", "applies": True, "reason": ""},
        {"name": "scheduler-is-encoder-decoder", "applies": False, "reason": "already present in this version"},
    ])
    in_effect = [{"name": "resolve-layers-path", "in_effect": True},
                 {"name": "trust-remote-code", "in_effect": True},
                 {"name": "scheduler-is-encoder-decoder", "in_effect": False}]
    add(ev.PATCH_APPLIED, file=WORKER, recipes=in_effect, sha256="ab" * 32, summary="patch applied")
    add(ev.PATCH_VERIFIED, file=WORKER, recipes=in_effect, sha256="ab" * 32)
    add(ev.MARKER, label="pipeline begins")
    add(ev.STAGE_START, stage="prepare", run_id="r-prepare")
    add(ev.JOB_STARTED, run_id="r-prepare", name="prepare", argv=["python", "-m", "pipeline", "prepare"],
        pid=4242, log="/w/runs/r-prepare/log")
    offset = 0
    for i in range(log_lines):
        text = f"prepare: tokenized conversation {i} (loss-mask tokens {100 + i})"
        offset += len(text) + 1
        add(ev.JOB_LINE, 0.05, run_id="r-prepare", name="prepare", text=text, offset=offset)
        if i % 10 == 9:
            add(ev.STAGE_PROGRESS, 0.01, stage="prepare", done=i + 1, total=log_lines, unit="samples", rate=200.0)
    add(ev.JOB_EXIT, run_id="r-prepare", name="prepare", state="exited", returncode=0)
    add(ev.STAGE_END, stage="prepare", ok=True, seconds=2.5, outputs=[{"path": "/w/data/prepared.jsonl"}])
    add(ev.STAGE_START, stage="extract", run_id="r-extract")
    add(ev.JOB_STARTED, run_id="r-extract", name="extract", argv=["python", "-m", "pipeline", "extract"],
        pid=4343, log="/w/runs/r-extract/log")
    for i in range(5):
        add(ev.JOB_LINE, 0.1, run_id="r-extract", name="extract", text=f"extract: batch {i}", offset=100 + i)
    add(ev.STAGE_PROGRESS, stage="extract", done=1200, total=4000, unit="tok", rate=850.5)
    for i in range(12, 16):
        add(ev.STATS_SAMPLE, 0.5, **stats_payload(i))
    add(ev.ALLREDUCE_RESULT, mode="sweep", rows=[
        {"size": 2 ** k, "algbw": 1e9 * k, "busbw": 1.75e9 * k} for k in (10, 14, 18, 22, 26)])
    add(ev.ALLREDUCE_RESULT, mode="trace", rows=[
        {"kernel": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "calls": 1220, "seconds": 4.1, "share": 0.515},
        {"kernel": "vllm::cross_device_reduce_1stage", "calls": 300, "seconds": 0.2, "share": 0.02}])
    for conc in (1, 4, 16):
        add(ev.BENCH_POINT, label="baseline", concurrency=conc, output_tok_s=40.0 * conc, req_s=0.2 * conc,
            ttft_p50=0.2, ttft_p99=0.4, tpot_p50=0.025, tpot_p99=0.03, acceptance={})
        add(ev.BENCH_POINT, label="eagle3", concurrency=conc, output_tok_s=40.0 * conc * (2.0 - conc / 32),
            req_s=0.3 * conc, ttft_p50=0.21, ttft_p99=0.42, tpot_p50=0.013, tpot_p99=0.02,
            acceptance={"rate": 0.62, "mean_length": 2.9, "per_position": [0.81, 0.62, 0.44]})
    add(ev.BENCH_SUMMARY, summary="eagle3 1.97x at concurrency 1")
    if reconnecting:
        add(ev.CONNECTION_DOWN, error="Connection lost")
        add(ev.CONNECTION_RETRY, attempt=2, delay=4.0, error="Connection refused")
    return out


def write_session(path: Path, events: list[Event], hosts: tuple[str, ...] = (HOST,)) -> Path:
    with SessionWriter(path, list(hosts), started=T0) as w:
        for e in events:
            w.write(e)
    return path


def demo_session(path: Path, **kwargs: Any) -> Path:
    return write_session(path, demo_events(**kwargs))


# One log block after the demo: (run_id, texts, offsets, label of a marker after it or None).
Block = tuple[str, list[str], list[int], str | None]


def demo_with_blocks(path: Path, log_lines: int, blocks: Iterable[Block]) -> list[Event]:
    """The demo session, then log blocks written as the recorder writes a tail's block (one
    write_many of a JobLines: job.lines records), each at the demo's last time, the job
    "train"; returns every event in order, blocks expanded, as a fold of one event at a time
    would see them."""
    events = demo_events(log_lines=log_lines)
    flat = list(events)
    t0 = events[-1].ts
    with SessionWriter(path, [HOST], started=T0) as w:
        for e in events:
            w.write(e)
        for run_id, texts, offsets, label in blocks:
            block = JobLines(HOST, run_id, "train", texts, offsets, t0)
            w.write_many(block)
            flat.extend(block)
            if label is not None:
                marker = Event.checked(ev.MARKER, HOST, {"label": label}, t0)
                w.write(marker)
                flat.append(marker)
    return flat
