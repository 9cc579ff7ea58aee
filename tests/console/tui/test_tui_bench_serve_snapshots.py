"""Snapshots of the Bench screen's serve states at 80x24 and 120x40: a server starting, servers
ready with live acceptance windows and a sweep, and a server that failed with its engine log's
tail. The events are the ones remote/serving/serve.py and remote/ops/bench.py publish (payloads as a
live run of tests/console/tui/test_tui_serve.py recorded them, figures rounded), published on a live app's
bus. `pytest --snapshot-update` regenerates the SVGs; they were looked at by a human."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from remote.spine import events as ev
from tests.tui_helpers import HOST, live_app, settle

SnapCompare = Callable[..., bool]
SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
SPEC_URL, BASE_URL = "http://127.0.0.1:8000", "http://127.0.0.1:8001"


def _acceptance(drafts: float, accepted_per_pos: list[float]) -> dict[str, Any]:
    accepted = sum(accepted_per_pos)
    return {"rate": accepted / (3 * drafts), "mean_length": 1 + accepted / drafts,
            "per_position": [a / drafts for a in accepted_per_pos], "drafts": drafts,
            "draft_tokens": 3 * drafts, "accepted": accepted, "accepted_per_pos": accepted_per_pos}


def _starting(bus: Any) -> None:
    bus.emit(ev.SERVE_STARTING, HOST, role="speculative", url=SPEC_URL, run_id="20260301T120000-ab12cd")


def _ready(bus: Any) -> None:
    bus.emit(ev.SERVE_STARTING, HOST, role="baseline", url=BASE_URL, run_id="20260301T115500-ef34ab")
    bus.emit(ev.SERVE_READY, HOST, role="baseline", url=BASE_URL, run_id="20260301T115500-ef34ab", seconds=41.2)
    _starting(bus)
    bus.emit(ev.SERVE_READY, HOST, role="speculative", url=SPEC_URL, run_id="20260301T120000-ab12cd",
             seconds=52.7)
    for i, (drafts, per_pos) in enumerate([(0, [0, 0, 0]), (31, [14, 6, 2]), (43, [20, 9, 4]), (38, [17, 8, 3])]):
        acc = _acceptance(drafts, per_pos) if drafts else {"rate": None, "mean_length": None,
                                                           "per_position": [None] * 3, "drafts": 0}
        bus.emit(ev.BENCH_WATCH, HOST, window=i, seconds=5.0, model="demo-target", acceptance=acc,
                 accepted_tok_s=sum(per_pos) / 5.0, drafted_tok_s=3 * drafts / 5.0)
    for label, conc, tok_s, acc in (("baseline", 1, 21.4, None), ("baseline", 2, 33.0, None),
                                    ("speculative", 1, 30.1, _acceptance(37, [17, 7, 3])),
                                    ("speculative", 2, 41.5, _acceptance(74, [33, 15, 6]))):
        bus.emit(ev.BENCH_POINT, HOST, label=label, concurrency=conc, output_tok_s=tok_s, req_s=conc / 1.2,
                 ttft_p50=0.05, ttft_p99=0.09, tpot_p50=0.03, tpot_p99=0.05, acceptance=acc)
    bus.emit(ev.BENCH_SUMMARY, HOST, label="speculative", result_file="/tmp/bench.json",
             rows=[{"concurrency": 1, "speedup": 1.41}, {"concurrency": 2, "speedup": 1.26}],
             summary="speculative vs baseline: 1.41x at c=1, 1.26x at c=2")


def _failed(bus: Any) -> None:
    _starting(bus)
    bus.emit(ev.SERVE_FAILED, HOST, role="speculative", run_id="20260301T120000-ab12cd",
             error="the speculative server exited 1 (failed) while starting",
             log_tail=["Traceback (most recent call last):",
                       '  File "/box/pipeline/serve.py", line 88, in main',
                       "    os.execv(sys.executable, argv)",
                       "ValueError: invalid literal for dtype: 'no-such-dtype'"])


STATES = {"starting": _starting, "ready": _ready, "failed": _failed}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("state", list(STATES))
def test_bench_serve_snapshot(snap_compare: SnapCompare, state: str, size: str) -> None:
    app = live_app(start_screen="bench")

    async def publish(pilot: Pilot[Any]) -> None:
        STATES[state](app.source.bus)
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZES[size], run_before=publish)
