"""extract through speculators 0.9's own route, where the box has CUDA: the target served with
the extract_hidden_states speculative method and vLLM's ExampleHiddenStatesConnector writing the
files, then `speculators generate-offline-data` against it (pipeline.stages.extract says when
this route is taken and why not without CUDA). Its own module: a server and a subprocess's logs,
nothing the in-process routes share.

The server's lifecycle (`server_beside`, the same for online training and regenerate): its own
process group (vLLM starts workers), a SIGTERM of the stage turned into an exit that runs the
cleanup, and the kernel's parent-death signal for a stage killed outright: it is stopped, group
and all, on every exit path.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from pipeline.config_types import PipelineConfig
from pipeline.errors import PipelineError
from pipeline.progress import Progress, emit
from pipeline.ranks import free_port
from pipeline.regen_client import api_url
from pipeline.runner import StageContext
from pipeline.vllm_engine_kw import with_cpu_kv_cache


def engine_server_argv(cfg: PipelineConfig, port: int, *, max_model_len: int,
                       cpu: bool) -> list[str]:
    """The target on vLLM's OpenAI server on loopback with the extract stage's engine settings
    (tensor parallel, dtype, prefill chunk, trust_remote_code): the extraction server's base and
    regeneration's (pipeline/regenerate.py). Started as `python -m
    vllm.entrypoints.openai.api_server` (pipeline.serve says why not `vllm serve`). On a CPU
    build: eager (compiling takes minutes there)."""
    from pipeline.serve import SERVER_MODULE

    e = cfg.extract
    argv = [sys.executable, "-m", SERVER_MODULE, "--model", str(cfg.model_path),
            "--host", "127.0.0.1", "--port", str(port),
            "--tensor-parallel-size", str(e.tensor_parallel_size),
            "--max-model-len", str(max_model_len), "--dtype", e.dtype]
    if e.max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(e.max_num_batched_tokens)]
        if e.max_num_batched_tokens < 256:  # vLLM refuses a chunk below max_num_seqs
            argv += ["--max-num-seqs", str(e.max_num_batched_tokens)]
    if cpu:
        argv.append("--enforce-eager")
    if cfg.target.trust_remote_code:
        argv.append("--trust-remote-code")
    return argv


def vllm_09_server_argv(cfg: PipelineConfig, staging: Path, port: int, *,
                        cpu: bool = False) -> list[str]:
    """The extraction server, as speculators 0.9's scripts/launch_vllm.py builds it: the
    target served with the extract_hidden_states speculative method (ids incl. N) and the
    ExampleHiddenStatesConnector writing to a shared directory. Prefix caching off: a cached
    prefix skips the forward for its tokens, so their rows would be missing."""
    speculative = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                   "draft_model_config": {"hf_config": {
                       "eagle_aux_hidden_state_layer_ids": cfg.all_layer_ids}}}
    kv_transfer = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                   "kv_connector_extra_config": {"shared_storage_path": str(staging)}}
    return [*engine_server_argv(cfg, port, max_model_len=cfg.data.max_seq_len + 1, cpu=cpu),
            "--speculative_config", json.dumps(speculative),
            "--kv_transfer_config", json.dumps(kv_transfer), "--no-enable-prefix-caching"]


def wait_ready(proc: subprocess.Popen[bytes], endpoint: str, timeout: float, log: Path) -> None:
    """Until the extraction server answers on `endpoint` (this stage's route and online
    training's, pipeline.trainers.online), or one line saying why it never will."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise PipelineError(f"the extraction server exited {proc.returncode} before it "
                                f"answered (see {log})")
        try:
            with urllib.request.urlopen(endpoint + "/models", timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise PipelineError(f"the extraction server did not answer within {timeout:.0f}"
                                    f" s (see {log})") from None
            time.sleep(0.5)


def extract_vllm_09(cfg: PipelineConfig, ctx: StageContext, samples: list[dict[str, list[int]]],
                     hs_dir: Path, progress: Progress) -> None:
    """speculators 0.9.x: start the extraction server (above), wait for it, then
    `speculators generate-offline-data` against it (it skips hs_{i} files already there, so a
    re-run resumes), then stop the server (the stage checked vLLM and the GPUs first)."""
    from pipeline.formats import write_arrow_dataset

    write_arrow_dataset(ctx.workdir, samples)
    staging = ctx.workdir / "staging"
    staging.mkdir(exist_ok=True)
    import torch

    cpu = not torch.cuda.is_available()
    try:
        with loopback_server(lambda port: vllm_09_server_argv(cfg, staging, port, cpu=cpu),
                             ctx.workdir / "vllm_server.log", "extract",
                             "starting the extraction server") as url:
            argv = [sys.executable, "-m", "speculators", "generate-offline-data",
                    "--model", str(cfg.model_path), "--endpoint", api_url(url),
                    "--preprocessed-data", str(ctx.workdir), "--output", str(hs_dir),
                    "--validate-outputs", "--fail-on-error"]
            emit("info", "extract", message="running " + " ".join(argv))
            # Its own log file, like the server's: typer/rich print a failure as a boxed
            # traceback hundreds of lines long, which would flood the job log the console shows.
            gen_log = ctx.workdir / "generate_offline_data.log"
            with open(gen_log, "ab") as fh:
                proc = subprocess.run(argv, check=False, stdout=fh, stderr=subprocess.STDOUT,
                                      env={**os.environ, "_TYPER_STANDARD_TRACEBACK": "1"})
            if proc.returncode != 0:
                raise PipelineError(f"speculators generate-offline-data exited "
                                    f"{proc.returncode}: {_last_error_line(gen_log)} (see "
                                    f"{gen_log} and {ctx.workdir / 'vllm_server.log'})")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _last_error_line(log: Path) -> str:
    """The last line of a log that names an error (else its last line), cut short."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    named = [ln for ln in lines if "Error" in ln or "error" in ln]
    line = (named or lines or ["(empty log)"])[-1]
    return line if len(line) <= 300 else line[:297] + "..."


STOP_GRACE_S = 30.0


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


@contextlib.contextmanager
def loopback_server(make_argv: Callable[[int], list[str]], log: Path, stage: str,
                    what: str) -> Iterator[str]:
    """`make_argv(port)` on a free loopback port, said in one line (`WHAT: ARGV`) and kept
    beside the stage (`server_beside`, with a CPU build's KV cache default); its base URL (a
    caller that points a tool at the API adds its root with pipeline.regen_client.api_url).
    The extraction server, online training's and regeneration's."""
    port = free_port()
    argv = make_argv(port)
    emit("info", stage, message=f"{what}: " + " ".join(argv))
    url = f"http://127.0.0.1:{port}"
    with server_beside(argv, api_url(url), log, env=with_cpu_kv_cache(os.environ)):
        yield url
