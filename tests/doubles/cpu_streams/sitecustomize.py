"""Test double for CUDA streams and events on a CPU-only torch, for vLLM's
ExampleHiddenStatesConnector (speculators 0.9's extraction path), which orders its
device-to-host copy with `torch.cuda.Stream` / `torch.cuda.Event` / `torch.cuda.stream` into a
`pin_memory=True` buffer.

Why faithful: on a CPU every op runs synchronously in program order, so a stream that waits for
nothing and an event that is always complete give the same ordering the CUDA objects enforce on
a GPU. vLLM's own CPU model runner swaps in the same kind of placeholders while it builds
(`_torch_cuda_wrapper` in v1/worker/cpu_model_runner.py). Installed only where CUDA is absent,
and only in processes started with this directory on PYTHONPATH (the extraction test's).
"""

from __future__ import annotations

import contextlib
from typing import Any


class _Event:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True


class _Stream:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import torch

        self.device = torch.device("cpu")

    def wait_event(self, event: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, event: Any = None) -> _Event:
        return event or _Event()

    def query(self) -> bool:
        return True


def _install() -> None:
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        return
    torch.cuda.Stream = _Stream  # type: ignore[misc,assignment]
    torch.cuda.Event = _Event  # type: ignore[misc,assignment]
    torch.cuda.stream = lambda stream=None: contextlib.nullcontext()  # type: ignore[assignment]
    # Pinned (page-locked) host memory needs a CUDA allocator; on a CPU the buffer it stages a
    # device-to-host copy in is plain memory holding the same bytes.
    real_empty_like = torch.empty_like

    def empty_like(*args: Any, pin_memory: bool = False, **kwargs: Any) -> Any:
        return real_empty_like(*args, **kwargs)

    torch.empty_like = empty_like  # type: ignore[assignment]


_install()
