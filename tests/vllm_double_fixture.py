"""Starting the vLLM test double (tests/vllm_double.py) for a test, in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.child_process import end_process
from tests.vllm_double import DoubleConfig

ROOT = Path(__file__).resolve().parents[1]


class RunningDouble:
    """A double in its own process (its own GIL, so its step timing does not depend on the
    console's work in the test process)."""

    def __init__(self, cfg: DoubleConfig) -> None:
        self.cfg = cfg
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.vllm_double", json.dumps(asdict(cfg))],
            cwd=ROOT, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("listening "):
            self.stop()
            raise RuntimeError(f"vLLM double did not start: {line!r}")
        self.port = int(line.split()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def state(self) -> dict[str, Any]:
        return dict(httpx.get(self.url + "/_double/state").json())

    def set_counters(self, engine: int, drafts: int, draft_tokens: int, accepted: int,
                     per_pos: list[int]) -> None:
        httpx.post(self.url + "/_double/counters", json={
            "engine": engine, "drafts": drafts, "draft_tokens": draft_tokens,
            "accepted": accepted, "per_pos": per_pos}).raise_for_status()

    def restart(self) -> None:
        httpx.post(self.url + "/_double/restart").raise_for_status()

    def stop(self) -> None:
        end_process(self.proc, grace_s=5)


@pytest.fixture
def vllm_double() -> Iterator[Callable[..., RunningDouble]]:
    """Factory: `vllm_double(speculative=True, ...)` starts a double, stopped after the test."""
    started: list[RunningDouble] = []

    def start(**config: Any) -> RunningDouble:
        double = RunningDouble(DoubleConfig(**config))
        started.append(double)
        return double

    yield start
    for double in started:
        double.stop()
