"""All-reduce cost on a box, as `console allreduce sweep|trace|capture` runs it.

Each operation ends in one allreduce.result event (the sweep publishes its own from the box's
output; trace and capture publish the analysis here), so a recorded session replays the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from remote.allreduce.capture import capture as capture_traces
from remote.allreduce.sweep import run_sweep
from remote.allreduce.trace import analyse_files
from remote.link.hosts import HostConfig
from remote.link.transport import Transport
from remote.spine import events as ev
from remote.spine.bus import EventBus


async def sweep(transport: Transport, host: HostConfig, bus: EventBus, *, ranks: int,
                sizes: list[int], iters: int = 20, warmup: int = 5, backend: str = "auto",
                dtype: str = "float32", timeout: float = 600.0) -> dict[str, Any]:
    """Bus bandwidth over `sizes` on `ranks` ranks (torch.distributed on the box)."""
    bus.emit(ev.CONSOLE_INFO, host.name,
             message=f"all-reduce sweep on {host.name}: {ranks} ranks, {len(sizes)} sizes")
    return await run_sweep(transport, host, bus, ranks=ranks, sizes=sizes, iters=iters,
                           warmup=warmup, backend=backend, dtype=dtype, timeout=timeout)


def trace(bus: EventBus, files: Sequence[Path], patterns: Sequence[str], *,
          host: str = "") -> dict[str, Any]:
    """All-reduce share of device time in torch-profiler traces (one file per rank)."""
    payload = analyse_files(files, patterns)
    bus.emit(ev.ALLREDUCE_RESULT, host, **payload)
    return payload


async def capture(transport: Transport, host: HostConfig, bus: EventBus, *,
                  patterns: Sequence[str], profiler_dir: str, local_dir: Path,
                  seconds: float = 5.0, url: str | None = None, requests: int = 0,
                  max_tokens: int = 32, force: bool = False) -> dict[str, Any]:
    """Profile the box's vLLM for `seconds`, fetch the traces, analyse them (trace above)."""
    files = await capture_traces(transport, host, bus, profiler_dir=profiler_dir,
                                 local_dir=local_dir, seconds=seconds, url=url,
                                 requests=requests, max_tokens=max_tokens, force=force)
    return trace(bus, files, patterns, host=host.name)
